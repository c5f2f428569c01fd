"""Pure alert decisions: severity escalation, storm grouping, message shapes. No ORM, no I/O, no clock:
`now` comes in as an argument, so every case is tested exhaustively (tests/deadletters/test_alert_rules.py)."""

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from urllib.parse import urlsplit

NOTICE, WARNING, URGENT = "notice", "warning", "urgent"
SEVERITY_RANK = {NOTICE: 0, WARNING: 1, URGENT: 2}

# Alert kinds (the `kind` of an Alert row).
RETRY = "retry"  # an attempt failed and the run will retry
FINAL_FAILURE = "final_failure"  # a dead-letter ticket was opened
SLOT_EXPIRED = "slot_expired"  # a slot waited for readiness until its deadline and will not run
SLOT_MISSED = "slot_missed"  # a slot was missed beyond the catch-up window
SCHEDULER_STALLED = "scheduler_stalled"
CALENDAR_NO_DATA = "calendar_no_data"  # a business calendar in use has no data for a date weeks ahead
# Freshness objectives (runs/engine/objectives.py): a slot expected to miss its objective, missed, or back in time.
OBJECTIVE_AT_RISK = "objective_at_risk"
OBJECTIVE_BREACHED = "objective_breached"
OBJECTIVE_RECOVERED = "objective_recovered"
# An incident of the harness itself (runs/engine/incidents.py): one page when it opens, one when it closes.
# A scheduler outage opens with SCHEDULER_STALLED; the other kinds with INCIDENT_OPENED.
INCIDENT_OPENED = "incident_opened"
INCIDENT_CLOSED = "incident_closed"
SUMMARY = "summary"  # a storm's folded alerts, counted
TEST = "test"  # "send test alert" from the channel admin

# What every alert payload carries, even when a value is None (a missed slot has no run).
PAYLOAD_FIELDS = ("run_id", "biz_key", "rule", "error_kind", "link")

# A storm: per channel and per (rule, kind), within a fixed window, the first STORM_LIMIT alerts are
# sent one by one; the rest are folded into one summary sent when the window ends.
STORM_WINDOW = timedelta(minutes=5)
STORM_LIMIT = 5
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)

# Delivery: bounded retries with a capped exponential backoff; the outbox row keeps the count.
MAX_DELIVERY_ATTEMPTS = 5
DELIVERY_BACKOFF_BASE = timedelta(seconds=10)
DELIVERY_BACKOFF_CAP = timedelta(minutes=10)


def retry_severity(*, attempt: int, max_attempts: int) -> str | None:
    """The severity of "attempt `attempt` failed and the run will retry", or None: no alert.

    Near the cap (attempt >= max_attempts - 1) is a warning, even when that is also the first attempt;
    the first failure otherwise is a notice; the attempts between are already announced, so silent.
    """
    if attempt >= max_attempts - 1:
        return WARNING
    if attempt == 1:
        return NOTICE
    return None


# Events other than retries have one fixed severity each.
EVENT_SEVERITY = {
    FINAL_FAILURE: URGENT,
    # The slot will not run at all: a missed report goes unnoticed unless someone is told now.
    SLOT_EXPIRED: URGENT,
    # Missed slots follow the rule's own catch-up policy, which the operator chose; after an
    # outage there may be hundreds, and the storm summary keeps them readable.
    SLOT_MISSED: WARNING,
    SCHEDULER_STALLED: URGENT,
    # The close pages whoever the open paged: the page for the end of the same incident.
    INCIDENT_OPENED: URGENT,
    INCIDENT_CLOSED: URGENT,
    # CALENDAR_NO_DATA escalates as the date approaches: calendar_step.
}


@dataclass(frozen=True)
class CalendarStep:
    """One step of a calendar's staleness alert: from `days_before` the first date without data, at
    `severity`. `name` is part of the alert's dedupe key, so each step alerts once."""

    name: str
    days_before: int
    severity: str


# A notice when the gap enters the calendar's horizon (business_days.DEFAULT_HORIZON, 45 days: the
# State Council usually publishes in November); a warning four weeks ahead; urgent in the last week,
# and once more on the day itself, when rules already run by the law's holidays and uncertain days.
CALENDAR_STEPS = (
    CalendarStep("notice", 45, NOTICE),
    CalendarStep("warning", 27, WARNING),
    CalendarStep("urgent", 7, URGENT),
    CalendarStep("today", 0, URGENT),
)


def calendar_step(*, no_data_from: date, now: datetime) -> CalendarStep | None:
    """The step a calendar without data from `no_data_from` has reached at `now`, or None: not yet.

    Days are counted between UTC dates, as calendar_gaps counts them. A date already past is "today"
    (a calendar still without data is judged by the law's holidays every day from then). A step
    skipped (a calendar first used a week before) is not sent late: only the step reached counts."""
    days_left = (no_data_from - now.astimezone(UTC).date()).days
    reached = [step for step in CALENDAR_STEPS if days_left <= step.days_before]
    return reached[-1] if reached else None


def calendar_dedupe_key(*, calendar: str, no_data_from: date, step: CalendarStep) -> str:
    """Once per calendar, year and step: a first date without data that moves within the year (an
    override added for 1 January, or the days passing after it) does not alert the year again."""
    return f"calendar-no-data:{calendar}:{no_data_from.year}:{step.name}"


def severity_reaches(severity: str, minimum: str) -> bool:
    """Whether an alert of `severity` goes to a channel whose minimum is `minimum`."""
    return SEVERITY_RANK[severity] >= SEVERITY_RANK[minimum]


def storm_window(now: datetime, window: timedelta = STORM_WINDOW) -> datetime:
    """The start of the fixed window holding `now`. Fixed (not sliding) windows, so that two workers
    recording at once agree on the window, and a summary covers exactly one of them."""
    buckets = (now - EPOCH) // window
    return EPOCH + buckets * window


def storm_group(*, rule: str | None, kind: str) -> str:
    return f"{kind}:{rule or '-'}"


def storm_fold(*, recorded_in_window: int, limit: int = STORM_LIMIT) -> bool:
    """True: fold this alert into the window's summary (`recorded_in_window` alerts of its group came
    before it on this channel); False: send it on its own."""
    return recorded_in_window >= limit


def summary_due(*, window_start: datetime, now: datetime, window: timedelta = STORM_WINDOW) -> bool:
    """A window's summary is sent once the window has ended, so it holds the final count."""
    return now >= window_start + window


def delivery_retry_at(*, attempts: int, now: datetime, base: timedelta = DELIVERY_BACKOFF_BASE) -> datetime | None:
    """When to try a failed delivery again after `attempts` tries, or None: give up (bounded).
    The delay doubles from `base` (HARNESS_ALERT_RETRY_SECONDS) up to DELIVERY_BACKOFF_CAP."""
    if attempts >= MAX_DELIVERY_ATTEMPTS:
        return None
    delay = min(base * (2 ** (attempts - 1)), DELIVERY_BACKOFF_CAP)
    return now + delay


@dataclass(frozen=True)
class Message:
    title: str
    text: str


def slack_text(text: str) -> str:
    """Text Slack shows as written: its mrkdwn reads <!channel>, <@U1> and <url|label> as controls,
    and &, <, > are the three characters it asks senders to escape."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def feishu_text(text: str) -> str:
    """Text a Feishu bot shows as written: its text message turns <at user_id="all"> into @everyone
    and has no escape, so angle brackets become their full-width look-alikes (still readable)."""
    return text.replace("<", "\uff1c").replace(">", "\uff1e")


# DingTalk's text message parses no markup and mentions only whom `at` names: nobody, ever.
DINGTALK_AT_NOBODY = {"isAtAll": False, "atMobiles": [], "atUserIds": []}


def webhook_body(payload: dict, fmt: str, msg: Message) -> dict:
    """The JSON a receiver of format `fmt` expects. Generic: the whole alert plus its text.

    Every value in an alert may come from outside (an event's text, an error a provider sent), so a
    chat format gets plain text only: escaped for Slack and Feishu, and no markdown or mention for
    DingTalk. Our labels hold none of those characters, so escaping the whole text escapes each value.
    `msg` is the alert in the channel's language (deadletters.alert_texts.alert_message)."""
    text = f"{msg.title}\n{msg.text}"
    if fmt == "slack":
        return {"text": slack_text(text)}
    if fmt == "feishu":
        return {"msg_type": "text", "content": {"text": feishu_text(text)}}
    if fmt == "dingtalk":
        return {"msgtype": "text", "text": {"content": text}, "at": dict(DINGTALK_AT_NOBODY)}
    return {**payload, "title": msg.title, "text": text}


def webhook_accepted(fmt: str, status: int, body: object) -> tuple[bool, str]:
    """Whether a receiver took the message. Feishu and DingTalk answer HTTP 200 with an error code
    in the body (a bad token, a missing keyword), so a 200 alone is not enough for them."""
    if not 200 <= status < 300:
        return False, f"HTTP {status}"
    if isinstance(body, dict):
        if fmt == "feishu":
            code = body.get("code", body.get("StatusCode", 0))
            if code not in (0, None):
                return False, f"feishu code {code}: {body.get('msg') or body.get('StatusMessage') or ''}".strip()
        if fmt == "dingtalk" and body.get("errcode", 0) not in (0, None):
            return False, f"dingtalk errcode {body['errcode']}: {body.get('errmsg', '')}".strip()
    return True, ""


def redact_url(url: str) -> str:
    """A webhook URL fit for logs and lists: scheme and host only. Tokens live in the path
    (Slack, Feishu) or the query (DingTalk's access_token), so both are cut."""
    if not url:
        return ""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}{':' + str(parts.port) if parts.port else ''}/…"


def dash(value: object) -> str:
    return "-" if value in (None, "") else indented(value)


def indented(value: object) -> str:
    """A value on its line: a multi-line value (a traceback, an event's text) continues indented, so it
    cannot pass for another field ("link: …") of the alert, in a mail, a chat message or the log."""
    return "\n            ".join(str(value).splitlines()) or str(value)
