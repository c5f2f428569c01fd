"""Readiness flags through the scheduler tick: wait (re-check until a local deadline), skip, fail.

Service level on the real database; the clock is passed in as `now=`, one tick per simulated minute.
"""

import logging
from datetime import UTC, datetime, time, timedelta

import pytest

from deadletters.models import Alert, DeadLetter
from runs.models import Decision, SlotHold, TaskRun
from tasks.flags import flag_clear, flag_set
from tasks.models import TriggerRule
from tasks.triggers.scheduler import scheduler_tick
from tests.support.rules import build_rule, make_rule

pytestmark = pytest.mark.django_db

FLAG = "pipeline.raw_data.ready"
# 2026-12-01 08:00 in Berlin (UTC+1) is 07:00 UTC.
SLOT = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)


def berlin(hh: int, mm: int, ss: int = 0) -> datetime:
    return datetime(2026, 12, 1, hh - 1, mm, ss, tzinfo=UTC)


def daily_report(name: str = "daily-report", **over) -> TriggerRule:
    """08:00 Berlin every day, waiting for FLAG until 12:00 with a re-check every 10 minutes; due at SLOT."""
    fields = {
        "kind": TriggerRule.Kind.CRON,
        "cron": "0 8 * * *",
        "timezone": "Europe/Berlin",
        "dedupe_key_template": "{rule}:{business_date}",
        "depends_on": [FLAG],
        "not_ready_policy": TriggerRule.NotReady.WAIT,
        "ready_recheck_seconds": 600,
        "ready_deadline": time(12, 0),
        **over,
    }
    return make_rule(name, due=SLOT, **fields)


def tick_every_minute(start: datetime, end: datetime, *, at_second: int = 5, on=None) -> None:
    """One tick per minute at hh:mm:05 (within the on-time grace of an 08:00 slot) from start to end;
    on(now) runs before each tick."""
    now = start.replace(second=at_second)
    while now <= end:
        if on is not None:
            on(now)
        scheduler_tick(now=now)
        now += timedelta(minutes=1)


# Re-checks are every 10 minutes from 08:00:05: ..., 09:30:05, 09:40:05, 09:50:05.
@pytest.mark.parametrize(("set_at", "runs_at"), [((9, 40), (9, 40, 5)), ((9, 41), (9, 50, 5)), ((9, 39), (9, 40, 5))])
def test_it_runs_once_at_the_first_recheck_after_the_flag_is_set(django_capture_on_commit_callbacks, set_at, runs_at):
    rule = daily_report()

    def set_flag(now):
        if now == berlin(*set_at, 5):
            flag_set(name=FLAG, scope="2026-12-01", actor="pipeline", now=berlin(*set_at))

    with django_capture_on_commit_callbacks(execute=False):
        tick_every_minute(berlin(8, 0), berlin(10, 30), on=set_flag)

    runs = list(TaskRun.objects.filter(rule=rule))
    assert len(runs) == 1
    assert runs[0].trigger_at == berlin(*runs_at)
    assert runs[0].slot == SLOT
    assert runs[0].biz_key == f"rule/{runs[0].rule_id}/slot/daily-report:2026-12-01"
    assert not Decision.objects.filter(rule=rule).exists()
    assert not SlotHold.objects.exists()


def test_it_holds_the_slot_while_waiting_and_rechecks_on_schedule():
    rule = daily_report()
    scheduler_tick(now=berlin(8, 0, 1))
    hold = SlotHold.objects.get(rule=rule)
    assert (hold.slot, hold.reason) == (SLOT, SlotHold.Reason.NOT_READY)
    assert hold.recheck_at == berlin(8, 10, 1)
    assert hold.deadline == berlin(12, 0)
    scheduler_tick(now=berlin(8, 5))  # not due for a re-check: unchanged
    assert SlotHold.objects.get(pk=hold.pk).checks == 0
    scheduler_tick(now=berlin(8, 10, 1))
    assert SlotHold.objects.get(pk=hold.pk).checks == 1
    assert not TaskRun.objects.exists()


def test_it_expires_at_the_deadline_with_one_decision_and_one_alert(django_capture_on_commit_callbacks, caplog):
    rule = daily_report()
    caplog.set_level(logging.ERROR, logger="harness.alerts")
    with django_capture_on_commit_callbacks(execute=True):
        tick_every_minute(berlin(8, 0), berlin(13, 0))

    assert not TaskRun.objects.filter(rule=rule).exists()
    decision = Decision.objects.get(rule=rule, slot=SLOT)
    assert decision.reason == Decision.Reason.NOT_READY_EXPIRED
    assert decision.details["missing"] == [FLAG]
    assert decision.details["deadline"] == berlin(12, 0).isoformat()
    # The last re-check was at the deadline; the tick after it expired the slot.
    assert decision.created_at == berlin(12, 0, 5)
    alerts = [r for r in caplog.records if r.name == "harness.alerts" and "expired" in r.getMessage()]
    assert len(alerts) == 1
    assert "daily-report" in alerts[0].getMessage() and FLAG in alerts[0].getMessage()
    # One alert event recorded (the outbox row the alert channels deliver from).
    assert Alert.objects.filter(dedupe_key__startswith="expired:daily-report:", channel__isnull=True).count() == 1
    assert not SlotHold.objects.exists()


def test_a_flag_for_another_business_date_does_not_count():
    rule = daily_report()
    flag_set(name=FLAG, scope="2026-11-30", actor="pipeline", now=berlin(7, 0))
    scheduler_tick(now=berlin(8, 0, 1))
    assert SlotHold.objects.filter(rule=rule).exists()
    assert not TaskRun.objects.exists()


def test_a_cleared_flag_is_not_ready_again():
    rule = daily_report()
    flag_set(name=FLAG, scope="2026-12-01", actor="pipeline", now=berlin(7, 0))
    assert flag_clear(name=FLAG, scope="2026-12-01", actor="ops")
    scheduler_tick(now=berlin(8, 0, 1))
    assert SlotHold.objects.filter(rule=rule).exists()


def test_it_runs_at_once_when_the_flag_is_already_set():
    rule = daily_report()
    flag_set(name=FLAG, scope="2026-12-01", actor="pipeline", now=berlin(7, 0))
    scheduler_tick(now=berlin(8, 0, 1))
    assert TaskRun.objects.filter(rule=rule, trigger_at=berlin(8, 0, 1)).count() == 1
    assert not SlotHold.objects.exists()


def test_the_skip_policy_records_a_not_ready_decision():
    rule = daily_report(not_ready_policy=TriggerRule.NotReady.SKIP)
    scheduler_tick(now=berlin(8, 0, 1))
    assert Decision.objects.get(rule=rule).reason == Decision.Reason.NOT_READY
    assert not TaskRun.objects.exists() and not SlotHold.objects.exists()


def test_the_fail_policy_makes_a_failed_run_with_a_dead_letter(django_capture_on_commit_callbacks):
    rule = daily_report(not_ready_policy=TriggerRule.NotReady.FAIL)
    with django_capture_on_commit_callbacks(execute=True):
        scheduler_tick(now=berlin(8, 0, 1))
    run = TaskRun.objects.get(rule=rule)
    assert (run.state, run.last_error_kind) == (TaskRun.State.FAILED, "state_precondition")
    assert FLAG in run.last_error
    assert DeadLetter.objects.filter(run=run).count() == 1
    assert not Decision.objects.exists()


def test_flags_can_be_scoped_by_a_key_template():
    rule = daily_report(depends_scope="{channel}:{business_date}", params={"channel": "email"})
    flag_set(name=FLAG, scope="email:2026-12-01", actor="pipeline", now=berlin(7, 0))
    scheduler_tick(now=berlin(8, 0, 1))
    assert TaskRun.objects.filter(rule=rule).count() == 1


def test_a_paused_rule_turns_its_held_slot_into_a_paused_decision():
    rule = daily_report()
    scheduler_tick(now=berlin(8, 0, 1))
    TriggerRule.objects.filter(pk=rule.pk).update(enabled=False)
    scheduler_tick(now=berlin(8, 10, 1))
    assert Decision.objects.get(rule=rule).reason == Decision.Reason.PAUSED
    assert not SlotHold.objects.exists()


def test_the_wait_policy_needs_a_deadline():
    rule = build_rule("x", depends_on=[FLAG], not_ready_policy="wait")
    with pytest.raises(Exception) as exc:
        rule.full_clean()
    assert "ready_deadline" in exc.value.message_dict
