/* The operator's desk in the browser: the display-zone switch, live refresh (htmx) with a pause
   toggle and "updated N s ago", relative times that keep counting, copy buttons, and table cells
   labelled for the stacked phone layout. No framework beyond htmx; no network but our own pages. */
(function () {
  "use strict";
  var PAUSE_KEY = "harness.live.paused";
  var lastUpdate = Date.now();

  // The browser's zone, for the "my browser's zone" display choice (read by the server from a cookie).
  try {
    var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    if (zone) { document.cookie = "harness_browser_zone=" + encodeURIComponent(zone) + "; path=/; SameSite=Lax"; }
  } catch (e) { /* old browser: UTC it is */ }

  function paused() { try { return localStorage.getItem(PAUSE_KEY) === "1"; } catch (e) { return false; } }
  function choosingRows() { return !!document.querySelector("#live-region input.action-select:checked, #live-region input:focus, #live-region textarea:focus, #live-region select:focus"); }

  window.harnessLive = {
    active: function () { return !paused() && !choosingRows() && document.visibilityState !== "hidden"; },
    paused: paused
  };

  function updateBar() {
    var bar = document.getElementById("live-bar");
    if (!bar) { return; }
    var label = document.getElementById("live-updated");
    var n = Math.round((Date.now() - lastUpdate) / 1000);
    var text = bar.dataset.updated.replace("{n}", String(n));
    if (paused()) { text += " · " + bar.dataset.paused; }
    label.textContent = text;
    bar.classList.toggle("is-paused", paused());
    var toggle = document.getElementById("live-toggle");
    if (toggle) { toggle.textContent = paused() ? bar.dataset.labelResume : bar.dataset.labelPause; }
  }

  function rel(seconds) {
    var lang = document.documentElement.lang || "en";
    var units = [["day", 86400], ["hour", 3600], ["minute", 60], ["second", 1]];
    try {
      var f = new Intl.RelativeTimeFormat(lang, {numeric: "auto"});
      for (var i = 0; i < units.length; i++) {
        if (Math.abs(seconds) >= units[i][1] || units[i][1] === 1) { return f.format(Math.round(seconds / units[i][1]), units[i][0]); }
      }
    } catch (e) { return null; }
    return null;
  }

  function tickRelative() {
    document.querySelectorAll("time.ago[datetime]").forEach(function (t) {
      var at = Date.parse(t.getAttribute("datetime"));
      if (!isNaN(at)) { var s = rel((at - Date.now()) / 1000); if (s) { t.textContent = s; } }
    });
  }

  function labelCells(root) {
    // Phones: tables stack into cards; each cell says which column it was.
    (root || document).querySelectorAll("table").forEach(function (table) {
      // A sorted column's header also holds its sort priority ("2"): only its title names the column.
      var heads = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) { return (th.querySelector(".text") || th).textContent.trim(); });
      if (!heads.length) { return; }
      table.querySelectorAll("tbody tr").forEach(function (tr) {
        Array.prototype.forEach.call(tr.children, function (td, i) { if (heads[i] && !td.dataset.label) { td.dataset.label = heads[i]; } });
      });
    });
  }

  function setup(root) {
    labelCells(root);
    tickRelative();
  }

  document.addEventListener("DOMContentLoaded", function () {
    setup(document);
    var select = document.getElementById("zone-select");
    if (select) {
      select.addEventListener("change", function () {
        var form = select.form;
        try { form.elements.browser_zone.value = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) {}
        form.submit();
      });
    }
    var toggle = document.getElementById("live-toggle");
    if (toggle) {
      toggle.addEventListener("click", function () {
        try { localStorage.setItem(PAUSE_KEY, paused() ? "0" : "1"); } catch (e) {}
        updateBar();
      });
    }
    document.body.addEventListener("click", function (ev) {
      var b = ev.target.closest ? ev.target.closest(".copy-btn") : null;
      if (!b) { return; }
      if (navigator.clipboard) { navigator.clipboard.writeText(b.dataset.copy).catch(function () {}); }
      b.classList.add("copied");
      setTimeout(function () { b.classList.remove("copied"); }, 1200);
    });
    updateBar();
    setInterval(function () { updateBar(); tickRelative(); }, 1000);
  });

  document.addEventListener("htmx:afterSwap", function (ev) {
    lastUpdate = Date.now();
    setup(ev.target.parentNode || document);
    // The admin's action checkboxes were replaced: bind them again.
    if (window.Actions && document.querySelector("#live-region tr input.action-select")) {
      window.Actions(document.querySelectorAll("tr input.action-select"));
    }
    var region = document.getElementById("live-region");
    if (region && !region.dataset.live) {
      var state = document.getElementById("live-state");
      var toggle = document.getElementById("live-toggle");
      if (state && region.dataset.stopped) { state.textContent = region.dataset.stopped; }
      if (toggle) { toggle.remove(); }
    }
    updateBar();
  });
})();
