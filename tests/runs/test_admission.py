"""Pool admission at the service level: the executor in-process with an explicit clock and
the real database. A run takes a slot in every pool it draws from before its lease, waits unstarted
(no attempt, no lease) when it gets none, and a release hands the slot to the next waiting run in
round-robin order across keys. Transactional, so dispatch hooks really fire.
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from runs.engine.admission import HANDOFF_TTL, pool_admit, pool_release
from runs.engine.claims import Work, run_claim
from runs.engine.executor import run_execute
from runs.engine.leases import LeaseRenewer
from runs.engine.operations import run_lease_force_release
from runs.engine.store import NotPlain, store
from runs.engine.sweeper import sweep
from runs.models import Attempt, PoolSlot, PoolWaiter, TaskRun
from tasks.models import GLOBAL_POOL, Pool
from tasks.rules import keys
from tasks.skills.sdk import SkillContext, registry
from tests.support.desk import daily_report
from tests.support.runs import run_policy

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TTL = timedelta(seconds=60)
POLICY = {
    "max_attempts": 3,
    "backoff_base_seconds": 10.0,
    "jitter_min": 1.0,
    "jitter_max": 1.0,
    "lease_ttl_seconds": 60,
}


SLOTS_SKILL = "tests.report_own_slots"


def _report_own_slots(ctx: SkillContext) -> dict:
    """The pool slots this run holds while its skill runs."""
    rows = PoolSlot.objects.filter(run_id=ctx.run_id).values_list("pool__name", "fence", "worker", "key")
    return {"slots": sorted(list(row) for row in rows)}


if SLOTS_SKILL not in registry:
    registry.register(SLOTS_SKILL, _report_own_slots)


@pytest.fixture(autouse=True)
def global_pool():
    # Installed by the data migration; transactional tests flush it.
    return Pool.objects.get_or_create(name=GLOBAL_POOL, defaults={"reason": "every run"})[0]


def pool(name: str, **limits) -> Pool:
    return Pool.objects.create(name=name, reason="test", **limits)


def rule_with(*pools: Pool, name: str = "flow", skill: str = "harness.noop"):
    rule = daily_report(name=name, skill=skill)
    rule.pools.set(pools)
    return rule


def claim(rule, n: int, *, by: str = "tests", object_key: str = "", params=None, now=T0) -> TaskRun:
    payload = {"params": params or {}}
    return run_claim(
        Work(
            biz_key=keys.scoped(rule.pk, keys.MANUAL_KEY, f"{by}:{object_key}:{n}"),
            skill=rule.skill,
            source=TaskRun.Source.API,
            triggered_by=by,
            payload=payload,
            policy=run_policy(POLICY),
            rule=rule,
            object_key=object_key,
        ),
        now=now,
    ).run


def execute(run: TaskRun, at: datetime = T0, worker: str = "w1"):
    return run_execute(run_id=run.id, worker=worker, clock=lambda: at, rand=lambda: 0.5)


def fresh(run: TaskRun) -> TaskRun:
    return TaskRun.objects.get(id=run.id)


def hold(run: TaskRun, at: datetime = T0):
    """A run that is executing elsewhere: admitted and under its lease (a worker mid-skill)."""
    admission = pool_admit(run, worker="elsewhere", now=at, ttl=TTL)
    assert admission.admitted
    assert store().lease_claim(run, worker="elsewhere", now=at, plain=False) is not None
    return admission


def handed(p: Pool) -> list[int]:
    """Runs a release handed a slot of `p` to, that have not started yet."""
    return list(
        PoolSlot.objects.filter(pool=p, worker="").order_by("acquired_at", "id").values_list("run_id", flat=True)
    )


def test_a_pool_of_two_admits_two_and_the_third_waits_unstarted_without_a_lease():
    two = pool("two", max_concurrency=2)
    rule = rule_with(two)
    first, second, third = (claim(rule, i) for i in range(3))
    hold(first)
    hold(second)

    outcome = execute(third)

    third = fresh(third)
    assert outcome.status == "pool_wait" and "pool two: 2 of 2 in use" in outcome.detail
    assert third.state == TaskRun.State.PENDING and third.attempts == 0
    assert (third.lease_owner, third.lease_expires_at) == ("", None)
    assert not Attempt.objects.filter(run=third).exists()
    assert not PoolSlot.objects.filter(run=third).exists()
    waiter = PoolWaiter.objects.get(run=third)
    assert (waiter.pool, waiter.reason, waiter.in_use, waiter.limit) == (two, "concurrency", 2, 2)


def test_a_release_hands_the_slot_to_the_waiting_run_which_then_runs_while_newcomers_wait():
    two = pool("two", max_concurrency=2)
    rule = rule_with(two)
    first, second, third, late = (claim(rule, i) for i in range(4))
    a = hold(first)
    hold(second)
    assert execute(third).status == "pool_wait"

    pool_release(run_id=first.id, fence=a.fence, now=T0 + timedelta(seconds=1))

    assert handed(two) == [third.id]
    assert fresh(third).dispatched_at == T0 + timedelta(seconds=1)
    # The freed slot is third's: a run arriving now finds the pool full and cannot jump the line.
    assert execute(late, T0 + timedelta(seconds=1)).status == "pool_wait"
    assert execute(third, T0 + timedelta(seconds=2)).status == "succeeded"
    assert not PoolSlot.objects.filter(run=third).exists() and not PoolWaiter.objects.filter(run=third).exists()


def test_every_run_draws_from_the_global_pool():
    Pool.objects.filter(name=GLOBAL_POOL).update(max_concurrency=1)
    rule = daily_report(name="plain")
    first, second = claim(rule, 1), claim(rule, 2)
    hold(first)
    assert execute(second).status == "pool_wait"
    assert PoolWaiter.objects.get(run=second).pool.name == GLOBAL_POOL


def test_a_keyed_pool_serializes_each_key_and_lets_other_keys_run():
    per_sender = pool("per-sender", max_concurrency=1, key_template="{triggered_by}")
    rule = rule_with(per_sender)
    a1, a2, b1 = claim(rule, 1, by="a"), claim(rule, 2, by="a"), claim(rule, 3, by="b")
    hold(a1)
    assert execute(a2).status == "pool_wait"
    assert execute(b1).status == "succeeded"
    assert PoolWaiter.objects.get(run=a2).key == "a"


def test_round_robin_across_keys_none_waits_behind_another_keys_backlog():
    one = pool("one", max_concurrency=1)
    tenant = pool("tenant", key_template="{triggered_by}")  # no limit of its own: it names the key
    rule = rule_with(one, tenant)
    holder = claim(rule, 0, by="x")
    admission = hold(holder)
    backlog = [claim(rule, i, by=key) for key in "abc" for i in range(3)]
    for i, run in enumerate(backlog):  # they arrive a, a, a, b, b, b, c, c, c
        assert execute(run, T0 + timedelta(seconds=i)).status == "pool_wait"

    order, at = [], T0 + timedelta(seconds=20)
    pool_release(run_id=holder.id, fence=admission.fence, now=at)
    while handed(one):
        (run_id,) = handed(one)
        order.append(TaskRun.objects.get(id=run_id).triggered_by)
        at += timedelta(seconds=1)
        assert execute(TaskRun.objects.get(id=run_id), at).status == "succeeded"  # its release hands on

    assert order == ["a", "b", "c", "a", "b", "c", "a", "b", "c"]


def test_a_run_waiting_for_its_retry_holds_no_slot_and_another_run_takes_it():
    one = pool("one", max_concurrency=1)
    rule = rule_with(one, skill="harness.fail")
    failing = claim(rule, 1, params={"error_kind": "timeout"})
    other = claim(rule_with(one, name="other"), 2)

    assert execute(failing).status == "retry"

    assert fresh(failing).state == TaskRun.State.WAITING_RETRY
    assert not PoolSlot.objects.filter(pool=one).exists()
    assert execute(other).status == "succeeded"


def test_a_killed_worker_leaks_no_capacity_the_sweeper_reclaims_its_slot_and_wakes_the_waiter():
    one = pool("one", max_concurrency=1)
    rule = rule_with(one)
    killed, waiting = claim(rule, 1), claim(rule, 2)
    hold(killed)  # and its worker dies: nothing releases the slot
    assert execute(waiting).status == "pool_wait"

    sweep(now=T0 + TTL + timedelta(seconds=1))

    assert fresh(killed).state == TaskRun.State.WAITING_RETRY  # lease expired, retried by policy
    assert handed(one) == [waiting.id]
    assert execute(waiting, T0 + TTL + timedelta(seconds=2)).status == "succeeded"


def test_a_handed_slot_whose_run_never_comes_expires_and_goes_to_the_next():
    one = pool("one", max_concurrency=1)
    rule = rule_with(one)
    holder, lost, next_run = claim(rule, 1), claim(rule, 2), claim(rule, 3)
    admission = hold(holder)
    assert execute(lost).status == "pool_wait"
    assert execute(next_run, T0 + timedelta(seconds=1)).status == "pool_wait"
    pool_release(run_id=holder.id, fence=admission.fence, now=T0 + timedelta(seconds=2))
    assert handed(one) == [lost.id]
    TaskRun.objects.filter(id=lost.id).update(state=TaskRun.State.CANCELLED)  # it will never arrive

    sweep(now=T0 + timedelta(seconds=2) + HANDOFF_TTL)

    assert handed(one) == [next_run.id]


def test_a_stale_release_cannot_free_a_newer_attempts_slot():
    one = pool("one", max_concurrency=1)
    run = claim(rule_with(one), 1)
    old = hold(run)
    sweep(now=T0 + TTL + timedelta(seconds=1))  # lease expired: fence moved on, run waits for its retry
    later = T0 + TTL + timedelta(seconds=30)
    new = hold(fresh(run), later)

    assert pool_release(run_id=run.id, fence=old.fence, now=later) == 0
    assert PoolSlot.objects.filter(run=run, fence=new.fence).exists()


def test_the_lease_renewer_keeps_the_slots_alive_with_the_lease():
    one = pool("one", max_concurrency=1)
    run = claim(rule_with(one), 1)
    hold(run)
    run = fresh(run)
    later = T0 + timedelta(seconds=40)
    renewer = LeaseRenewer(run_id=run.id, fence=run.fence, ttl=TTL, clock=lambda: later)

    assert renewer._renew()

    assert set(PoolSlot.objects.filter(run=run).values_list("expires_at", flat=True)) == {later + TTL}


def test_raising_a_limit_takes_effect_at_the_next_admission_without_a_restart():
    one = pool("one", max_concurrency=1)
    rule = rule_with(one)
    first, second = claim(rule, 1), claim(rule, 2)
    hold(first)
    assert execute(second).status == "pool_wait"

    one.max_concurrency = 2
    one.save()
    sweep(now=T0 + timedelta(seconds=1))  # the sweeper hands the new capacity to the waiter

    assert handed(one) == [second.id]
    assert execute(second, T0 + timedelta(seconds=1)).status == "succeeded"


def test_lowering_a_limit_counts_the_runs_already_in():
    roomy = pool("roomy")  # unlimited: slots are still counted
    rule = rule_with(roomy)
    first, second = claim(rule, 1), claim(rule, 2)
    hold(first)
    Pool.objects.filter(id=roomy.id).update(max_concurrency=1)
    assert execute(second).status == "pool_wait"


def test_a_rate_pool_paces_starts_and_waiters_wake_one_per_token():
    rate = pool("rate", rate_count=2, rate_period_seconds=10)
    rule = rule_with(rate)
    runs = [claim(rule, i) for i in range(4)]

    statuses = [execute(run).status for run in runs]

    assert statuses == ["succeeded", "succeeded", "pool_wait", "pool_wait"]
    third, fourth = fresh(runs[2]), fresh(runs[3])
    # A token every 5 s; the second waiter is spaced behind the first instead of racing it.
    assert (third.run_after, fourth.run_after) == (T0 + timedelta(seconds=5), T0 + timedelta(seconds=10))
    assert third.attempts == 0 and PoolWaiter.objects.get(run=third).reason == "rate"
    assert execute(third, T0 + timedelta(seconds=4)).status == "not_claimable"  # not due yet
    assert execute(third, T0 + timedelta(seconds=5)).status == "succeeded"


def test_a_paused_pool_holds_its_runs_until_the_pause_ends():
    provider = pool("provider", paused_until=T0 + timedelta(seconds=30))
    run = claim(rule_with(provider), 1)

    assert execute(run).status == "pool_wait"

    run = fresh(run)
    assert run.run_after == T0 + timedelta(seconds=30) and run.attempts == 0
    assert PoolWaiter.objects.get(run=run).reason == "paused"
    assert execute(run, T0 + timedelta(seconds=30)).status == "succeeded"


def test_a_disabled_pool_is_not_enforced():
    one = pool("one", max_concurrency=1, enabled=False)
    rule = rule_with(one)
    first, second = claim(rule, 1), claim(rule, 2)
    hold(first)
    assert execute(second).status == "succeeded"


def test_a_force_released_lease_gives_its_slots_back():
    one = pool("one", max_concurrency=1)
    rule = rule_with(one)
    stuck, waiting = claim(rule, 1), claim(rule, 2)
    hold(stuck)
    assert execute(waiting).status == "pool_wait"

    assert run_lease_force_release(run_id=stuck.id, actor="oncall", now=T0 + timedelta(seconds=5), reason="stuck")
    sweep(now=T0 + timedelta(seconds=6))

    assert not PoolSlot.objects.filter(run=stuck).exists()
    assert handed(one) == [waiting.id]


def test_a_duplicate_message_cannot_take_or_free_the_slots_of_the_attempt_running_elsewhere():
    # Messages are hints: a second worker may read the run while it is still pending, just before the
    # first admits it and takes its lease. Its admission must not adopt the first worker's slots as if
    # handed over, and its release must not free them (the limit would be exceeded).
    one = pool("one", max_concurrency=1)
    rule = rule_with(one)
    run, other = claim(rule, 1), claim(rule, 2)
    stale = fresh(run)  # what the duplicate's worker read
    admission = hold(run)

    duplicate = pool_admit(stale, worker="w2", now=T0, ttl=TTL)
    pool_release(run_id=run.id, fence=duplicate.fence, now=T0, worker="w2")

    assert not duplicate.admitted
    # Its slots (global and one) are untouched.
    assert set(PoolSlot.objects.filter(run=run).values_list("pool__name", "fence", "worker")) == {
        (GLOBAL_POOL, admission.fence, "elsewhere"),
        ("one", admission.fence, "elsewhere"),
    }
    assert execute(other).status == "pool_wait"  # the pool of one is still full
    assert run_execute(run_id=run.id, worker="w2", clock=lambda: T0, rand=lambda: 0.5).status == "not_claimable"
    assert PoolSlot.objects.filter(run=run, worker="elsewhere").exists()


# --- Plain admission: pools that limit nothing are taken in the lease claim's own statement (PostgreSQL) ---

needs_postgresql = pytest.mark.skipif(connection.vendor != "postgresql", reason="the plain claim is PostgreSQL's")


def test_a_run_of_pools_without_limits_holds_a_slot_in_each_while_its_skill_runs_and_none_after():
    free = pool("free")  # no limit: admission decides nothing, and the slot still counts if one is set later
    run = claim(rule_with(free, skill=SLOTS_SKILL), 1)

    assert execute(run).status == "succeeded"

    assert fresh(run).result == {"slots": [["free", 1, "w1", ""], [GLOBAL_POOL, 1, "w1", ""]]}
    assert not PoolSlot.objects.filter(run=run).exists()
    assert Attempt.objects.get(run=run).outcome == Attempt.Outcome.SUCCEEDED


@needs_postgresql
@pytest.mark.parametrize(
    "change",
    ["limit", "rate", "pause", "key", "handed slot", "no global pool"],
)
def test_a_plain_claim_writes_nothing_when_admission_has_something_to_decide(change):
    # The executor read the run when every pool limited nothing; what the claim's statement finds
    # under the pool row locks decides, and pool_admit takes over (NotPlain) with nothing written.
    free = pool("free")
    rule = rule_with(free)
    run = claim(rule, 1)
    if change == "limit":
        Pool.objects.filter(id=free.id).update(max_concurrency=5)
    elif change == "rate":
        Pool.objects.filter(id=free.id).update(rate_count=1, rate_period_seconds=60)
    elif change == "pause":
        Pool.objects.filter(id=free.id).update(paused_until=T0 + timedelta(seconds=1))
    elif change == "key":
        Pool.objects.filter(id=free.id).update(key_template="{object_key}")
    elif change == "handed slot":
        PoolSlot.objects.create(
            pool=free, run=run, fence=1, acquired_at=T0, expires_at=T0 + HANDOFF_TTL, key="", worker=""
        )
    else:
        Pool.objects.filter(name=GLOBAL_POOL).delete()

    with pytest.raises(NotPlain):
        store().lease_claim(fresh(run), worker="w1", now=T0, plain=True)

    after = fresh(run)
    assert (after.state, after.fence, after.attempts, after.lease_owner) == ("pending", 0, 0, "")
    assert not Attempt.objects.filter(run=run).exists()
    assert PoolSlot.objects.filter(run=run, worker="w1").count() == 0


@needs_postgresql
def test_a_plain_claim_of_a_run_taken_meanwhile_writes_nothing():
    run = claim(daily_report(name="plain"), 1)
    stale = fresh(run)  # what a duplicate message's worker read
    assert store().lease_claim(fresh(run), worker="w1", now=T0, plain=True) is not None

    with pytest.raises(NotPlain):  # its slots are there: pool_admit finds them the first worker's
        store().lease_claim(stale, worker="w2", now=T0, plain=True)
    assert pool_admit(stale, worker="w2", now=T0, ttl=TTL).elsewhere

    assert set(PoolSlot.objects.filter(run=run).values_list("worker", "fence")) == {("w1", 1)}
    assert Attempt.objects.filter(run=run).count() == 1


def test_a_limit_set_on_a_pool_without_one_is_enforced_at_the_next_execution():
    free = pool("free")
    rule = rule_with(free)
    first, second = claim(rule, 1), claim(rule, 2)
    hold(first)
    Pool.objects.filter(id=free.id).update(max_concurrency=1)

    outcome = execute(second)

    assert outcome.status == "pool_wait" and "pool free: 1 of 1 in use" in outcome.detail
    assert not Attempt.objects.filter(run=second).exists()
