"""Template tags of the operator's desk: instants with their zone, relative times with the absolute
one on hover, JSON for reading, long keys clipped with a tooltip and a copy button.

Loaded as {% load harness %} (TEMPLATES libraries). The same functions serve admin list columns."""

import json
from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince, timeuntil
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from harness_site.audit.models import DeskPreference
from harness_site.display import stamp, zones_for
from tasks.rules import keys
from tasks.skills.error_words import error_kind_label

register = template.Library()

CLIP_CHARS = 48


def when_html(request, at: datetime | None, rule_zone: str | None = None) -> str:
    """<time> for an instant: on the display zone's clock (the rule's where given), the other zone beside
    it, the UTC instant and how long ago on hover. "—" for None."""
    if at is None:
        return "—"
    primary, secondary = zones_for(request, rule_zone)
    utc = at.astimezone(UTC)
    title = f"{stamp(utc, UTC)} · {relative_text(utc)}"
    if secondary is None:
        return format_html(
            '<time class="when" datetime="{}" title="{}">{}</time>', utc.isoformat(), title, stamp(at, primary)
        )
    return format_html(
        '<time class="when" datetime="{}" title="{}">{} <span class="tz-alt">({})</span></time>',
        utc.isoformat(),
        title,
        stamp(at, primary),
        _short_stamp(at, primary, secondary),
    )


def _short_stamp(at: datetime, primary, secondary) -> str:
    """The second zone's reading, without the date when both clocks show the same day."""
    a, b = at.astimezone(primary), at.astimezone(secondary)
    if a.date() == b.date():
        return stamp(at, secondary)[11:]
    return stamp(at, secondary)


def relative_text(at: datetime, now: datetime | None = None) -> str:
    """ "3 minutes ago" or "in 5 minutes", in the active language."""
    now = now or timezone.now()
    if at <= now:
        return _("%(delta)s ago") % {"delta": timesince(at, now)}
    return _("in %(delta)s") % {"delta": timeuntil(at, now)}


def ago_html(at: datetime | None) -> str:
    """A relative time ("3 minutes ago") that keeps counting in the page, absolute UTC on hover."""
    if at is None:
        return "—"
    utc = at.astimezone(UTC)
    return format_html(
        '<time class="ago" datetime="{}" title="{}">{}</time>', utc.isoformat(), stamp(utc, UTC), relative_text(utc)
    )


def clip_html(value, chars: int = CLIP_CHARS, *, copy: bool = False) -> str:
    """A long key cut to `chars` with the whole value on hover (and a copy button)."""
    text = "" if value is None else str(value)
    shown = text if len(text) <= chars else text[: chars - 1] + "…"
    button = _copy_button(text) if copy else ""
    return format_html('<code class="clip" title="{}">{}</code>{}', text, shown, button)


def _copy_button(text: str) -> str:
    return format_html(
        ' <button type="button" class="copy-btn" data-copy="{}" title="{}">{}</button>', text, _("Copy"), _("copy")
    )


def key_html(biz_key, chars: int = CLIP_CHARS, *, rule_name: str = "", whole: bool = False, copy: bool = True) -> str:
    """A business key for people: the part that differs between runs of one rule (the slot or the
    object; the whole key with `whole`), unescaped, cut from the left so its end shows; the whole key
    unescaped on hover, and a copy button that copies the key as stored."""
    stored = "" if biz_key is None else str(biz_key)
    text = keys.unescape(stored) if whole else keys.differing_part(stored, rule_name=rule_name)
    shown = text if len(text) <= chars else "…" + text[-(chars - 1) :]
    title = keys.unescape(stored)
    button = _copy_button(stored) if copy else ""
    return format_html('<code class="clip key" title="{}">{}</code>{}', title, shown, button)


@register.simple_tag
def key(biz_key, chars=CLIP_CHARS, rule_name="", whole=False):
    return key_html(biz_key, int(chars), rule_name=rule_name or "", whole=bool(whole))


@register.simple_tag
def strip_cells(cells, rule_name="", run_prefix="", decision_prefix="") -> str:
    """A history strip's cells (runs.desk.status.history_strips) as links, built here rather than in the
    template: a status page draws thousands of them, each with its title (what, which key, when)."""
    no_run = _("no run")
    html = []
    for c in cells:
        if c["kind"] == "empty":
            html.append("<span></span>")
            continue
        at = stamp(c["at"], UTC)
        if c["kind"] == "decision":
            url = f"{decision_prefix}{c['decision_id']}/change/"
            title = f"{no_run}: {c['reason_label']} · {at}"
        else:
            url = f"{run_prefix}{c['run_id']}/change/"
            title = f"{c['state_label']} · {keys.differing_part(c['biz_key'], rule_name=rule_name)} · {at}"
        html.append(format_html('<a class="c-{}" href="{}" title="{}"></a>', c["kind"], url, title))
    return mark_safe("".join(html))  # every piece above is escaped by format_html


@register.filter
def error_kind(value) -> str:
    """An error kind (`invalid_param`) in the user's language, as the run list's filter says it."""
    return error_kind_label(value)


@register.filter
def key_part(value, rule_name="") -> str:
    """The part of a stored key that differs between runs of one rule, unescaped (tasks.rules.keys)."""
    return keys.differing_part("" if value is None else str(value), rule_name=rule_name or "")


@register.filter
def unescaped(value) -> str:
    """A stored key as a person reads it (`callback%3Aorder-7` reads `callback:order-7`)."""
    return keys.unescape("" if value is None else str(value))


@register.simple_tag(takes_context=True)
def when(context, at, rule_zone=None):
    return when_html(context.get("request"), at, rule_zone)


@register.simple_tag
def ago(at):
    return ago_html(at)


@register.simple_tag
def clip(value, chars=CLIP_CHARS, copy=False):
    return clip_html(value, int(chars), copy=bool(copy))


@register.filter
def pretty_json(value) -> str:
    """JSON as people read it: indented, non-ASCII kept, keys in their stored order."""
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


@register.simple_tag(takes_context=True)
def zone_choices(context):
    """(value, label, selected) for the display-zone switch in the page header."""
    request = context.get("request")
    current = getattr(request, "display_zone", DeskPreference.Zone.RULE)
    return [(value, label, value == current) for value, label in DeskPreference.Zone.choices]


LIVE_SECONDS = 5


@register.simple_tag
def live_seconds() -> int:
    """How often live parts of a page re-read themselves."""
    return LIVE_SECONDS


@register.simple_tag(takes_context=True)
def live_attrs(context, on=True):
    """The attributes that make an element re-read itself from the server every few seconds (htmx),
    unless the operator paused live refresh or is choosing rows; none once `on` is false (a final run)."""
    request = context.get("request")
    if not on or request is None:
        return ""
    return format_html(
        'hx-get="{}" hx-trigger="every {}s [window.harnessLive && harnessLive.active()]" '
        'hx-select="#live-region" hx-swap="outerHTML" data-live="1"',
        request.get_full_path(),
        LIVE_SECONDS,
    )


@register.filter
def field_label(name: str, opts) -> str:
    """A model field's label for its name (a history's changed field), or the name if it has none."""
    try:
        return str(opts.get_field(name).verbose_name)
    except Exception:  # a field since removed from the model: its name is all there is
        return name


# The prefixes rule_pause / rule_resume write on a version's change reason (tasks/triggers/operator.py).
REASON_PREFIXES = {"paused": gettext_lazy("Paused"), "resumed": gettext_lazy("Resumed")}


@register.filter
def change_reason(text) -> str:
    """A version's change reason, its "paused:" or "resumed:" prefix in the reader's language."""
    head, sep, rest = str(text or "").partition(": ")
    if sep and head in REASON_PREFIXES:
        return f"{REASON_PREFIXES[head]}: {rest}"
    return str(text or "") or "—"


@register.filter
def shown_value(value) -> str:
    """A stored value as people read it: yes / no for booleans, "—" for nothing, not Python's words."""
    if value is True:
        return _("yes")
    if value is False:
        return _("no")
    if value is None or value == "":
        return "—"
    return value
