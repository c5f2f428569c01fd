"""The lint checklist in the user's language. tasks.rules.lint is pure (no Django, so no gettext) and
words its findings in English; the admin reads each sentence back by its pattern and says it through
the catalogue. A sentence no pattern knows is shown as it is (a test lists every English string)."""

import re

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from tasks.rules import lint

CHECKS = {
    "timezone explicit": gettext_lazy("timezone explicit"),
    "dependencies have a source": gettext_lazy("dependencies have a source"),
    "dedupe key per business unit": gettext_lazy("dedupe key per business unit"),
    "retries capped with jitter": gettext_lazy("retries capped with jitter"),
    "catch-up window set": gettext_lazy("catch-up window set"),
    "lease TTL above p99 duration": gettext_lazy("lease TTL above p99 duration"),
    "alert carries run id and biz_key": gettext_lazy("alert carries run id and biz_key"),
    "backpressure class fits": gettext_lazy("backpressure class fits"),
}

# (English pattern, translated template with the pattern's named groups). Order matters: first match wins.
_MESSAGES = [
    (r"Schedule is read in (?P<zone>.+)\.", gettext_lazy("Schedule is read in %(zone)s.")),
    (r"(?P<error>.+); the host zone must never decide\.", gettext_lazy("%(error)s; the host zone must never decide.")),
    (r"No readiness dependencies\.", gettext_lazy("No readiness dependencies.")),
    (
        r"No flag (?P<flags>.+) is set for any scope: .*",
        gettext_lazy(
            "No flag %(flags)s is set for any scope: check that a pipeline, API token or operator sets it, "
            "or every slot will wait until its deadline."
        ),
    ),
    (r"Flags (?P<flags>.+) are set by their producers\.", gettext_lazy("Flags %(flags)s are set by their producers.")),
    (
        r"\{business_date\} is the day an event arrived: .*",
        gettext_lazy(
            "{business_date} is the day an event arrived: the same event re-sent after midnight becomes a second "
            'run. Remove it, or tick "event key by date".'
        ),
    ),
    (
        r'"Event key by date" is on: .*',
        gettext_lazy('"Event key by date" is on: the same event sent again on another day is a new run.'),
    ),
    (
        r"Key varies by (?P<which>.+); it is kept under this rule's own namespace\.",
        gettext_lazy("Key varies by %(which)s; it is kept under this rule's own namespace."),
    ),
    (
        r"Key has no date or object placeholder: .*",
        gettext_lazy("Key has no date or object placeholder: every slot would share one run. Add {business_date}."),
    ),
    (
        r"At most (?P<n>\d+) attempts within (?P<window>\d+)s, jitter x(?P<lo>\S+)-(?P<hi>\S+)\.",
        gettext_lazy("At most %(n)s attempts within %(window)ss, jitter x%(lo)s-%(hi)s."),
    ),
    (
        r"Slots later than (?P<n>\d+)s are recorded as missed\.",
        gettext_lazy("Slots later than %(n)ss are recorded as missed."),
    ),
    (
        r"No catch-up window: set catch-up max delay above 0\.",
        gettext_lazy("No catch-up window: set catch-up max delay above 0."),
    ),
    (
        r"No succeeded run of this skill yet: p99 duration unknown\.",
        gettext_lazy("No succeeded run of this skill yet: p99 duration unknown."),
    ),
    (r"Lease (?P<ttl>\d+)s > p99 (?P<p99>\S+)s\.", gettext_lazy("Lease %(ttl)ss > p99 %(p99)ss.")),
    (
        r"Lease (?P<ttl>\d+)s <= p99 (?P<p99>\S+)s: .*",
        gettext_lazy("Lease %(ttl)ss <= p99 %(p99)ss: slow runs lose their lease and run twice."),
    ),
    (r"Final-failure alert lacks (?P<fields>.+)\.", gettext_lazy("Final-failure alert lacks %(fields)s.")),
    (r"Final-failure alerts carry (?P<fields>.+)\.", gettext_lazy("Final-failure alerts carry %(fields)s.")),
    (
        r"Coalesce without an object key template: .*",
        gettext_lazy("Coalesce without an object key template: there is no object whose pending run to replace."),
    ),
    (
        r"A coalesce window of (?P<n>\d+)s does nothing unless the class is coalesce\.",
        gettext_lazy("A coalesce window of %(n)ss does nothing unless the class is coalesce."),
    ),
    (
        r"Newer triggers of an object replace its pending run, waiting (?P<n>\d+)s for newer ones\.",
        gettext_lazy("Newer triggers of an object replace its pending run, waiting %(n)ss for newer ones."),
    ),
    (
        r"Newer triggers of an object replace its pending run\.",
        gettext_lazy("Newer triggers of an object replace its pending run."),
    ),
    (
        r"Recomputable, but no watermark is set: never shed\.",
        gettext_lazy("Recomputable, but no watermark is set: never shed."),
    ),
    (
        r"Shed above the high watermark of pending runs \((?P<where>.+)\)\.",
        gettext_lazy("Shed above the high watermark of pending runs (%(where)s)."),
    ),
    (r"One-time input: never shed\.", gettext_lazy("One-time input: never shed.")),
]
_COMPILED = [(re.compile(p + r"\Z", re.DOTALL), t) for p, t in _MESSAGES]
# The retry check's failures are a list of these, joined by "; ".
_RETRY_PROBLEMS = {
    "no attempt cap": gettext_lazy("no attempt cap"),
    "no cap on elapsed retry time": gettext_lazy("no cap on elapsed retry time"),
    "no cap on one delay": gettext_lazy("no cap on one delay"),
    "no jitter (jitter max must exceed jitter min), so failed runs retry in lockstep": gettext_lazy(
        "no jitter (jitter max must exceed jitter min), so failed runs retry in lockstep"
    ),
}


# tasks.rules.schedule's refusals (a ScheduleError's message), as the preview and the checklist show them.
_SCHEDULE = [
    (
        r'is required: give an IANA zone name such as "Europe/Berlin"',
        gettext_lazy('is required: give an IANA zone name such as "Europe/Berlin"'),
    ),
    (
        r'(?P<name>.+) is not a known zone: use an IANA zone name such as "Europe/Berlin"(?P<extra>.*)',
        gettext_lazy('%(name)s is not a known zone: use an IANA zone name such as "Europe/Berlin"%(extra)s'),
    ),
    (r'is required, e\.g\. "0 9 \* \* \*"', gettext_lazy('is required, e.g. "0 9 * * *"')),
    (r"(?P<expr>.+) never fires", gettext_lazy("%(expr)s never fires")),
    (
        r"(?P<expr>.+) is invalid \(a field is not a cron value\)",
        gettext_lazy("%(expr)s is invalid (a field is not a cron value)"),
    ),
    (r"must be a whole number >= 1, not (?P<n>.+)", gettext_lazy("must be a whole number >= 1, not %(n)s")),
]
_SCHEDULE_COMPILED = [(re.compile(p + r"\Z", re.DOTALL), t) for p, t in _SCHEDULE]


def schedule_error_text(message: str) -> str:
    """A schedule refusal in the active language (as it is when no pattern knows it)."""
    for pattern, template in _SCHEDULE_COMPILED:
        m = pattern.match(message)
        if m:
            return str(template) % m.groupdict() if m.groupdict() else str(template)
    return message


def check_text(check: str) -> str:
    return str(CHECKS.get(check, check))


def message_text(message: str) -> str:
    """A lint sentence in the active language (as it is when no pattern knows it)."""
    for pattern, template in _COMPILED:
        m = pattern.match(message)
        if m:
            found = {k: schedule_error_text(v) if k == "error" else v for k, v in m.groupdict().items()}
            return str(template) % found if found else str(template)
    parts = message.rstrip(".").split("; ")
    if parts and all(p.lower() in _RETRY_PROBLEMS for p in parts):
        text = "; ".join(str(_RETRY_PROBLEMS[p.lower()]) for p in parts)
        return text[0].upper() + text[1:] + "."
    return message


def summary_text(summary: str) -> str:
    """lint_summary's "ok" / "2 fail, 1 warn" in the active language."""
    if summary == "ok":
        return _("ok")
    out = []
    for part in summary.split(", "):
        n, _sep, what = part.partition(" ")
        out.append((_("%(n)s fail") if what == "fail" else _("%(n)s warn")) % {"n": n})
    return ", ".join(out)


__all__ = ["check_text", "lint", "message_text", "summary_text"]
