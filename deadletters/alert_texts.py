"""What an alert says, in a language: its title and its lines, worded from the alert's fields.

An alert is recorded once and delivered to channels that may read different languages (an on-call
email in English, a Feishu group in Chinese): the words are chosen at delivery, in the channel's
language, from the payload's figures. One template per kind of alert and per field label, here.
An alert recorded before a figure was kept (an old outbox row) falls back to its stored title.
"""

import re
from datetime import datetime
from zoneinfo import ZoneInfo

from django.utils import translation
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from deadletters import alert_rules as rules
from tasks import sentences

# The kinds as people read them: the outbox's column and filter, and a storm summary's title.
KIND_LABELS = {
    rules.RETRY: gettext_lazy("retry"),
    rules.FINAL_FAILURE: gettext_lazy("final failure"),
    rules.SLOT_EXPIRED: gettext_lazy("slot expired"),
    rules.SLOT_MISSED: gettext_lazy("slot missed"),
    rules.SCHEDULER_STALLED: gettext_lazy("scheduler stalled"),
    rules.CALENDAR_NO_DATA: gettext_lazy("calendar without data"),
    rules.OBJECTIVE_AT_RISK: gettext_lazy("objective at risk"),
    rules.OBJECTIVE_BREACHED: gettext_lazy("objective breached"),
    rules.OBJECTIVE_RECOVERED: gettext_lazy("objective recovered"),
    rules.INCIDENT_OPENED: gettext_lazy("incident opened"),
    rules.INCIDENT_CLOSED: gettext_lazy("incident closed"),
    rules.SUMMARY: gettext_lazy("summary"),
    rules.TEST: gettext_lazy("test alert"),
}
# An incident's kind (runs.models.Incident.Kind, the same words: runs is the layer above).
INCIDENT_KIND_LABELS = {
    "scheduler": gettext_lazy("Scheduler outage"),
    "queue": gettext_lazy("Queue without a consuming worker"),
    "database": gettext_lazy("Database outage"),
    "broker": gettext_lazy("Broker outage"),
}
SEVERITY_LABELS = {
    rules.NOTICE: gettext_lazy("NOTICE"),
    rules.WARNING: gettext_lazy("WARNING"),
    rules.URGENT: gettext_lazy("URGENT"),
}
# Each title, and the payload fields it needs (all present, or the stored title is used).
TITLES = {
    rules.FINAL_FAILURE: (gettext_lazy("run %(run_id)s failed for good: %(biz_key)s"), ("run_id", "biz_key")),
    rules.RETRY: (
        gettext_lazy("run %(run_id)s attempt %(attempt_n)s of %(attempt_max)s failed, will retry: %(biz_key)s"),
        ("run_id", "attempt_n", "attempt_max", "biz_key"),
    ),
    rules.SLOT_EXPIRED: (
        gettext_lazy("rule %(rule)s slot %(slot_utc)s expired: dependencies not ready (missing %(missing)s)"),
        ("rule", "slot_utc", "missing"),
    ),
    rules.SLOT_MISSED: (gettext_lazy("rule %(rule)s missed slot %(slot_utc)s"), ("rule", "slot_utc")),
    rules.SCHEDULER_STALLED: (gettext_lazy("scheduler stalled: no tick for %(age)s s"), ("age",)),
    rules.TEST: (gettext_lazy("test alert for channel %(channel)s"), ("channel",)),
    rules.CALENDAR_NO_DATA: (
        gettext_lazy("business calendar %(calendar)s has no data from %(no_data_from)s (in %(days_left)s days)"),
        ("calendar", "no_data_from", "days_left"),
    ),
    rules.OBJECTIVE_AT_RISK: (
        gettext_lazy("rule %(rule)s slot %(slot_local)s: objective at risk"),
        ("rule", "slot_local"),
    ),
    rules.OBJECTIVE_BREACHED: (
        gettext_lazy("rule %(rule)s slot %(slot_local)s: objective breached"),
        ("rule", "slot_local"),
    ),
    rules.OBJECTIVE_RECOVERED: (
        gettext_lazy("rule %(rule)s slot %(slot_local)s: objective met after all"),
        ("rule", "slot_local"),
    ),
    rules.INCIDENT_OPENED: (
        gettext_lazy("incident: %(incident_label)s %(subject)s since %(started_utc)s UTC"),
        ("incident_label", "subject", "started_utc"),
    ),
    rules.INCIDENT_CLOSED: (
        gettext_lazy("incident over: %(incident_label)s %(subject)s, %(duration_s)s s"),
        ("incident_label", "subject", "duration_s"),
    ),
    rules.SUMMARY: (
        gettext_lazy("%(count)s more %(kind_label)s alerts for rule %(rule)s between %(from)s and %(until)s UTC"),
        ("count", "kind_label", "rule", "from", "until"),
    ),
}
# The "why" of an alert, where it is worded from figures rather than carried as text.
WHY = {
    rules.SLOT_MISSED: (gettext_lazy("%(late)s s late, catch-up %(catchup)s"), ("late", "catchup")),
    rules.SLOT_EXPIRED: (gettext_lazy("missing: %(missing)s"), ("missing",)),
    rules.SCHEDULER_STALLED: (
        gettext_lazy("no tick since %(since)s; stalled after %(stall)s s"),
        ("since", "stall"),
    ),
    rules.INCIDENT_CLOSED: (
        gettext_lazy(
            "from %(started_utc)s to %(ended_utc)s UTC: %(missed)s slots missed, %(caught_up)s caught up, "
            "across %(rules_affected)s rules"
        ),
        ("started_utc", "ended_utc", "missed", "caught_up", "rules_affected"),
    ),
    rules.CALENDAR_NO_DATA: (
        gettext_lazy(
            "%(source_label)s has no holidays or make-up working days from %(no_data_from)s; rules on it would "
            "count every weekday as a business day. Upgrade the library once the year is published, or add "
            "overrides."
        ),
        ("source_label", "no_data_from"),
    ),
}
# The last step of a calendar's staleness alert (alert_rules.CALENDAR_STEPS): the day has come.
CALENDAR_TODAY_TITLE = (
    gettext_lazy("business calendar %(calendar)s has no data from today, %(no_data_from)s"),
    ("calendar", "no_data_from"),
)
# A calendar that judges a year without data by the law's holidays (mainland China) says what its rules
# do meanwhile, by its uncertain-days policy (BusinessCalendar.uncertain_days).
CALENDAR_LAW_WHY = gettext_lazy(
    "%(source_label)s has no holidays or make-up working days from %(no_data_from)s. Until the year's notice "
    "is imported (harness notice import) or the library is upgraded, rules on it skip the holidays fixed by "
    "law and, on the days a notice usually moves, %(policy_label)s."
)
UNCERTAIN_POLICY_LABELS = {
    "hold": gettext_lazy("hold their runs for approval"),
    "skip": gettext_lazy("do not run"),
    "run": gettext_lazy("run as on a working day"),
}
# An objective alert's why: its cause (a stored Reason, worded by tasks.sentences) and its deadline.
OBJECTIVE_KINDS = (rules.OBJECTIVE_AT_RISK, rules.OBJECTIVE_BREACHED, rules.OBJECTIVE_RECOVERED)
OBJECTIVE_WHY = gettext_lazy("%(cause)s; objective %(deadline_local)s")
# A final failure's reason, as runs.engine.retry words it (English, for the log): read back into a sentence.
RETRY_REASONS = (
    (re.compile(r"^error kind '(?P<kind>[^']*)' is not retried$"), gettext_lazy("error kind %(kind)s is not retried")),
    (
        re.compile(r"^attempt (?P<n>\d+) of (?P<max>\d+): attempts exhausted$"),
        gettext_lazy("attempt %(n)s of %(max)s: attempts exhausted"),
    ),
    (
        re.compile(r"^retry window of (?P<window>[\d.]+)s exhausted$"),
        gettext_lazy("retry window of %(window)s s exhausted"),
    ),
    (re.compile(r"^readiness policy is fail$"), gettext_lazy("readiness policy is fail")),
)
FIELDS = (
    ("run_id", gettext_lazy("run id")),
    ("biz_key", "biz_key"),
    ("rule", gettext_lazy("rule")),
    ("error_kind", gettext_lazy("error kind")),
)
LINK_LABEL = gettext_lazy("link")
OPTIONAL_FIELDS = (
    ("attempt", gettext_lazy("attempt")),
    ("slot", gettext_lazy("slot")),
    ("reason", gettext_lazy("why")),
    ("error", gettext_lazy("last error")),
)


def alert_title(payload: dict) -> str:
    """The alert's title in the active language (its stored one when a figure is missing)."""
    template, needs = TITLES.get(payload.get("kind", ""), (None, ()))
    if payload.get("kind") == rules.CALENDAR_NO_DATA and payload.get("step") == rules.CALENDAR_STEPS[-1].name:
        template, needs = CALENDAR_TODAY_TITLE
    params = _params(payload)
    if template is None or any(params.get(n) in (None, "") for n in needs):
        return str(payload.get("title") or payload.get("kind") or "alert")
    return str(template) % params


def alert_message(payload: dict, *, language: str = "en") -> rules.Message:
    """The title and text of an alert in `language`: "[harness] URGENT run 7 failed for good: …"."""
    with translation.override(language):
        payload = {**payload, **_local_times(payload)}
        severity = str(SEVERITY_LABELS.get(payload.get("severity", ""), payload.get("severity", ""))).upper()
        # One line: it is also an email subject, where a newline is refused.
        title = " ".join(f"[harness] {severity} {alert_title(payload)}".split())
        rows = [(str(label), rules.dash(payload.get(key))) for key, label in FIELDS]
        why = _why(payload)
        for key, label in OPTIONAL_FIELDS:
            value = why if key == "reason" else payload.get(key)
            if key == "attempt" and payload.get("attempt_n") and payload.get("attempt_max"):
                value = f"{payload['attempt_n']}/{payload['attempt_max']}"
            if value not in (None, ""):
                rows.append((str(label), rules.indented(value)))
        width = max(len(label) for label, _v in rows) + 2
        lines = [f"{label + ':':<{width}}{value}" for label, value in rows]
        if payload.get("count"):
            more = _("and %(count)s more like this") % {"count": payload["count"]}
            lines.append(f"{more}: {payload.get('examples_text', '')}".rstrip(": "))
        link = str(LINK_LABEL) + ":"
        lines.append(f"{link:<{width}}{rules.dash(payload.get('link'))}")
        return rules.Message(title=title, text="\n".join(lines))


def _local_times(payload: dict) -> dict:
    """The slot and deadline in the rule's zone, where the alert carries the zone (objective alerts):
    "slot" is shown so instead of its UTC instant."""
    zone_name = payload.get("timezone")
    if not zone_name:
        return {}
    found = {}
    for key in ("slot", "deadline"):
        at = parse_datetime(payload[key]) if isinstance(payload.get(key), str) else None
        if isinstance(at, datetime) and at.tzinfo is not None:
            found[f"{key}_local"] = sentences.local_text(at.astimezone(ZoneInfo(zone_name)))
    if "slot_local" in found:
        found["slot"] = found["slot_local"]
    return found


def _params(payload: dict) -> dict:
    params = {k: v for k, v in payload.items() if not isinstance(v, dict)}
    if payload.get("kind") == rules.CALENDAR_NO_DATA:
        params["source_label"] = payload.get("source") or _("no library")
        if payload.get("uncertain_days") in UNCERTAIN_POLICY_LABELS:
            params["policy_label"] = str(UNCERTAIN_POLICY_LABELS[payload["uncertain_days"]])
    if isinstance(payload.get("missing"), list):
        params["missing"] = ", ".join(map(str, payload["missing"])) or "-"
    if payload.get("incident_kind"):
        params["incident_label"] = str(INCIDENT_KIND_LABELS.get(payload["incident_kind"], payload["incident_kind"]))
    kind = payload.get("summary_kind")
    if kind:
        params["kind_label"] = str(KIND_LABELS.get(kind, kind))
    return params


def _why(payload: dict):
    template, needs = WHY.get(payload.get("kind", ""), (None, ()))
    params = _params(payload)
    cause = sentences.reason_load(payload.get("cause") or {})
    if payload.get("kind") in OBJECTIVE_KINDS and cause is not None and params.get("deadline_local"):
        return str(OBJECTIVE_WHY) % {"cause": sentences.say(cause), "deadline_local": params["deadline_local"]}
    if params.get("policy_label") and params.get("no_data_from"):
        return str(CALENDAR_LAW_WHY) % params
    if template is not None and all(params.get(n) not in (None, "") for n in needs):
        return str(template) % params
    reason = payload.get("reason")
    if isinstance(reason, str):
        for pattern, words in RETRY_REASONS:
            if found := pattern.match(reason):
                return str(words) % found.groupdict()
    return reason
