"""Coalescing (rule class "coalesce"): a newer trigger of an object replaces its pending run.

The replaced run is kept in state "coalesced" (its biz_key stays taken: a resend is a dedupe hit)
and a "coalesced" decision points at the survivor, so every trigger is the survivor or a decision.
Real database; the race runs on two or more connections (PostgreSQL in the backend pass).
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from runs.desk.selectors import run_coalesced_into, run_timeline
from runs.engine.admission import pool_wake
from runs.engine.approvals import catchup_approve
from runs.engine.claims import MAX_COALESCE_TURNS, run_claim
from runs.engine.executor import run_execute
from runs.engine.operations import OperationError, run_retry_now
from runs.engine.store import store
from runs.models import Decision, PoolSlot, PoolWaiter, TaskRun
from tasks.models import Pool, TriggerRule, TriggerSource
from tasks.triggers.events import event_intake
from tasks.triggers.operator import rule_fire
from tasks.triggers.work import work_for_slot
from tests.support.races import run_concurrently
from tests.support.rules import build_rule, make_rule

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def coalescing_rule(name="order-state", *, window=0, **over) -> TriggerRule:
    rule = make_rule(
        name,
        kind="event",
        dedupe_key_template="{rule}:{object_id}:{version}",
        object_key_template="order:{object_id}",
        recoverability="coalesce",
        coalesce_window_seconds=window,
        **over,
    )
    TriggerSource.objects.create(name=f"{name}-in", kind="python", identity="svc:orders", rule=rule)
    return rule


def hourly_sync() -> TriggerRule:
    """Every slot of this rule is for one object, so any two of its runs could coalesce. full_clean refuses
    such a fixed object key; saved without it, as the shell or a fixture could, claims must still be safe."""
    return make_rule(
        "hourly-sync",
        kind="cron",
        cron="0 * * * *",
        object_key_template="account:main",
        recoverability="coalesce",
        clean=False,
    )


def send(rule: TriggerRule, version: int, *, object_id="o-1", at=NOW, delivery_id=None, **extra):
    payload = {"object_id": object_id, "action": "updated", "version": version, **extra}
    return event_intake(source=f"{rule.name}-in", payload=payload, now=at, delivery_id=delivery_id)


@pytest.mark.django_db
def test_a_newer_trigger_replaces_the_pending_run_of_its_object_and_its_payload_wins():
    rule = coalescing_rule()
    TriggerSource.objects.filter(rule=rule).update(snapshot_fields=["status"])

    first = send(rule, 1, status="paid")
    second = send(rule, 2, status="shipped", at=NOW + timedelta(seconds=5))

    old, new = TaskRun.objects.get(pk=first.run_id), TaskRun.objects.get(pk=second.run_id)
    assert old.state == TaskRun.State.COALESCED and new.state == TaskRun.State.PENDING
    assert new.payload["event"]["snapshot"] == {"status": "shipped"}
    assert (second.status, second.outcome) == (202, "accepted")
    assert second.as_json()["replaced"] == [{"run_id": old.id, "biz_key": old.biz_key}]
    decision = Decision.objects.get(reason=Decision.Reason.COALESCED)
    assert (decision.rule, decision.slot, decision.biz_key, decision.survivor) == (rule, None, old.biz_key, new)
    assert decision.details["survivor_biz_key"] == new.biz_key and decision.details["object_key"] == "order:o-1"


@pytest.mark.django_db
def test_a_resend_of_the_replaced_trigger_stays_a_dedupe_hit_and_is_told_so():
    rule = coalescing_rule()
    first = send(rule, 1)
    second = send(rule, 2)

    again = send(rule, 1, at=NOW + timedelta(minutes=1))

    assert (again.status, again.outcome, again.run_id) == (202, "coalesced", first.run_id)
    assert again.as_json()["survivor"] == {
        "run_id": second.run_id,
        "biz_key": f"rule/{rule.pk}/event/order-state:o-1:2",
    }
    assert TaskRun.objects.count() == 2  # no new run for version 1: one run per biz_key, ever
    assert TaskRun.objects.get(pk=first.run_id).dedupe_hits == 1


@pytest.mark.django_db
def test_a_run_that_already_started_is_not_replaced():
    rule = coalescing_rule()
    first = send(rule, 1)
    assert store().lease_claim(TaskRun.objects.get(pk=first.run_id), worker="w1", now=NOW, plain=False) is not None

    second = send(rule, 2)

    assert TaskRun.objects.get(pk=first.run_id).state == TaskRun.State.RUNNING
    assert TaskRun.objects.get(pk=second.run_id).state == TaskRun.State.PENDING
    assert not Decision.objects.exists()


@pytest.mark.django_db
def test_a_replaced_run_is_never_executed_even_if_its_message_arrives():
    rule = coalescing_rule()
    first = send(rule, 1)
    send(rule, 2)

    run_execute(run_id=first.run_id, worker="w1", clock=lambda: NOW + timedelta(seconds=1))

    old = TaskRun.objects.get(pk=first.run_id)
    assert (old.state, old.attempts) == (TaskRun.State.COALESCED, 0)


@pytest.mark.django_db
def test_other_objects_and_other_rules_are_not_coalesced():
    rule = coalescing_rule()
    other = coalescing_rule("invoice-state")
    send(rule, 1, object_id="o-1")
    send(rule, 1, object_id="o-2")
    send(other, 1, object_id="o-1")

    assert TaskRun.objects.filter(state=TaskRun.State.PENDING).count() == 3
    assert not Decision.objects.exists()


@pytest.mark.django_db
def test_a_chain_of_triggers_leaves_one_survivor_that_every_replaced_run_leads_to():
    rule = coalescing_rule()
    results = [send(rule, v, at=NOW + timedelta(seconds=v)) for v in range(1, 5)]

    survivor = TaskRun.objects.get(state=TaskRun.State.PENDING)
    assert survivor.pk == results[-1].run_id
    decisions = Decision.objects.filter(reason=Decision.Reason.COALESCED)
    # Each decision names the run that replaced it; following them ends at the one survivor.
    assert [d.survivor_id for d in decisions.order_by("id")] == [r.run_id for r in results[1:]]
    replaced = TaskRun.objects.filter(state=TaskRun.State.COALESCED)
    assert replaced.count() == 3 and {run_coalesced_into(r) for r in replaced} == {survivor}
    # A resend of the first trigger is told which run carries its work now, not the next link.
    assert send(rule, 1, at=NOW + timedelta(seconds=9)).as_json()["survivor"]["run_id"] == survivor.pk


@pytest.mark.django_db
def test_the_window_holds_the_first_run_back_and_the_survivor_keeps_its_start():
    rule = coalescing_rule(window=30)
    first = send(rule, 1)
    assert TaskRun.objects.get(pk=first.run_id).run_after == NOW + timedelta(seconds=30)

    second = send(rule, 2, at=NOW + timedelta(seconds=20))

    # Starts when the first trigger's window ends, not 30 s after the newest: no starvation.
    assert TaskRun.objects.get(pk=second.run_id).run_after == NOW + timedelta(seconds=30)


@pytest.mark.django_db
def test_an_operator_run_is_never_coalesced():
    rule = hourly_sync()
    rule_fire(rule=rule, actor="olga", now=NOW, slot=NOW - timedelta(hours=2))
    rule_fire(rule=rule, actor="olga", now=NOW, slot=NOW - timedelta(hours=1))

    assert TaskRun.objects.filter(state=TaskRun.State.PENDING).count() == 2


@pytest.mark.django_db
def test_a_coalescing_rule_needs_an_object_key():
    rule = build_rule(
        "no-object", kind="event", dedupe_key_template="{rule}:{object_id}:{version}", recoverability="coalesce"
    )
    with pytest.raises(Exception) as caught:
        rule.full_clean()
    assert "object_key_template" in caught.value.message_dict


@pytest.mark.django_db(transaction=True)
def test_concurrent_triggers_leave_exactly_one_pending_run_and_lose_none():
    """Each racer sends its own version of one object on its own connection, all at once."""
    rule = coalescing_rule()
    racers = 8 if connection.vendor == "postgresql" else 4
    assert racers < MAX_COALESCE_TURNS

    results = run_concurrently(lambda i: send(rule, i + 1, delivery_id=f"d-{i}"), racers)

    assert all(r.status == 202 for r in results), [r.as_json() for r in results]
    pending = TaskRun.objects.filter(state=TaskRun.State.PENDING)
    assert pending.count() == 1
    coalesced = TaskRun.objects.filter(state=TaskRun.State.COALESCED)
    assert TaskRun.objects.count() == racers and coalesced.count() == racers - 1
    decisions = Decision.objects.filter(reason=Decision.Reason.COALESCED)
    # Every trigger is the survivor or a coalesced run with its decision, leading to the survivor.
    assert sorted(decisions.values_list("biz_key", flat=True)) == sorted(coalesced.values_list("biz_key", flat=True))
    assert {run_coalesced_into(r) for r in coalesced} == {pending.get()}


@pytest.mark.django_db
def test_a_catch_up_run_gated_for_approval_is_not_coalesced_and_approving_it_never_conflicts():
    rule = hourly_sync()
    gated = run_claim(
        work_for_slot(rule, NOW - timedelta(hours=2), source="catchup"), now=NOW, state="awaiting_approval"
    )
    on_time = run_claim(work_for_slot(rule, NOW, source="scheduler"), now=NOW)
    assert on_time.replaced == ()

    assert catchup_approve(run_ids=[gated.run.id], actor="olga", now=NOW) == 1

    assert TaskRun.objects.filter(rule=rule, state=TaskRun.State.PENDING).count() == 2


@pytest.mark.django_db
def test_a_replaced_run_gives_up_its_place_in_the_pool_line_and_any_slot_it_was_handed():
    rule = coalescing_rule()
    pool = Pool.objects.create(name="provider", reason="test", max_concurrency=1)
    first = TaskRun.objects.get(pk=send(rule, 1).run_id)
    PoolWaiter.objects.create(run=first, pool=pool, reason="concurrency", since=NOW, checked_at=NOW)
    assert pool_wake(pool_id=pool.id, key="", now=NOW) == 1  # a release hands it the slot, as admission would
    assert PoolSlot.objects.filter(run=first, worker="").exists()

    send(rule, 2)

    assert not PoolWaiter.objects.filter(run=first).exists()
    assert not PoolSlot.objects.filter(run=first).exists()  # free for the next run now, not when it expires


@pytest.mark.django_db
def test_the_run_page_of_a_replaced_run_shows_its_coalesced_decision():
    rule = coalescing_rule()
    first = send(rule, 1)
    send(rule, 2)

    timeline = run_timeline(TaskRun.objects.get(pk=first.run_id), now=timezone.now())

    assert [d.reason for d in timeline["decisions"]] == ["coalesced"]


@pytest.mark.django_db
def test_retry_now_of_a_parked_run_whose_object_has_a_newer_pending_run_is_refused_with_a_reason():
    # A budget- or provider-parked run waits with its attempt taken back; a newer trigger of the same
    # object then becomes the object's pending run, and "retry now" must say so rather than fail.
    rule = coalescing_rule()
    parked = TaskRun.objects.get(pk=send(rule, 1).run_id)
    TaskRun.objects.filter(pk=parked.pk).update(state=TaskRun.State.WAITING_RETRY, last_error_kind="budget")
    newer = send(rule, 2)

    with pytest.raises(OperationError, match="already has a pending run"):
        run_retry_now(run_id=parked.pk, actor=None, now=NOW, reason="on-call")

    assert TaskRun.objects.get(pk=parked.pk).state == TaskRun.State.WAITING_RETRY
    assert TaskRun.objects.get(pk=newer.run_id).state == TaskRun.State.PENDING
