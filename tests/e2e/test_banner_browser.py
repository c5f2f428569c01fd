# ruff: noqa: F811  (the browser fixture imported from the fit tests is redefined as an argument)
"""The system banner in headless Chromium, English and zh-Hans, 1440 and 390 px: beat really stops,
every open desk page says the scheduler is down without a reload, and says nothing once beat runs
again. BANNER_SHOTS=dir saves screenshots."""

import os
from datetime import timedelta
from pathlib import Path

from django.urls import reverse

from deadletters.models import AlertChannel
from runs.engine import outages
from runs.models import SchedulerTick
from tests.support.browser import BROWSER_MARKS, LAPTOP, PHONE, login, make_browser, overflow, until  # noqa: F401 - make_browser: a fixture
from tests.support.desk import make_user
from tests.support.processes import wait_for

SCREENS = [("en-US", LAPTOP), ("en-US", PHONE), ("zh-CN", LAPTOP), ("zh-CN", PHONE)]
STALLED = {"en": "The scheduler has not ticked for", "zh": "调度器已"}
FACTS = "#system-banner li[data-code]"
HEADER = "return document.getElementById('status-harness').innerHTML"  # the status board's own line
OUTAGE = 120  # seconds: a loaded machine's worker and beat take a while to start and to notice

pytestmark = BROWSER_MARKS


def _shot(browser, name: str) -> None:
    folder = os.environ.get("BANNER_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(folder) / f"{name}.png"))


def _codes(browser) -> list[str]:
    from selenium.webdriver.common.by import By

    return [li.get_attribute("data-code") for li in browser.find_elements(By.CSS_SELECTOR, FACTS)]


def test_the_banner_says_the_scheduler_is_down_on_every_page_while_beat_is_stopped(
    make_browser, live_server, harness, monkeypatch
):
    from selenium.webdriver.common.by import By

    # A stall is 10 tick periods (10 s at the default 1 s tick), not the 30 s floor: a shorter test.
    monkeypatch.setattr(outages, "MIN_STALL", timedelta(0))
    make_user("omar", "On-call")
    AlertChannel.objects.create(name="log", kind="log", min_severity="notice")  # alerts reach someone
    harness.worker()
    beat = harness.beat()
    wait_for(lambda: SchedulerTick.objects.filter(name="scheduler").exists(), timeout=OUTAGE, what="beat's first tick")
    pages = [reverse("harness-status"), reverse("admin:runs_taskrun_changelist")]
    browsers = []
    for i, (lang, size) in enumerate(SCREENS):
        browser = make_browser(size, lang=lang)
        login(browser, live_server, "omar")
        browser.get(live_server.url + pages[i % 2])
        # The worker reports itself on every queue and beat ticks: nothing to say.
        until(browser, lambda d: d.find_elements(By.ID, "system-banner") and not _codes(d), "a quiet banner", OUTAGE)
        browsers.append((browser, lang[:2], size[0], pages[i % 2]))

    beat.stop()
    for browser, lang, width, page in browsers:
        browser.execute_script("window.__notReloaded = true")
        until(browser, lambda d: "scheduler_stalled" in _codes(d), "the stall, live", OUTAGE)
        assert browser.execute_script("return window.__notReloaded === true"), "the page was reloaded"
        # The banner is re-rendered every 5 s: the sentence and its link are read in one script call, so
        # a swap between two reads cannot leave a stale element in between.
        text, link = browser.execute_script(
            "const li = document.querySelector(arguments[0]);return [li.innerText, li.querySelector('a').href];",
            f"{FACTS}[data-code=scheduler_stalled]",
        )
        assert STALLED[lang] in text
        assert link.endswith(reverse("harness-dashboard") + "#dash-scheduler")
        scroll, client = overflow(browser)
        assert scroll <= client, f"{lang} {width}: {scroll} > {client}"
        if page == reverse("harness-status"):
            # The board's live region refreshes on its own cycle, so its header may trail the banner by one.
            until(browser, lambda d: "scheduler" in d.execute_script(HEADER), "the status header's line", OUTAGE)
        _shot(browser, f"banner-stalled-{lang}-{width}")

    harness.beat("beat2")
    for browser, lang, width, _page in browsers:
        until(browser, lambda d: not _codes(d), "the banner gone once beat ticks again", OUTAGE)
        _shot(browser, f"banner-gone-{lang}-{width}")


def test_the_next_page_opens_with_the_banner_in_place_and_does_not_move_under_a_click(make_browser, live_server):
    """The banner is fetched after a page loads (its figures probe the broker, which must not hold up
    the page). On the next page of the tab it is in place from the first paint, so the page does not
    jump down when the fetch lands, under a click about to land on a ticket."""
    from selenium.webdriver.common.by import By

    make_user("omar", "On-call")  # no scheduler tick: the banner has something to say
    browser = make_browser(PHONE)
    login(browser, live_server, "omar")
    browser.get(live_server.url + reverse("harness-status"))
    until(browser, lambda d: _codes_now(d), "the banner's facts")
    facts = _codes_now(browser)
    # The next page, read as soon as the browser has it, before the banner's own fetch can answer.
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*" + reverse("harness-system-banner") + "*"]})
    browser.get(live_server.url + reverse("admin:runs_taskrun_changelist"))
    assert _codes_now(browser) == facts  # its fetch blocked: what the tab last showed, from the first paint
    assert browser.find_element(By.ID, "system-banner").size["height"] > 0


def _codes_now(browser) -> list[str]:
    """The banner's fact codes read in one script call: a refresh cannot swap the banner in between."""
    return browser.execute_script(f"return Array.from(document.querySelectorAll('{FACTS}')).map(li => li.dataset.code)")
