"""The run store's run_take: the worker's first statement reads the run and, when nothing stands
in its way, claims it too. Claimed: exactly what the read-then-claim path writes (state, fence,
attempts, lease, the attempt row, a slot in each pool), and the lease as long as the run's lease_ttl_seconds says.
Not claimed: the row as it is, nothing written, for the executor's full path.
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.engine.claims import Work, run_claim
from runs.engine.executor import run_execute
from runs.engine.store import store
from runs.models import Attempt, PoolSlot, RunStep, TaskRun
from tasks.models import GLOBAL_POOL, Agent, Pool
from tasks.rules import keys
from tasks.rules.policy import DEFAULT_LEASE_TTL_SECONDS
from tests.support.desk import daily_report
from tests.support.runs import run_policy

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="one statement on PostgreSQL; SQLite reads"),
]

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def global_pool():
    return Pool.objects.get_or_create(name=GLOBAL_POOL, defaults={"reason": "every run"})[0]


def claim(key: str, *, policy=None, rule=None, object_key: str = "", start_by=None, run_after=None) -> TaskRun:
    return run_claim(
        Work(
            biz_key=keys.scoped(rule.pk, keys.MANUAL_KEY, key) if rule else key,
            skill="harness.noop",
            source=TaskRun.Source.API,
            triggered_by="tests",
            payload={"params": {}},
            policy=policy or run_policy(),
            rule=rule,
            object_key=object_key,
            start_by=start_by,
            run_after=run_after,
        ),
        now=T0,
        dispatch=False,
    ).run


def untouched(run: TaskRun) -> bool:
    after = TaskRun.objects.get(id=run.id)
    return (
        (after.state, after.fence, after.attempts, after.lease_owner) == ("pending", 0, 0, "")
        and not Attempt.objects.filter(run=run).exists()
        and not PoolSlot.objects.filter(run=run).exists()
    )


def test_a_plain_run_is_read_and_claimed_in_one_statement():
    run = claim("take:plain")
    with CaptureQueriesContext(connection) as queries:
        taken = store().run_take(run.id, worker="w1", now=T0)
    assert len(queries) == 1

    stored = TaskRun.objects.get(id=run.id)
    assert taken.attempt is not None and taken.plain is True
    for name in ("state", "fence", "attempts", "lease_owner", "lease_expires_at", "start_at", "executed_by"):
        assert getattr(taken.run, name) == getattr(stored, name), name
    assert (stored.state, stored.fence, stored.attempts, stored.lease_owner) == ("running", 1, 1, "w1")
    assert stored.start_at == T0 and stored.executed_by == "w1"
    attempt = Attempt.objects.get(run=run)
    assert (attempt.id, attempt.number, attempt.fence, attempt.worker, attempt.started_at) == (
        taken.attempt.id,
        1,
        1,
        "w1",
        T0,
    )
    assert attempt.outcome == Attempt.Outcome.RUNNING
    assert list(PoolSlot.objects.filter(run=run).values_list("pool__name", "fence", "worker")) == [
        (GLOBAL_POOL, 1, "w1")
    ]


def test_it_writes_what_the_read_then_claim_path_writes():
    by_take, by_claim = claim("take:a"), claim("take:b")
    store().run_take(by_take.id, worker="w1", now=T0)
    assert store().lease_claim(TaskRun.objects.get(id=by_claim.id), worker="w1", now=T0, plain=True) is not None

    fields = ["state", "fence", "attempts", "lease_owner", "lease_expires_at", "start_at", "executed_by"]
    a, b = (TaskRun.objects.filter(id=r.id).values(*fields).get() for r in (by_take, by_claim))
    assert a == b
    attempt_fields = ["number", "fence", "worker", "started_at", "finished_at", "outcome", "error_kind", "error"]
    a, b = (Attempt.objects.filter(run=r).values(*attempt_fields).get() for r in (by_take, by_claim))
    assert a == b
    slot = ["pool_id", "fence", "expires_at"]
    a, b = (list(PoolSlot.objects.filter(run=r).values_list(*slot)) for r in (by_take, by_claim))
    assert a == b


@pytest.mark.parametrize(
    "policy",
    [None, {}, *({"lease_ttl_seconds": v} for v in (None, 30, 2.5))],
)
def test_the_lease_is_as_long_as_the_run_lease_ttl_says(policy):
    run = claim(f"take:ttl:{policy}", policy=None if policy is None else run_policy(policy))
    taken = store().run_take(run.id, worker="w1", now=T0)
    assert taken.attempt is not None
    assert taken.run.lease_expires_at - T0 == timedelta(seconds=taken.run.lease_ttl_seconds)
    if not (policy or {}).get("lease_ttl_seconds"):
        assert taken.run.lease_ttl_seconds == DEFAULT_LEASE_TTL_SECONDS


LIMITED_POOLS = {
    "limited pool": {"max_concurrency": 5},
    "agent's rate pool": {"rate_count": 10, "rate_period_seconds": 60},
    "agent's paused pool": {"paused_until": T0 + timedelta(seconds=30)},
}


@pytest.mark.parametrize(
    "obstacle", ["object key", "start window", "not due", "limited pool", "agent's rate pool", "agent's paused pool"]
)
def test_a_run_with_something_in_its_way_is_read_and_not_claimed(obstacle):
    rule = daily_report(name="take-rule")
    kwargs = {"rule": rule}
    if obstacle == "object key":
        kwargs["object_key"] = "invoice-1"
    elif obstacle == "start window":
        kwargs["start_by"] = T0 + timedelta(minutes=5)
    elif obstacle == "not due":
        kwargs["run_after"] = T0 + timedelta(seconds=1)
    elif obstacle == "limited pool":
        rule.pools.set([Pool.objects.create(name="limited", reason="test", **LIMITED_POOLS[obstacle])])
    else:  # an agent's provider pool counts its model calls: pool_admit decides
        pool = Pool.objects.create(name="provider", reason="test", **LIMITED_POOLS[obstacle])
        Agent.objects.create(name="a", provider="echo", model="echo", pool=pool)
        kwargs["policy"] = run_policy(agent="a")
    run = claim(f"take:{obstacle}", **kwargs)

    taken = store().run_take(run.id, worker="w1", now=T0)

    assert taken.attempt is None
    assert taken.run == run and taken.run.fence == 0 and taken.run.state == TaskRun.State.PENDING
    assert taken.plain is (obstacle not in LIMITED_POOLS)
    assert untouched(run)


@pytest.mark.parametrize("provider_pool", [False, True])
def test_a_run_with_an_agent_whose_pool_limits_nothing_is_claimed_with_a_slot_in_that_pool(provider_pool):
    pool = Pool.objects.create(name="provider", reason="test") if provider_pool else None
    Agent.objects.create(name="a", provider="echo", model="echo", pool=pool)
    run = claim("take:agent", policy=run_policy(agent="a"))

    taken = store().run_take(run.id, worker="w1", now=T0)

    assert taken.attempt is not None and taken.plain is True and taken.run.agent == "a"
    slots = set(PoolSlot.objects.filter(run=run).values_list("pool__name", "fence", "worker"))
    assert slots == {(GLOBAL_POOL, 1, "w1"), *([("provider", 1, "w1")] if provider_pool else [])}


def test_a_run_executing_elsewhere_or_finished_is_read_and_left_alone():
    run = claim("take:elsewhere")
    assert store().run_take(run.id, worker="w1", now=T0).attempt is not None
    again = store().run_take(run.id, worker="w2", now=T0)  # a duplicate message
    assert again.attempt is None and again.run.lease_owner == "w1" and again.run.fence == 1
    assert Attempt.objects.filter(run=run).count() == 1
    assert set(PoolSlot.objects.filter(run=run).values_list("worker", flat=True)) == {"w1"}


def test_no_such_run():
    assert store().run_take(10**12, worker="w1", now=T0).run is None


@pytest.mark.parametrize("obstacle", ["object key", "limited pool"])
def test_the_executor_still_runs_a_run_that_takes_the_full_path(obstacle):
    rule = daily_report(name="take-full")
    if obstacle == "limited pool":
        rule.pools.set([Pool.objects.create(name="limited", reason="test", max_concurrency=5)])
    run = claim(f"take:full:{obstacle}", rule=rule, object_key="invoice-2" if obstacle == "object key" else "")
    assert run_execute(run_id=run.id, worker="w1", clock=lambda: T0).status == "succeeded"
    stored = TaskRun.objects.get(id=run.id)
    assert (stored.state, stored.fence, stored.attempts) == ("succeeded", 1, 1)
    assert not PoolSlot.objects.filter(run=run).exists()


@pytest.mark.parametrize("claimable", [True, False])
def test_it_says_whether_the_run_has_a_checkpoint_so_a_first_attempt_reads_none(claimable):
    fresh, resumed = claim(f"take:fresh:{claimable}"), claim(f"take:resumed:{claimable}")
    RunStep.objects.create(run=resumed, name="fetch", attempt=1, output={}, digest="d", completed_at=T0)
    if not claimable:  # read, not claimed: the executor's full path still knows
        TaskRun.objects.filter(id__in=[fresh.id, resumed.id]).update(object_key="invoice-3")
    taken = {run: store().run_take(run.id, worker="w1", now=T0) for run in (fresh, resumed)}
    assert [(t.attempt is not None, t.checkpoints) for t in taken.values()] == [(claimable, False), (claimable, True)]
