"""Catch-up after an outage through the real tick: capped, paced, and gated by operator approval."""

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from runs.models import Decision, TaskRun
from runs.sweeper import sweep
from tasks.models import TriggerRule
from tasks.triggers.scheduler import scheduler_tick

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 0, 0, tzinfo=UTC)
OUTAGE = timedelta(hours=12)
NOW = T0 + OUTAGE + timedelta(seconds=30)  # back 30 s after the slot at T0+12h: every slot is late


def make_rule(**over) -> TriggerRule:
    fields = {
        "name": "every-minute",
        "reason": "test",
        "kind": TriggerRule.Kind.CRON,
        "cron": "* * * * *",
        "timezone": "UTC",
        "skill": "harness.noop",
        "dedupe_key_template": "{rule}:{slot}",
        "catchup": TriggerRule.CatchUp.ALL,
        "catchup_max_delay_seconds": 13 * 3600,
        "catchup_max_count": 5,
        "catchup_spacing_seconds": 60,
        **over,
    }
    rule = TriggerRule(**fields)
    rule.full_clean()
    rule.save()
    TriggerRule.objects.filter(pk=rule.pk).update(next_fire_at=T0, last_slot_at=None)
    rule.refresh_from_db()
    return rule


def test_a_12_hour_outage_gives_5_paced_runs_and_decisions_for_the_rest():
    rule = make_rule()
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
    rule = make_rule(catchup_max_delay_seconds=3 * 3600)
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
    rule = make_rule(catchup_approval_threshold=10)
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
    assert "Approve selected catch-up runs" in page.content.decode()
    response = client.post(
        changelist,
        {"action": "approve_catchup", "_selected_action": [str(pk) for pk in runs.values_list("pk", flat=True)]},
        follow=True,
    )
    assert response.status_code == 200
    assert "Approved 5 catch-up run(s)" in response.content.decode()
    approved = list(runs.order_by("slot"))
    assert {r.state for r in approved} == {TaskRun.State.PENDING}
    assert {r.approved_by for r in approved} == {"op"}
    # Paced again from the approval, one minute apart, in slot order.
    first = approved[0].run_after
    assert [r.run_after - first for r in approved] == [timedelta(minutes=i) for i in range(5)]
    assert approved[0].dispatched_at is not None


def test_rejecting_cancels_the_gated_runs_and_keeps_the_slots_accounted(client, operator):
    rule = make_rule(catchup_approval_threshold=10)
    scheduler_tick(now=NOW)
    ids = [str(pk) for pk in TaskRun.objects.filter(rule=rule).values_list("pk", flat=True)]
    client.post(reverse("admin:runs_taskrun_changelist"), {"action": "reject_catchup", "_selected_action": ids})
    assert set(TaskRun.objects.filter(rule=rule).values_list("state", flat=True)) == {TaskRun.State.CANCELLED}


def test_the_approve_action_is_hidden_without_the_permission(client):
    user = get_user_model().objects.create_user("viewer", password="pw-viewer-123", is_staff=True)
    from django.contrib.auth.models import Permission

    user.user_permissions.add(Permission.objects.get(codename="view_taskrun"))
    client.force_login(user)
    page = client.get(reverse("admin:runs_taskrun_changelist"))
    assert page.status_code == 200
    assert "approve_catchup" not in page.content.decode()


def test_under_the_threshold_catch_up_runs_without_approval():
    rule = make_rule(catchup_approval_threshold=100000)
    scheduler_tick(now=NOW)
    assert set(TaskRun.objects.filter(rule=rule).values_list("state", flat=True)) == {TaskRun.State.PENDING}
