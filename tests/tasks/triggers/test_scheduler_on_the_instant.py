"""A tick starts the slots due before the next beat wake-up on their exact instant.

The clock and the sleep are fakes: the test asserts what the tick does (when it ticks again, which
slots it claims, with which trigger time), never how long anything took.
"""

from datetime import UTC, datetime, timedelta

import pytest

from runs.models import TaskRun
from tasks.models import TriggerRule
from tasks.triggers.scheduler import scheduler_tick_until_next_wakeup
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, 0, 300_000, tzinfo=UTC)  # a beat wake-up 0.3 s after the second


class FakeTime:
    def __init__(self, now: datetime):
        self.now = now
        self.slept: list[float] = []

    def clock(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += timedelta(seconds=seconds)


def every_second(name: str, *, due: datetime) -> TriggerRule:
    return make_rule(name, interval_seconds=1, due=due)


def test_it_sleeps_to_the_next_slot_and_claims_it_on_its_instant():
    rule = every_second("each-second", due=T0.replace(microsecond=0))  # 12:00:00, due at wake-up
    fake = FakeTime(T0)

    result = scheduler_tick_until_next_wakeup(clock=fake.clock, sleep=fake.sleep)

    # 12:00:00 at the wake-up, then 12:00:01 on its instant (0.7 s later); 12:00:02 is the next wake-up's.
    runs = list(TaskRun.objects.filter(rule=rule).order_by("slot").values_list("slot", "trigger_at"))
    assert [slot for slot, _ in runs] == [T0.replace(microsecond=0), T0.replace(microsecond=0) + timedelta(seconds=1)]
    assert runs[1][1] == runs[1][0], "the second slot was claimed on its instant"
    assert fake.slept == [pytest.approx(0.7)]
    assert result.claimed == 2


def test_it_does_not_wait_for_a_slot_beyond_the_next_wakeup():
    rule = every_second("later", due=T0 + timedelta(seconds=1.5))
    fake = FakeTime(T0)

    result = scheduler_tick_until_next_wakeup(clock=fake.clock, sleep=fake.sleep)

    assert fake.slept == []
    assert result.claimed == 0
    assert not TaskRun.objects.filter(rule=rule).exists()


def test_a_paused_rule_is_not_waited_for():
    rule = every_second("paused", due=T0 + timedelta(seconds=0.5))
    TriggerRule.objects.filter(pk=rule.pk).update(enabled=False)
    fake = FakeTime(T0)

    scheduler_tick_until_next_wakeup(clock=fake.clock, sleep=fake.sleep)

    assert fake.slept == []
    assert not TaskRun.objects.filter(rule=rule).exists()
