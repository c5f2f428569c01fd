"""Plans stay true across change, with real beat ticks and a real worker: after a retime a plan of no
change differs nowhere; an edit planned while beat is down leaves the undecided slots undecided on
both sides; after the outage the scheduler's own tick history replays the edited rule's slots inside
it as the outage decided them (caught up or superseded), never as "runs"."""

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import SchedulerOutage, SchedulerTick, TaskRun
from tasks.models import TriggerRule
from tasks.rules import plan as planned
from tasks.triggers.operator import rule_save
from tasks.triggers.plan import rule_plan
from tests.e2e.helpers import START_TIMEOUT, recording_rule, wait_ticking
from tests.support.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.one_pass("postgresql")]

GRACE_SECONDS = 2


def _edited(rule: TriggerRule, **changes) -> TriggerRule:
    edited = TriggerRule.objects.get(pk=rule.pk)
    for name, value in changes.items():
        setattr(edited, name, value)
    edited.full_clean()
    return edited


def _differing(plan) -> list:
    return [(r.slot, r.current, r.new) for r in plan.past if r.differs]


def test_a_retime_then_a_plan_of_no_change_and_an_edit_planned_during_an_outage(harness, settings):
    settings.HARNESS = {**settings.HARNESS, "SLOT_GRACE_SECONDS": GRACE_SECONDS}
    env = {"HARNESS_SLOT_GRACE_SECONDS": str(GRACE_SECONDS)}
    rule = recording_rule(
        "plan-retimed", kind="interval", interval_seconds=4, catchup="latest", catchup_max_delay_seconds=600
    )
    harness.worker("w1", extra_env=env)
    beat = harness.beat("beat1", extra_env=env)
    wait_ticking(timeout=START_TIMEOUT)
    wait_for(lambda: TaskRun.objects.filter(rule=rule).count() >= 2, timeout=START_TIMEOUT, what="two runs at 4 s")

    # The retime, saved as the admin saves it: every 4 s becomes every 6 s.
    rule.refresh_from_db()
    rule.interval_seconds = 6
    rule.full_clean()
    retimed_at = timezone.now()
    rule_save(rule, now=retimed_at)
    wait_for(
        lambda: TaskRun.objects.filter(rule=rule, slot__gt=retimed_at).count() >= 2,
        timeout=START_TIMEOUT,
        what="two runs at 6 s",
    )
    rule.refresh_from_db()
    same = rule_plan(rule, _edited(rule), now=timezone.now(), days=1)
    assert _differing(same) == []
    assert sum(1 for r in same.past if r.compared and r.recorded is not None) >= 2
    assert all(not r.compared for r in same.past if r.slot <= retimed_at)  # another schedule's slots

    # Beat down for four slots: the plan of an edit made now leaves the undecided slots undecided.
    beat.stop()
    wait_for(
        lambda: timezone.now() - SchedulerTick.objects.get(name="scheduler").last_tick_at > timedelta(seconds=24),
        timeout=120,
        interval=0.5,
        what="four slots without a tick",
    )
    now = timezone.now()
    last_tick = SchedulerTick.objects.get(name="scheduler").last_tick_at
    during = rule_plan(rule, _edited(rule, interval_seconds=4), now=now, days=1)
    undecided = [r for r in during.past if r.slot > last_tick]
    assert len(undecided) >= 6
    assert {(r.current, r.new) for r in undecided} <= {
        (planned.PENDING, planned.PENDING),
        (planned.PENDING, planned.NONE),
        (planned.NONE, planned.PENDING),
    }
    assert _differing(rule_plan(rule, _edited(rule), now=now, days=1)) == []

    # Beat back: the tick that ends the outage records it, and the edited rule's slots inside it are
    # replayed as catch-up "latest" decides them, as the rule's own were.
    harness.beat("beat2", extra_env=env)
    outage = wait_for(
        lambda: SchedulerOutage.objects.filter(started_at=last_tick).first(), timeout=START_TIMEOUT, what="the outage"
    )
    after = rule_plan(rule, _edited(rule), now=outage.ended_at, days=1)
    assert _differing(after) == []
    edited = rule_plan(rule, _edited(rule, interval_seconds=4), now=outage.ended_at, days=1)
    grace = timedelta(seconds=GRACE_SECONDS)
    inside = [r.new for r in edited.past if outage.started_at < r.slot < outage.ended_at - grace]
    inside = [outcome for outcome in inside if outcome != planned.NONE]  # the edited rule's slots
    print(f"\n[e2e plan change] outage {outage}: edited slots inside {inside}")
    # Superseded by a later one (a slot on time at the tick, or the one caught up), never "runs".
    assert len(inside) >= 5
    assert set(inside) <= {"superseded", planned.CATCHUP} and inside.count(planned.CATCHUP) <= 1
