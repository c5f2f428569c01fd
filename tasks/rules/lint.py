"""A rule's lint checklist: what an operator should fix before trusting it. Pure: plain values in.

Each check is pass / warn / fail with a Reason saying why (tasks/sentences.py words it), so the
admin can show the list on the rule page and a one-word summary as a list column.
"""

from dataclasses import dataclass
from datetime import date
from typing import Any

from tasks.rules import backpressure, business_days, keys, schedule
from tasks.rules.reasons import Reason, code

PASS, WARN, FAIL = "pass", "warn", "fail"
# The checks, in the checklist's order.
CHECK_TIMEZONE = code("lint.check.timezone")
CHECK_DEPENDENCIES = code("lint.check.dependencies")
CHECK_DEDUPE_KEY = code("lint.check.dedupe_key")
CHECK_RETRIES = code("lint.check.retries")
CHECK_CATCHUP = code("lint.check.catchup")
CHECK_LEASE = code("lint.check.lease")
CHECK_ALERT = code("lint.check.alert")
CHECK_BACKPRESSURE = code("lint.check.backpressure")
CHECK_CALENDAR = code("lint.check.calendar")  # only for a rule with a business calendar
# What each check found.
TIMEZONE_SET = code("lint.timezone_set")  # zone
TIMEZONE_INVALID = code("lint.timezone_invalid")  # error (a schedule Reason)
NO_DEPENDENCIES = code("lint.no_dependencies")
FLAGS_NEVER_SET = code("lint.flags_never_set")  # flags
FLAGS_SET = code("lint.flags_set")  # flags
KEY_INVALID = code("lint.key_invalid")  # error (the key template's complaint)
EVENT_KEY_HAS_DATE = code("lint.event_key_has_date")
EVENT_KEY_BY_DATE = code("lint.event_key_by_date")
KEY_VARIES = code("lint.key_varies")  # which
KEY_CONSTANT = code("lint.key_constant")
RETRIES_UNCAPPED = code("lint.retries_uncapped")  # problems (a list of the four below)
NO_ATTEMPT_CAP = code("lint.no_attempt_cap")
NO_RETRY_WINDOW = code("lint.no_retry_window")
NO_DELAY_CAP = code("lint.no_delay_cap")
NO_JITTER = code("lint.no_jitter")
RETRIES_CAPPED = code("lint.retries_capped")  # n, window, lo, hi
CATCHUP_SET = code("lint.catchup_set")  # n
CATCHUP_MISSING = code("lint.catchup_missing")
P99_UNKNOWN = code("lint.p99_unknown")
LEASE_ABOVE_P99 = code("lint.lease_above_p99")  # ttl, p99
LEASE_BELOW_P99 = code("lint.lease_below_p99")  # ttl, p99
ALERT_LACKS = code("lint.alert_lacks")  # fields
ALERT_CARRIES = code("lint.alert_carries")  # fields
WATERMARKS_INVALID = code("lint.watermarks_invalid")  # scope, errors
COALESCE_WITHOUT_OBJECT = code("lint.coalesce_without_object")
COALESCE_WINDOW_UNUSED = code("lint.coalesce_window_unused")  # n
COALESCES = code("lint.coalesces")
COALESCES_WAITING = code("lint.coalesces_waiting")  # n
RECOMPUTABLE_NO_WATERMARK = code("lint.recomputable_no_watermark")
SHED_ABOVE = code("lint.shed_above")  # where (a list of WATERMARK_AT)
WATERMARK_AT = code("lint.watermark_at")  # scope, high
ONE_TIME_INPUT = code("lint.one_time_input")
CALENDAR_KNOWN = code("lint.calendar_known")  # calendar, source, until
CALENDAR_NO_DATA = code("lint.calendar_no_data")  # calendar, source, since, days
CALENDAR_DAYS_LIMITED = code("lint.calendar_days_limited")  # calendar
# A mainland-China calendar past its data still has the law's holidays (tasks/rules/no_notice.py).
CALENDAR_NO_NOTICE = code("lint.calendar_no_notice")  # calendar, source, since, days, uncertain (a Reason)
# What a calendar's policy does on an uncertain day, for the lint and the system banner.
UNCERTAIN_RUNS = code("lint.uncertain_runs")
UNCERTAIN_SKIPS = code("lint.uncertain_skips")
UNCERTAIN_HOLDS = code("lint.uncertain_holds")
UNCERTAIN_POLICY = {
    business_days.POLICY_RUN: UNCERTAIN_RUNS,
    business_days.POLICY_SKIP: UNCERTAIN_SKIPS,
    business_days.POLICY_HOLD: UNCERTAIN_HOLDS,
}
# Placeholders that make a key differ per day or per slot; any other (a param) names a business object.
DATE_PLACEHOLDERS = keys.TIME_PLACEHOLDERS
# An alert must carry these for on-call to find the run (see deadletters.alerts.ALERT_FIELDS).
REQUIRED_ALERT_FIELDS = frozenset({"run_id", "biz_key"})


@dataclass(frozen=True)
class LintInput:
    timezone: str
    dedupe_key_template: str
    params: dict[str, Any]
    max_attempts: int
    max_retry_window_seconds: int
    max_delay_seconds: int
    jitter_min: float
    jitter_max: float
    catchup_max_delay_seconds: int
    lease_ttl_seconds: int
    # The skill's observed p99 duration over recent succeeded runs; None: no succeeded run yet.
    skill_p99_seconds: float | None
    alert_fields: frozenset[str]
    # Readiness flags the rule waits for, and those of them that something has set (a row exists).
    depends_on: tuple[str, ...] = ()
    flags_seen: frozenset[str] = frozenset()
    kind: str = ""  # the rule's trigger kind ("event" for event rules)
    event_key_by_date: bool = False
    # Backpressure (tasks/rules/backpressure.py): the rule's class, object key, coalesce window, and
    # the watermarks of the scopes it is held to, as (scope, high, low).
    recoverability: str = backpressure.ONE_TIME_INPUT
    object_key_template: str = ""
    coalesce_window_seconds: int = 0
    watermarks: tuple[tuple[str, int | None, int | None], ...] = ()
    # The rule's business calendar: its name and library, the last date the check looked ahead to
    # (today + business_days.DEFAULT_HORIZON) and the first date before it with no data (None: all known).
    calendar: str = ""
    calendar_source: str = ""
    calendar_until: date | None = None
    calendar_gap: date | None = None
    # Past its data: "" when the calendar counts every weekday as a business day; else the policy
    # (business_days.POLICIES) for the uncertain days, the law's holidays still being known.
    calendar_uncertain: str = ""
    today: date | None = None
    # Whether cron's day-of-week field or the weekdays guard leave days out (a make-up Saturday too).
    days_limited: bool = False


@dataclass(frozen=True)
class LintItem:
    check: str  # a CHECK_* code
    status: str
    reason: Reason


@dataclass(frozen=True)
class LintSummary:
    fails: int
    warns: int

    @property
    def status(self) -> str:
        return FAIL if self.fails else WARN if self.warns else PASS


def rule_lint(rule: LintInput) -> list[LintItem]:
    """The checklist, in a fixed order. Never raises on bad values: a bad value is a failed check."""
    items = [
        _timezone(rule),
        _dependencies(rule),
        _dedupe_key(rule),
        _retries(rule),
        _catchup(rule),
        _lease(rule),
        _alert_route(rule),
        _backpressure(rule),
    ]
    if rule.calendar:
        items.append(_calendar(rule))
    return items


def lint_summary(items: list[LintItem]) -> LintSummary:
    """How many checks fail and warn (the list column says "ok" when neither)."""
    return LintSummary(sum(i.status == FAIL for i in items), sum(i.status == WARN for i in items))


def _item(check: str, status: str, name: str, /, **params: Any) -> LintItem:
    return LintItem(check, status, Reason.of(name, **params))


def _timezone(rule: LintInput) -> LintItem:
    try:
        schedule.validate_timezone(rule.timezone)
    except schedule.ScheduleError as exc:
        return _item(CHECK_TIMEZONE, FAIL, TIMEZONE_INVALID, error=exc.reason)
    return _item(CHECK_TIMEZONE, PASS, TIMEZONE_SET, zone=rule.timezone)


def _dependencies(rule: LintInput) -> LintItem:
    if not rule.depends_on:
        return _item(CHECK_DEPENDENCIES, PASS, NO_DEPENDENCIES)
    orphans = [f for f in rule.depends_on if f not in rule.flags_seen]
    if orphans:
        # A flag that nothing sets holds every slot until its deadline: say which one.
        return _item(CHECK_DEPENDENCIES, WARN, FLAGS_NEVER_SET, flags=", ".join(orphans))
    return _item(CHECK_DEPENDENCIES, PASS, FLAGS_SET, flags=", ".join(rule.depends_on))


def _dedupe_key(rule: LintInput) -> LintItem:
    try:
        used = set(keys.placeholders(rule.dedupe_key_template or ""))
        keys.check_separated(rule.dedupe_key_template or "")
    except keys.KeyTemplateError as exc:
        return _item(CHECK_DEDUPE_KEY, FAIL, KEY_INVALID, error=str(exc))
    objects = used - set(keys.BUILTIN_PLACEHOLDERS)
    if rule.kind == "event" and used & keys.TIME_PLACEHOLDERS:
        if not rule.event_key_by_date:
            return _item(CHECK_DEDUPE_KEY, FAIL, EVENT_KEY_HAS_DATE)
        return _item(CHECK_DEDUPE_KEY, WARN, EVENT_KEY_BY_DATE)
    if used & DATE_PLACEHOLDERS or objects:
        which = ", ".join("{" + n + "}" for n in sorted(used & (DATE_PLACEHOLDERS | objects)))
        return _item(CHECK_DEDUPE_KEY, PASS, KEY_VARIES, which=which)
    return _item(CHECK_DEDUPE_KEY, FAIL, KEY_CONSTANT)


def _retries(rule: LintInput) -> LintItem:
    problems = []
    if not rule.max_attempts or rule.max_attempts < 1:
        problems.append(Reason.of(NO_ATTEMPT_CAP))
    if not rule.max_retry_window_seconds:
        problems.append(Reason.of(NO_RETRY_WINDOW))
    if not rule.max_delay_seconds:
        problems.append(Reason.of(NO_DELAY_CAP))
    if rule.jitter_max is None or rule.jitter_min is None or rule.jitter_max <= rule.jitter_min:
        problems.append(Reason.of(NO_JITTER))
    if problems:
        return _item(CHECK_RETRIES, FAIL, RETRIES_UNCAPPED, problems=problems)
    return _item(
        CHECK_RETRIES,
        PASS,
        RETRIES_CAPPED,
        n=rule.max_attempts,
        window=rule.max_retry_window_seconds,
        lo=f"{rule.jitter_min:g}",
        hi=f"{rule.jitter_max:g}",
    )


def _catchup(rule: LintInput) -> LintItem:
    if rule.catchup_max_delay_seconds and rule.catchup_max_delay_seconds > 0:
        return _item(CHECK_CATCHUP, PASS, CATCHUP_SET, n=rule.catchup_max_delay_seconds)
    return _item(CHECK_CATCHUP, FAIL, CATCHUP_MISSING)


def _lease(rule: LintInput) -> LintItem:
    if rule.skill_p99_seconds is None:
        return _item(CHECK_LEASE, WARN, P99_UNKNOWN)
    values = {"ttl": rule.lease_ttl_seconds, "p99": f"{rule.skill_p99_seconds:.1f}"}
    if rule.lease_ttl_seconds > rule.skill_p99_seconds:
        return _item(CHECK_LEASE, PASS, LEASE_ABOVE_P99, **values)
    return _item(CHECK_LEASE, FAIL, LEASE_BELOW_P99, **values)


def _alert_route(rule: LintInput) -> LintItem:
    missing = sorted(REQUIRED_ALERT_FIELDS - rule.alert_fields)
    if missing:
        return _item(CHECK_ALERT, FAIL, ALERT_LACKS, fields=", ".join(missing))
    return _item(CHECK_ALERT, PASS, ALERT_CARRIES, fields=", ".join(sorted(rule.alert_fields)))


def _backpressure(rule: LintInput) -> LintItem:
    name = CHECK_BACKPRESSURE
    for scope, high, low in rule.watermarks:
        errors = backpressure.watermark_errors(high=high, low=low)
        if errors:
            return _item(name, FAIL, WATERMARKS_INVALID, scope=scope, errors=list(errors.values()))
    if rule.recoverability == backpressure.COALESCE and not (rule.object_key_template or "").strip():
        return _item(name, FAIL, COALESCE_WITHOUT_OBJECT)
    if rule.coalesce_window_seconds and rule.recoverability != backpressure.COALESCE:
        return _item(name, WARN, COALESCE_WINDOW_UNUSED, n=rule.coalesce_window_seconds)
    if rule.recoverability == backpressure.COALESCE:
        if rule.coalesce_window_seconds:
            return _item(name, PASS, COALESCES_WAITING, n=rule.coalesce_window_seconds)
        return _item(name, PASS, COALESCES)
    if rule.recoverability == backpressure.RECOMPUTABLE:
        set_marks = [(s, h) for s, h, _low in rule.watermarks if h is not None]
        if not set_marks:
            return _item(name, PASS, RECOMPUTABLE_NO_WATERMARK)
        return _item(name, PASS, SHED_ABOVE, where=[Reason.of(WATERMARK_AT, scope=s, high=h) for s, h in set_marks])
    return _item(name, PASS, ONE_TIME_INPUT)


def _calendar(rule: LintInput) -> LintItem:
    values: dict[str, Any] = {"calendar": rule.calendar, "source": rule.calendar_source or "-"}
    if rule.calendar_gap is not None:
        # Loud weeks ahead: past its data a calendar knows no make-up working day, and no holiday
        # unless the law fixes them (mainland China), leaving the uncertain days to its policy.
        days = (rule.calendar_gap - rule.today).days if rule.today else 0
        values |= {"since": rule.calendar_gap.isoformat(), "days": days}
        if rule.calendar_uncertain:
            uncertain = Reason.of(UNCERTAIN_POLICY[rule.calendar_uncertain])
            return _item(CHECK_CALENDAR, WARN, CALENDAR_NO_NOTICE, **values, uncertain=uncertain)
        return _item(CHECK_CALENDAR, WARN, CALENDAR_NO_DATA, **values)
    if rule.days_limited:
        # The calendar decides the business days; cron "1-5" or weekdays "mon-fri" skip make-up Saturdays.
        return _item(CHECK_CALENDAR, WARN, CALENDAR_DAYS_LIMITED, calendar=rule.calendar)
    until = rule.calendar_until.isoformat() if rule.calendar_until else "-"
    return _item(CHECK_CALENDAR, PASS, CALENDAR_KNOWN, **values, until=until)
