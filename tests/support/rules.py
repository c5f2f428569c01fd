"""One way for tests to make a trigger rule: a valid rule by default, any field overridden by keyword.

The defaults are the least a rule needs to pass the model's own checks: an interval rule of 60 s in UTC
running harness.noop, one run per slot. The schedule fields a kind needs come with the kind, so
`make_rule("orders", kind="event")` is a valid event rule; a test names only what its behaviour depends on.
"""

from datetime import UTC, date, datetime

from tasks.models import TriggerRule

# The least each kind needs to be valid; a one-time rule needs its own run_at, so it has none here.
SCHEDULE_DEFAULTS: dict[str, dict] = {
    TriggerRule.Kind.CRON: {"cron": "* * * * *"},
    TriggerRule.Kind.INTERVAL: {"interval_seconds": 60},
    TriggerRule.Kind.EVENT: {"dedupe_key_template": "{rule}:{object_id}:{action}:{version}"},
    TriggerRule.Kind.HEARTBEAT: {"heartbeat_every_seconds": 60},
}

_SAVED_SCHEDULE = object()  # `due` left out: next_fire_at stays as save() computed it


def build_rule(name: str = "rule", **fields) -> TriggerRule:
    """An unsaved rule with the defaults above, for tests of validation (`full_clean`) or of unsaved rules."""
    kind = fields.get("kind", TriggerRule.Kind.INTERVAL)
    values = {
        "reason": "test",
        "kind": kind,
        "timezone": "UTC",
        "skill": "harness.noop",
        **SCHEDULE_DEFAULTS.get(kind, {}),
        **fields,
    }
    return TriggerRule(name=name, **values)


def make_rule(
    name: str = "rule",
    *,
    due: datetime | object | None = _SAVED_SCHEDULE,
    now: datetime | None = None,
    clean: bool = True,
    **fields,
) -> TriggerRule:
    """A saved rule, checked by the model first (clean=False skips that, for a rule a form would refuse).

    `now`: the instant save() reads the schedule from (the real clock if None). `due`: the rule's
    next_fire_at afterwards, as if the tick had not yet handled that slot (None: nothing due), with
    no slot handled before it.
    """
    rule = build_rule(name, **fields)
    if clean:
        rule.full_clean()
    rule.save(now=now)
    if due is not _SAVED_SCHEDULE:
        TriggerRule.objects.filter(pk=rule.pk).update(next_fire_at=due, last_slot_at=None)
        rule.refresh_from_db()
    return rule


def at_0900_shanghai(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, 1, 0, tzinfo=UTC)


def working_day_rule(calendar, *, due: datetime, name: str = "cn-daily-report", **fields) -> TriggerRule:
    """A 09:00 Shanghai rule on a business calendar whose key names its business day and the one
    before it, due at `due` (read from `due` too, so the host's clock plays no part)."""
    return make_rule(
        name,
        kind="cron",
        cron="0 9 * * *",
        timezone="Asia/Shanghai",
        business_calendar=calendar,
        dedupe_key_template="{rule}:{business_date}:data-of-{previous_business_date}",
        due=due,
        now=due,
        **fields,
    )


def rule_form_post(**over) -> dict:
    """A complete, valid post of the rule admin's add form (a daily cron rule); `over` replaces
    fields, a value of None drops one."""
    data = {
        "name": "daily-report",
        "enabled": "on",
        "reason": "Operators need the 09:00 report.",
        "kind": "cron",
        "cron": "0 9 * * *",
        "interval_seconds": "",
        "run_at_0": "",
        "run_at_1": "",
        "timezone": "Asia/Shanghai",
        "dst_gap": "shift",
        "dst_repeat": "first",
        "dedupe_key_template": "report:{business_date}:{channel}",
        "skill": "harness.noop",
        "params": '{"channel": "email"}',
        "max_attempts": "3",
        "backoff_base_seconds": "2.0",
        "max_delay_seconds": "300",
        "max_retry_window_seconds": "3600",
        "jitter_min": "0.5",
        "jitter_max": "1.5",
        "lease_ttl_seconds": "300",
        "catchup": "none",
        "catchup_max_delay_seconds": "300",
    }
    data.update(over)
    return {k: v for k, v in data.items() if v is not None}
