"""Catch-up after an outage through the real tick: capped, paced, and gated by operator approval."""

from datetime import UTC, datetime, time, timedelta
from itertools import pairwise

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from runs.engine.sweeper import sweep
from runs.models import Decision, SlotHold, TaskRun
from tasks.flags import flag_set
from tasks.models import TriggerRule
from tasks.rules import schedule
from tasks.triggers.scheduler import scheduler_tick
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 0, 0, tzinfo=UTC)
OUTAGE = timedelta(hours=12)
NOW = T0 + OUTAGE + timedelta(seconds=30)  # back 30 s after the slot at T0+12h: every slot is late


def catching_up(**over) -> TriggerRule:
    """Every minute in UTC, catching up at most 5 slots 60 s apart within 13 h; due at T0."""
    fields = {
        "kind": TriggerRule.Kind.CRON,
        "catchup": TriggerRule.CatchUp.ALL,
        "catchup_max_delay_seconds": 13 * 3600,
        "catchup_max_count": 5,
        "catchup_spacing_seconds": 60,
        **over,
    }
    return make_rule("every-minute", due=T0, **fields)


def test_a_12_hour_outage_gives_5_paced_runs_and_decisions_for_the_rest():
    rule = catching_up()
    scheduler_tick(now=NOW)

    slots = [T0 + timedelta(minutes=m) for m in range(12 * 60 + 1)]
    runs = list(TaskRun.objects.filter(rule=rule).order_by("slot"))
    assert [r.slot for r in runs] == slots[-5:]  # the most recent five
    assert [r.run_after for r in runs] == [NOW + timedelta(minutes=i) for i in range(5)]
    assert {r.source for r in runs} == {TaskRun.Source.CATCHUP}
    assert {r.state for r in runs} == {TaskRun.State.PENDING}
    decisions = Decision.objects.filter(rule=rule)
    assert decisions.count() == len(slots) - 5
    assert set(decisions.values_list("reason", flat=True)) == {Decision.Reason.CATCHUP_CAPPED}
    # Invariant 3: every slot is exactly one run or one decision.
    assert sorted([*decisions.values_list("slot", flat=True), *(r.slot for r in runs)]) == slots
    # Pacing holds: only the first is dispatched now; the sweeper sends the rest when each is due.
    assert [r.dispatched_at is not None for r in runs] == [True, False, False, False, False]
    sweep(now=NOW + timedelta(minutes=2, seconds=1))
    dispatched = TaskRun.objects.filter(rule=rule, dispatched_at__isnull=False).count()
    assert dispatched == 3


def test_beyond_the_max_delay_slots_are_missed_not_capped():
    rule = catching_up(catchup_max_delay_seconds=3 * 3600)
    scheduler_tick(now=NOW)
    capped = Decision.objects.filter(rule=rule, reason=Decision.Reason.CATCHUP_CAPPED).count()
    missed = Decision.objects.filter(rule=rule, reason=Decision.Reason.MISSED).count()
    # Back 30 s after the last slot: the 180 slots from T0+9h01 are within 3 h, the rest are older.
    assert TaskRun.objects.filter(rule=rule).count() == 5
    assert capped == 180 - 5
    assert missed == 12 * 60 + 1 - 180


@pytest.fixture
def operator(client):
    user = get_user_model().objects.create_superuser("op", "op@example.com", "pw-op-123456")
    client.force_login(user)
    return user


def test_above_the_approval_threshold_nothing_runs_until_approved_in_the_admin(client, operator):
    rule = catching_up(catchup_approval_threshold=10)
    scheduler_tick(now=NOW)
    runs = TaskRun.objects.filter(rule=rule)
    assert runs.count() == 5
    assert set(runs.values_list("state", flat=True)) == {TaskRun.State.AWAITING_APPROVAL}
    assert not runs.filter(dispatched_at__isnull=False).exists()

    # Neither the sweeper nor later ticks start them.
    later = NOW + timedelta(hours=1)
    sweep(now=later)
    assert set(runs.values_list("state", flat=True)) == {TaskRun.State.AWAITING_APPROVAL}
    assert not runs.filter(dispatched_at__isnull=False).exists()

    changelist = reverse("admin:runs_taskrun_changelist")
    page = client.get(changelist)
    assert "Approve selected held runs (catch-up burst or uncertain calendar day)" in page.content.decode()
    response = client.post(
        changelist,
        {"action": "approve_held", "_selected_action": [str(pk) for pk in runs.values_list("pk", flat=True)]},
        follow=True,
    )
    assert response.status_code == 200
    assert "Approved 5 held run(s)" in response.content.decode()
    approved = list(runs.order_by("slot"))
    assert {r.state for r in approved} == {TaskRun.State.PENDING}
    assert {r.approved_by for r in approved} == {"op"}
    # Paced again from the approval, one minute apart, in slot order.
    first = approved[0].run_after
    assert [r.run_after - first for r in approved] == [timedelta(minutes=i) for i in range(5)]
    assert approved[0].dispatched_at is not None


def test_rejecting_cancels_the_gated_runs_and_keeps_the_slots_accounted(client, operator):
    rule = catching_up(catchup_approval_threshold=10)
    scheduler_tick(now=NOW)
    ids = [str(pk) for pk in TaskRun.objects.filter(rule=rule).values_list("pk", flat=True)]
    client.post(reverse("admin:runs_taskrun_changelist"), {"action": "reject_held", "_selected_action": ids})
    assert set(TaskRun.objects.filter(rule=rule).values_list("state", flat=True)) == {TaskRun.State.CANCELLED}


def test_the_approve_action_is_hidden_without_the_permission(client):
    user = get_user_model().objects.create_user("viewer", password="pw-viewer-123", is_staff=True)
    from django.contrib.auth.models import Permission

    user.user_permissions.add(Permission.objects.get(codename="view_taskrun"))
    client.force_login(user)
    page = client.get(reverse("admin:runs_taskrun_changelist"))
    assert page.status_code == 200
    assert "approve_held" not in page.content.decode()


def test_under_the_threshold_catch_up_runs_without_approval():
    rule = catching_up(catchup_approval_threshold=100000)
    scheduler_tick(now=NOW)
    assert set(TaskRun.objects.filter(rule=rule).values_list("state", flat=True)) == {TaskRun.State.PENDING}


# --- An outage longer than one tick's bound (HARNESS_MAX_SLOTS_PER_TICK) -------------------------


def catch_up(now: datetime, *, max_slots: int, limit: int = 500) -> int:
    """Tick at `now` until no rule is due any more; returns the number of ticks."""
    for ticks in range(1, limit):
        scheduler_tick(now=now, max_slots=max_slots)
        if not TriggerRule.objects.filter(enabled=True, next_fire_at__lte=now).exists():
            return ticks
    raise AssertionError("the scheduler never caught up")


def accounted(rule: TriggerRule) -> dict[datetime, str]:
    """slot → "run:<source>" or "decision:<reason>"; fails if a slot has two outcomes (invariant 3)."""
    runs = list(TaskRun.objects.filter(rule=rule).values_list("slot", "source"))
    decisions = list(Decision.objects.filter(rule=rule).values_list("slot", "reason"))
    out = {slot: f"run:{source}" for slot, source in runs}
    out.update({slot: f"decision:{reason}" for slot, reason in decisions})
    assert len(out) == len(runs) + len(decisions), "a slot has both a run and a decision, or two of one"
    return out


def test_a_1003_minute_outage_capped_at_5_runs_the_5_most_recent_slots_across_ticks():
    rule = catching_up(catchup_max_delay_seconds=24 * 3600, catchup_spacing_seconds=0)
    slots = [T0 + timedelta(minutes=m) for m in range(1003)]
    now = slots[-1] + timedelta(seconds=30)

    ticks = catch_up(now, max_slots=1000)

    outcome = accounted(rule)
    assert sorted(outcome) == slots
    assert [s for s in slots if outcome[s] == "run:catchup"] == slots[-5:]
    assert {outcome[s] for s in slots[:-5]} == {"decision:catchup_capped"}
    assert ticks == 2


@pytest.mark.parametrize("zone", ["America/New_York", "Europe/Berlin", "Australia/Lord_Howe"])
@pytest.mark.parametrize("max_slots", [7, 3])
def test_an_outage_across_a_repeated_hour_keeps_the_cap_over_small_bounded_ticks(zone, max_slots):
    # 70 minutes of a per-minute cron across the zone's fall-back night: both passes are slots.
    start = {
        "America/New_York": datetime(2026, 11, 1, 5, 20, tzinfo=UTC),  # 01:20 EDT
        "Europe/Berlin": datetime(2026, 10, 25, 0, 20, tzinfo=UTC),  # 02:20 CEST
        "Australia/Lord_Howe": datetime(2026, 4, 4, 14, 40, tzinfo=UTC),  # 01:40 +11:00
    }[zone]
    rule = catching_up(timezone=zone, catchup_max_count=5)
    TriggerRule.objects.filter(pk=rule.pk).update(next_fire_at=start)
    rule.refresh_from_db()
    end = start + timedelta(minutes=70)
    slots = [start, *schedule.slots_between(rule.schedule_spec(), start, end)]
    assert len(slots) == 71
    now = end + timedelta(seconds=30)

    ticks = catch_up(now, max_slots=max_slots)

    outcome = accounted(rule)
    assert sorted(outcome) == slots
    runs = TaskRun.objects.filter(rule=rule).order_by("slot")
    assert [r.slot for r in runs] == slots[-5:]
    assert [r.run_after for r in runs] == [now + timedelta(minutes=i) for i in range(5)]
    assert {outcome[s] for s in slots[:-5]} == {"decision:catchup_capped"}
    assert ticks >= len(slots) // max_slots


def test_an_outage_with_ticks_a_minute_apart_runs_the_most_recent_slots_and_keeps_the_cap():
    # Back at `back`, then a tick every minute: the slot that falls due meanwhile is late too.
    rule = catching_up(catchup_max_delay_seconds=24 * 3600, catchup_spacing_seconds=0)
    slots = [T0 + timedelta(minutes=m) for m in range(1004)]
    back = slots[1002] + timedelta(seconds=30)
    scheduler_tick(now=back, max_slots=1000)
    scheduler_tick(now=back + timedelta(minutes=1), max_slots=1000)

    outcome = accounted(rule)
    assert sorted(outcome) == slots
    assert [s for s in slots if outcome[s] == "run:catchup"] == slots[-5:]
    assert {outcome[s] for s in slots[:-5]} == {"decision:catchup_capped"}


# --- Pacing across ticks -------------------------------------------------------------------------


@pytest.mark.parametrize("max_count", [None, 4])
def test_catch_up_runs_of_several_ticks_are_never_closer_than_the_spacing(max_count):
    rule = catching_up(catchup_max_count=max_count, catchup_spacing_seconds=60)
    slots = [T0 + timedelta(minutes=m) for m in range(7)]
    back = slots[-1] + timedelta(seconds=30)
    for second in range(10):  # a tick every second, two slots each
        scheduler_tick(now=back + timedelta(seconds=second), max_slots=2)

    runs = list(TaskRun.objects.filter(rule=rule).order_by("run_after"))
    assert len(runs) == (max_count or len(slots))
    assert runs[0].run_after == runs[0].trigger_at  # the first starts at once, at the tick that claimed it
    if max_count is None:
        assert runs[0].run_after == back
    gaps = [(b.run_after - a.run_after).total_seconds() for a, b in pairwise(runs)]
    assert all(gap >= 60 for gap in gaps), gaps
    assert [r.slot for r in runs] == sorted(r.slot for r in runs)  # replayed in slot order
    assert sorted(accounted(rule)) == slots


def test_pacing_continues_after_catch_up_runs_that_already_started():
    rule = catching_up(catchup_max_count=None, catchup_spacing_seconds=60)
    back = T0 + timedelta(minutes=1, seconds=30)
    scheduler_tick(now=back, max_slots=1)  # T0: runs at back
    TaskRun.objects.filter(rule=rule).update(
        state=TaskRun.State.RUNNING, lease_owner="worker-1", lease_expires_at=back + timedelta(minutes=5)
    )
    scheduler_tick(now=back + timedelta(seconds=5), max_slots=1)  # T0+1min
    run_after = sorted(TaskRun.objects.filter(rule=rule).values_list("run_after", flat=True))
    assert run_after == [back, back + timedelta(seconds=60)]


def test_held_catch_up_slots_that_become_ready_are_paced_too():
    rule = catching_up(
        catchup_max_count=None,
        catchup_spacing_seconds=60,
        depends_on=["pipeline.ready"],
        not_ready_policy=TriggerRule.NotReady.WAIT,
        ready_recheck_seconds=60,
        ready_deadline=time(23, 0),
    )
    back = T0 + timedelta(minutes=3, seconds=30)
    scheduler_tick(now=back)  # the 4 late slots are chosen for catch-up and held: not ready
    assert SlotHold.objects.filter(rule=rule, source=TaskRun.Source.CATCHUP).count() == 4
    flag_set(name="pipeline.ready", scope="2026-03-01", actor="pipeline", now=back + timedelta(seconds=10))
    ready_at = back + timedelta(seconds=70)
    scheduler_tick(now=ready_at)

    # The 4 held slots run paced, and the slot that fell due meanwhile (late too) is paced after them.
    runs = list(TaskRun.objects.filter(rule=rule).order_by("slot"))
    assert [r.slot for r in runs] == [T0 + timedelta(minutes=m) for m in range(5)]
    assert [r.run_after for r in runs] == [ready_at + timedelta(minutes=i) for i in range(5)]
    assert not SlotHold.objects.filter(rule=rule).exists()
