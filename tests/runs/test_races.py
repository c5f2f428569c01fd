"""Races with hundreds of threads at once against the real database: pool limits, rate tokens and
budgets never admit more than their limit, every slot, token and budget unit is accounted for, and
nobody deadlocks.

Each contender is a thread released by one barrier, as the threads pool of an agent worker runs
them. On PostgreSQL the threads borrow connections from a bounded pool, as that worker does
(HARNESS_DB_POOL_MAX); on SQLite each has its own connection to the file.
"""

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from runs.engine.admission import pool_call_take
from runs.engine.calls import model_call
from runs.engine.claims import Work, run_claim
from runs.engine.executor import run_execute
from runs.engine.leases import LeaseRenewer
from runs.engine.store import store
from runs.models import ExternalCall, PoolKey, PoolSlot, PoolWaiter, TaskRun
from tasks.models import GLOBAL_POOL, Agent, Pool
from tasks.rules import keys
from tasks.skills.sdk import BudgetWait, SkillContext, registry
from tests.support.desk import daily_report
from tests.support.runs import run_policy

pytestmark = pytest.mark.django_db(transaction=True)

N = 200
POOL_MAX = 10  # connections the contenders share on PostgreSQL, as a threads worker's pool
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
JOIN_SECONDS = 120  # a contender still running after this is deadlocked
LOG = logging.getLogger("tests.races")


@pytest.fixture(autouse=True)
def pooled_connections():
    """PostgreSQL: every thread's connection comes from one pool of POOL_MAX (Django's psycopg pool)."""
    if connection.vendor != "postgresql":
        yield
        return
    settings_dict = connection.settings_dict  # shared by every thread's connection wrapper
    saved = settings_dict["CONN_MAX_AGE"], dict(settings_dict["OPTIONS"])
    connection.close()
    settings_dict["CONN_MAX_AGE"] = 0
    settings_dict["OPTIONS"]["pool"] = {"min_size": 1, "max_size": POOL_MAX, "timeout": JOIN_SECONDS}
    try:
        yield
    finally:
        connection.close()
        connection.close_pool()
        settings_dict["CONN_MAX_AGE"], settings_dict["OPTIONS"] = saved


@pytest.fixture(autouse=True)
def global_pool():
    # Installed by the data migration; transactional tests flush it.
    return Pool.objects.get_or_create(name=GLOBAL_POOL, defaults={"reason": "every run"})[0]


def race(n: int, fn: Callable[[int], object]) -> list[object]:
    """fn(0) .. fn(n-1), each in its own thread, all released at once; their results (or errors)."""
    barrier = threading.Barrier(n)
    results: list[object] = [None] * n

    def contender(i: int) -> None:
        try:
            barrier.wait(timeout=JOIN_SECONDS)
            results[i] = fn(i)
        except BaseException as exc:  # reported by the test, not lost in the thread
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=contender, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=JOIN_SECONDS)
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, f"{len(stuck)} contenders still running after {JOIN_SECONDS}s: a deadlock"
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, f"{len(errors)} contenders failed, first: {errors[0]!r}"
    return results


def claim_runs(rule, n: int, *, agent: str = "") -> list[TaskRun]:
    return [
        run_claim(
            Work(
                biz_key=keys.scoped(rule.pk, keys.MANUAL_KEY, f"race:{i}"),
                skill=rule.skill,
                source=TaskRun.Source.API,
                triggered_by="tests",
                payload={"params": {}},
                policy=run_policy({"max_attempts": 3, "lease_ttl_seconds": 60}, agent=agent),
                rule=rule,
            ),
            now=T0,
        ).run
        for i in range(n)
    ]


class Holding:
    """A skill that holds its run until released, counting the runs inside it at once."""

    name = "tests.race_hold"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside = self.peak = 0
        self.release = threading.Event()

    def __call__(self, ctx: SkillContext) -> dict:
        with self.lock:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
        try:
            assert self.release.wait(JOIN_SECONDS), "never released"
            return {"held": True}
        finally:
            with self.lock:
                self.inside -= 1


HOLDING = Holding()
if Holding.name not in registry:
    registry.register(Holding.name, HOLDING)


def test_two_hundred_workers_at_once_start_exactly_a_pools_limit_and_the_rest_wait_unstarted():
    wide = Pool.objects.create(name="wide", reason="test", max_concurrency=30)
    narrow = Pool.objects.create(name="narrow", reason="test", max_concurrency=10)
    rule = daily_report(name="race", skill=Holding.name)
    rule.pools.set([wide, narrow])  # two row locks per admission: taken in id order, never crossed
    runs = claim_runs(rule, N)
    HOLDING.inside = HOLDING.peak = 0
    HOLDING.release.clear()
    outcomes: list[str] = []

    def execute(i: int) -> str:
        status = run_execute(run_id=runs[i].id, worker=f"w{i}", clock=lambda: T0).status
        outcomes.append(status)
        return status

    def release_when_all_arrived() -> None:
        # Every contender either waits (refused, returned) or holds its run inside the skill.
        while len(outcomes) + HOLDING.inside < N:
            if HOLDING.release.wait(0.05):
                return
        HOLDING.release.set()

    watcher = threading.Thread(target=release_when_all_arrived, daemon=True)
    watcher.start()
    statuses = Counter(race(N, execute))
    HOLDING.release.set()
    watcher.join(timeout=10)

    assert HOLDING.peak == 10, f"{HOLDING.peak} runs inside a pool of 10"
    assert statuses == {"succeeded": 10, "pool_wait": N - 10}
    ids = [r.id for r in runs]
    states = Counter(TaskRun.objects.filter(id__in=ids).values_list("state", flat=True))
    assert states == {TaskRun.State.SUCCEEDED: 10, TaskRun.State.PENDING: N - 10}
    # The 190 refused wait unstarted, each with its reason: no attempt, no lease.
    waiting = TaskRun.objects.filter(id__in=ids, state=TaskRun.State.PENDING)
    assert not waiting.filter(attempts__gt=0).exists() and not waiting.exclude(lease_owner="").exists()
    reasons = Counter(PoolWaiter.objects.values_list("pool__name", "reason", "in_use", "limit"))
    assert reasons == {("narrow", PoolWaiter.Reason.CONCURRENCY, 10, 10): N - 10}
    # Every slot accounted for: the finished runs hold none; their 10 narrow slots were handed to
    # exactly 10 waiting runs (no more than the limit), and the wide pool kept no stray slot.
    assert not PoolSlot.objects.filter(run__state=TaskRun.State.SUCCEEDED).exists()
    handed = PoolSlot.objects.filter(pool=narrow, worker="")
    assert handed.count() == 10 and set(handed.values_list("run__state", flat=True)) == {TaskRun.State.PENDING}
    assert not PoolSlot.objects.filter(pool=wide).exists()


def test_two_hundred_workers_at_once_take_exactly_the_rate_pools_tokens_and_the_rest_queue_one_per_token():
    rate = Pool.objects.create(name="rate", reason="test", rate_count=25, rate_period_seconds=3600)
    rule = daily_report(name="race", skill="harness.noop")
    rule.pools.set([rate])
    runs = claim_runs(rule, N)

    statuses = Counter(race(N, lambda i: run_execute(run_id=runs[i].id, worker=f"w{i}", clock=lambda: T0).status))

    assert statuses == {"succeeded": 25, "pool_wait": N - 25}
    tokens = PoolKey.objects.get(pool=rate, key="").tokens
    assert 0 <= tokens < 1, f"{tokens} tokens left of 25 after 25 starts"
    # The waiters queue one per token (144 s apart at 25 an hour), none on the same token.
    spacing = timedelta(seconds=3600 / 25)
    untils = sorted(PoolWaiter.objects.filter(pool=rate, reason=PoolWaiter.Reason.RATE).values_list("until", flat=True))
    assert untils == [T0 + spacing * (k + 1) for k in range(N - 25)]
    due = sorted(TaskRun.objects.filter(state=TaskRun.State.PENDING).values_list("run_after", flat=True))
    assert due == untils


def test_two_hundred_model_calls_at_once_take_exactly_the_agent_pools_call_tokens():
    provider = Pool.objects.create(name="provider", reason="test", rate_count=25, rate_period_seconds=3600)

    results = race(N, lambda i: pool_call_take(pool=provider, run=None, now=T0))

    assert sum(1 for r in results if r is None) == 25
    assert 0 <= PoolKey.objects.get(pool=provider, key="").tokens < 1


def test_two_hundred_model_calls_at_once_spend_exactly_the_agents_hourly_call_budget():
    agent = Agent.objects.create(name="echo", provider="echo", model="echo-1", max_calls_per_hour=20)
    rule = daily_report(name="race", skill="harness.noop")
    (run,) = claim_runs(rule, 1, agent=agent.name)

    def call(i: int) -> str:
        ctx = SkillContext(run_id=run.id, biz_key=run.biz_key, fence=1, attempt=1, params={}, now=T0, logger=LOG)
        try:
            model_call(ctx, agent, f"call {i}")
            return "called"
        except BudgetWait:
            return "waits"

    outcomes = Counter(race(N, call))

    assert outcomes == {"called": 20, "waits": N - 20}
    assert ExternalCall.objects.filter(agent=agent).count() == 20


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a connection pool is PostgreSQL's")
def test_the_lease_renewer_renews_while_every_pooled_connection_is_borrowed():
    """A threads worker's runs borrow every pooled connection at once (hundreds start together); the
    one renewal thread keeping all their leases must not queue behind them for a connection, or the
    leases it exists to keep run out (the agent worker's end-to-end test lost 60-70 of 500 so)."""
    rule = daily_report(name="race", skill="harness.noop")
    (run,) = claim_runs(rule, 1)
    assert store().lease_claim(run, worker="w", now=timezone.now(), plain=False) is not None
    first_expiry = run.lease_expires_at

    def expiry() -> datetime:  # read on this thread's borrowed connection, kept between queries
        return TaskRun.objects.values_list("lease_expires_at", flat=True).get(id=run.id)

    assert expiry() == first_expiry
    borrowed, give_back = threading.Barrier(POOL_MAX), threading.Event()

    def borrow() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            borrowed.wait(timeout=JOIN_SECONDS)
            give_back.wait(timeout=JOIN_SECONDS)
        finally:
            connection.close()

    holders = [threading.Thread(target=borrow, daemon=True) for _ in range(POOL_MAX - 1)]
    for t in holders:
        t.start()
    borrowed.wait(timeout=JOIN_SECONDS)  # this thread holds the tenth
    assert connection.pool.get_stats()["pool_available"] == 0
    renewer = LeaseRenewer(run_id=run.id, fence=run.fence, ttl=timedelta(seconds=0.9), clock=timezone.now)
    renewer.start()
    try:
        deadline = time.monotonic() + 10
        while expiry() == first_expiry and time.monotonic() < deadline:
            time.sleep(0.1)
        renewed = expiry() != first_expiry
    finally:
        renewer.stop()
        give_back.set()
        for t in holders:
            t.join(timeout=JOIN_SECONDS)
    assert renewed, "the lease was not renewed while the pool's connections were all borrowed"
    assert not renewer.lost.is_set()
