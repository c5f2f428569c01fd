"""A rule's lint checklist: what an operator should fix before trusting it. Pure: plain values in.

Each check is pass / warn / fail with a sentence saying why, so the admin can show the list on the
rule page and a one-word summary as a list column.
"""

from dataclasses import dataclass

from tasks.rules import backpressure, keys, schedule

PASS, WARN, FAIL = "pass", "warn", "fail"
# Placeholders that make a key differ per day or per slot; any other (a param) names a business object.
DATE_PLACEHOLDERS = frozenset({"slot", "business_date"})
# An alert must carry these for on-call to find the run (see deadletters.alerts.ALERT_FIELDS).
REQUIRED_ALERT_FIELDS = frozenset({"run_id", "biz_key"})


@dataclass(frozen=True)
class LintInput:
    timezone: str
    dedupe_key_template: str
    params: dict
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


@dataclass(frozen=True)
class LintItem:
    check: str
    status: str
    message: str


def rule_lint(rule: LintInput) -> list[LintItem]:
    """The checklist, in a fixed order. Never raises on bad values: a bad value is a failed check."""
    return [
        _timezone(rule),
        _dependencies(rule),
        _dedupe_key(rule),
        _retries(rule),
        _catchup(rule),
        _lease(rule),
        _alert_route(rule),
        _backpressure(rule),
    ]


def lint_summary(items: list[LintItem]) -> str:
    """ "ok", or e.g. "2 fail, 1 warn"."""
    fails = sum(i.status == FAIL for i in items)
    warns = sum(i.status == WARN for i in items)
    if not fails and not warns:
        return "ok"
    return ", ".join(p for p in (f"{fails} fail" if fails else "", f"{warns} warn" if warns else "") if p)


def _timezone(rule: LintInput) -> LintItem:
    name = "timezone explicit"
    try:
        schedule.validate_timezone(rule.timezone)
    except schedule.ScheduleError as exc:
        return LintItem(name, FAIL, f"{exc.message}; the host zone must never decide.")
    return LintItem(name, PASS, f"Schedule is read in {rule.timezone}.")


def _dependencies(rule: LintInput) -> LintItem:
    name = "dependencies have a source"
    if not rule.depends_on:
        return LintItem(name, PASS, "No readiness dependencies.")
    orphans = [f for f in rule.depends_on if f not in rule.flags_seen]
    if orphans:
        # A flag that nothing sets holds every slot until its deadline: say which one.
        return LintItem(
            name,
            WARN,
            f"No flag {', '.join(orphans)} is set for any scope: check that a pipeline, API token or "
            "operator sets it, or every slot will wait until its deadline.",
        )
    return LintItem(name, PASS, f"Flags {', '.join(rule.depends_on)} are set by their producers.")


def _dedupe_key(rule: LintInput) -> LintItem:
    name = "dedupe key per business unit"
    try:
        used = set(keys.placeholders(rule.dedupe_key_template or ""))
        keys.check_separated(rule.dedupe_key_template or "")
    except keys.KeyTemplateError as exc:
        return LintItem(name, FAIL, str(exc))
    objects = used - set(keys.BUILTIN_PLACEHOLDERS)
    if rule.kind == "event" and used & keys.TIME_PLACEHOLDERS:
        if not rule.event_key_by_date:
            return LintItem(
                name,
                FAIL,
                "{business_date} is the day an event arrived: the same event re-sent after midnight becomes "
                'a second run. Remove it, or tick "event key by date".',
            )
        return LintItem(name, WARN, '"Event key by date" is on: the same event sent again on another day is a new run.')
    if used & DATE_PLACEHOLDERS or objects:
        which = ", ".join("{" + n + "}" for n in sorted(used & (DATE_PLACEHOLDERS | objects)))
        return LintItem(name, PASS, f"Key varies by {which}; it is kept under this rule's own namespace.")
    return LintItem(
        name, FAIL, "Key has no date or object placeholder: every slot would share one run. Add {business_date}."
    )


def _retries(rule: LintInput) -> LintItem:
    name = "retries capped with jitter"
    problems = []
    if not rule.max_attempts or rule.max_attempts < 1:
        problems.append("no attempt cap")
    if not rule.max_retry_window_seconds:
        problems.append("no cap on elapsed retry time")
    if not rule.max_delay_seconds:
        problems.append("no cap on one delay")
    if rule.jitter_max is None or rule.jitter_min is None or rule.jitter_max <= rule.jitter_min:
        problems.append("no jitter (jitter max must exceed jitter min), so failed runs retry in lockstep")
    if problems:
        text = "; ".join(problems)
        return LintItem(name, FAIL, text[0].upper() + text[1:] + ".")
    return LintItem(
        name,
        PASS,
        f"At most {rule.max_attempts} attempts within {rule.max_retry_window_seconds}s, "
        f"jitter x{rule.jitter_min:g}-{rule.jitter_max:g}.",
    )


def _catchup(rule: LintInput) -> LintItem:
    name = "catch-up window set"
    if rule.catchup_max_delay_seconds and rule.catchup_max_delay_seconds > 0:
        return LintItem(name, PASS, f"Slots later than {rule.catchup_max_delay_seconds}s are recorded as missed.")
    return LintItem(name, FAIL, "No catch-up window: set catch-up max delay above 0.")


def _lease(rule: LintInput) -> LintItem:
    name = "lease TTL above p99 duration"
    if rule.skill_p99_seconds is None:
        return LintItem(name, WARN, "No succeeded run of this skill yet: p99 duration unknown.")
    if rule.lease_ttl_seconds > rule.skill_p99_seconds:
        return LintItem(name, PASS, f"Lease {rule.lease_ttl_seconds}s > p99 {rule.skill_p99_seconds:.1f}s.")
    return LintItem(
        name,
        FAIL,
        f"Lease {rule.lease_ttl_seconds}s <= p99 {rule.skill_p99_seconds:.1f}s: slow runs lose their lease "
        "and run twice.",
    )


def _alert_route(rule: LintInput) -> LintItem:
    name = "alert carries run id and biz_key"
    missing = sorted(REQUIRED_ALERT_FIELDS - rule.alert_fields)
    if missing:
        return LintItem(name, FAIL, f"Final-failure alert lacks {', '.join(missing)}.")
    return LintItem(name, PASS, "Final-failure alerts carry " + ", ".join(sorted(rule.alert_fields)) + ".")


def _backpressure(rule: LintInput) -> LintItem:
    name = "backpressure class fits"
    for scope, high, low in rule.watermarks:
        errors = backpressure.watermark_errors(high=high, low=low)
        if errors:
            return LintItem(name, FAIL, f"Watermarks of {scope}: " + " ".join(errors.values()))
    if rule.recoverability == backpressure.COALESCE and not (rule.object_key_template or "").strip():
        return LintItem(
            name, FAIL, "Coalesce without an object key template: there is no object whose pending run to replace."
        )
    if rule.coalesce_window_seconds and rule.recoverability != backpressure.COALESCE:
        return LintItem(
            name,
            WARN,
            f"A coalesce window of {rule.coalesce_window_seconds}s does nothing unless the class is coalesce.",
        )
    if rule.recoverability == backpressure.COALESCE:
        window = f", waiting {rule.coalesce_window_seconds}s for newer ones" if rule.coalesce_window_seconds else ""
        return LintItem(name, PASS, f"Newer triggers of an object replace its pending run{window}.")
    if rule.recoverability == backpressure.RECOMPUTABLE:
        set_marks = [(s, h) for s, h, _low in rule.watermarks if h is not None]
        if not set_marks:
            return LintItem(name, PASS, "Recomputable, but no watermark is set: never shed.")
        where = ", ".join(f"{s} at {h}" for s, h in set_marks)
        return LintItem(name, PASS, f"Shed above the high watermark of pending runs ({where}).")
    return LintItem(name, PASS, "One-time input: never shed.")
