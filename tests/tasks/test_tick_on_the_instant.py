"""A slot due before the next beat wake-up gets a tick at its exact instant (issue 12).

`now` is passed explicitly: the tests assert which instant is asked for and what the tick at that
instant claims, never how long anything took. (tasks/jobs.py sends that tick as a Celery ETA.)
"""

from datetime import UTC, datetime, timedelta

import pytest

from runs.models import TaskRun
from tasks.models import TriggerRule
from tasks.triggers.scheduler import scheduler_next_instant, scheduler_tick

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, 0, 300_000, tzinfo=UTC)  # a beat wake-up 0.3 s after the second


def every_second(name: str, *, due: datetime) -> TriggerRule:
    rule = TriggerRule.objects.create(
        name=name,
        reason="test",
        kind=TriggerRule.Kind.INTERVAL,
        interval_seconds=1,
        timezone="UTC",
        skill="harness.noop",
        dedupe_key_template="{rule}:{slot}",
    )
    TriggerRule.objects.filter(pk=rule.pk).update(next_fire_at=due, last_slot_at=None)
    return rule


def test_a_tick_asks_for_a_tick_at_the_next_slot_due_before_the_next_wakeup():
    rule = every_second("each-second", due=T0.replace(microsecond=0))  # 12:00:00, due at the wake-up
    scheduler_tick(now=T0)

    # 12:00:01 is 0.7 s away, before the next wake-up (1 s): it gets a tick at its instant.
    upcoming = scheduler_next_instant(now=T0)
    assert upcoming == T0.replace(microsecond=0) + timedelta(seconds=1)
    scheduler_tick(now=upcoming)

    runs = list(TaskRun.objects.filter(rule=rule).order_by("slot").values_list("slot", "trigger_at"))
    assert [slot for slot, _ in runs] == [T0.replace(microsecond=0), upcoming]
    assert runs[1][1] == runs[1][0], "the second slot was claimed on its instant"
    # From that instant, 12:00:02 is a whole second away: the next beat wake-up is soon enough.
    assert scheduler_next_instant(now=upcoming) is None


def test_it_asks_for_nothing_when_the_next_slot_is_beyond_the_next_wakeup():
    every_second("later", due=T0 + timedelta(seconds=1.5))

    assert scheduler_next_instant(now=T0) is None


def test_a_paused_rule_is_not_waited_for():
    rule = every_second("paused", due=T0 + timedelta(seconds=0.5))
    TriggerRule.objects.filter(pk=rule.pk).update(enabled=False)

    assert scheduler_next_instant(now=T0) is None
