"""Flow control with real processes: two Celery workers of two pool processes each (4
worker processes), a beat for the sweeper, the real database and broker. Pools are enforced across
all of them through the database; concurrency is measured from Attempt start and finish times.

PostgreSQL + Redis (the issue's setting); the pool of two also runs on SQLite.
"""

from datetime import datetime, timedelta
from itertools import combinations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from deadletters.models import DeadLetter
from runs.engine.claims import Work, run_claim
from runs.models import Attempt, ExternalCall, TaskRun
from tasks.models import GLOBAL_POOL, Agent, Pool
from tasks.rules import keys
from tests.e2e.helpers import RUN_TIMEOUT, START_TIMEOUT, recording_rule
from tests.support.fake_model import FakeModelServer, Reply, json_completion
from tests.support.processes import wait_for
from tests.support.runs import run_policy

pytestmark = pytest.mark.e2e
# The setting, and the suite's time: the SQLite pass runs only the first test (admission
# across processes under SQLite's IMMEDIATE transactions); tests/runs/test_admission.py covers the rest.
postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="production parts: run in the PostgreSQL pass"
)

POLICY = {"max_attempts": 3, "backoff_base_seconds": 1.0, "max_delay_seconds": 2, "lease_ttl_seconds": 30}


@pytest.fixture
def workers(harness):
    """4 worker processes in two workers, and a beat (the sweeper wakes waiters and due runs)."""
    Pool.objects.get_or_create(name=GLOBAL_POOL, defaults={"reason": "every run"})  # flushed by the fixture
    harness.worker("w1", concurrency=2)
    harness.worker("w2", concurrency=2)
    harness.beat()
    return harness


def pool(name: str, **limits) -> Pool:
    return Pool.objects.create(name=name, reason="e2e", **limits)


def rule_with(name: str, *pools: Pool, seconds: float = 0.3, **fields):
    rule = recording_rule(name, kind="interval", interval_seconds=3600, enabled=False, skill="harness.sleep", **fields)
    rule.params = {"seconds": seconds}
    rule.save()
    rule.pools.set(pools)
    return rule


def fire(rule, n: int, *, by: str = "e2e", payload: dict | None = None, agent: str = "") -> list[TaskRun]:
    now = timezone.now()
    return [
        run_claim(
            Work(
                biz_key=keys.scoped(rule.pk, keys.MANUAL_KEY, f"{by}:{i}"),
                skill=rule.skill,
                source=TaskRun.Source.API,
                triggered_by=by,
                payload=payload or {"params": rule.params},
                policy=run_policy(POLICY, agent=agent),
                rule=rule,
            ),
            now=now,
        ).run
        for i in range(n)
    ]


def wait_done(runs: list[TaskRun], *, timeout: float = RUN_TIMEOUT) -> None:
    ids = [r.id for r in runs]
    wait_for(
        lambda: TaskRun.objects.filter(id__in=ids).exclude(state__in=TaskRun.FINISHED).count() == 0,
        timeout=timeout,
        what=f"{len(ids)} runs to finish",
    )


def max_overlap(attempts: list[Attempt], *, until=None) -> int:
    """Most attempts executing at one instant (a sweep over start and finish times), before `until` if given."""
    spans = [(a.started_at, a.finished_at if until is None else min(a.finished_at, until)) for a in attempts]
    spans = [(start, end) for start, end in spans if until is None or start < until]
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = peak = 0
    for _at, step in events:  # at equal instants a finish (-1) sorts before a start (+1)
        running += step
        peak = max(peak, running)
    return peak


def attempts_of(runs: list[TaskRun]) -> list[Attempt]:
    return list(Attempt.objects.filter(run__in=runs).select_related("run").order_by("started_at", "id"))


def test_a_pool_of_two_never_runs_more_than_two_at_once_across_four_worker_processes(workers):
    two = pool("two", max_concurrency=2)
    # 50 queued on PostgreSQL (the figure); 20 on SQLite, whose single writer makes each slower.
    n = 50 if connection.vendor == "postgresql" else 20
    runs = fire(rule_with("capped", two, seconds=0.3), n)

    wait_done(runs)

    attempts = attempts_of(runs)
    assert {r.state for r in TaskRun.objects.filter(id__in=[r.id for r in runs])} == {"succeeded"}
    assert len(attempts) == n  # waiting for a slot is not an attempt
    peak = max_overlap(attempts)
    hosts = {a.worker.split(":")[0] for a in attempts}
    print(f"\n[e2e flow] {n} runs, pool of 2: max concurrency measured {peak}, by workers {sorted(hosts)}")
    assert peak == 2  # never more, and the limit was really reached
    assert len(hosts) == 2  # both workers took part: the limit is not per worker


@postgres_only
def test_a_per_key_pool_serializes_each_key_and_runs_different_keys_in_parallel(workers):
    per_object = pool("per-object", max_concurrency=1, key_template="{triggered_by}")
    rule = rule_with("objects", per_object, seconds=0.4)
    runs = [run for obj in ("inv-1", "inv-2", "inv-3") for run in fire(rule, 4, by=obj)]

    wait_done(runs)

    attempts = attempts_of(runs)
    for obj in ("inv-1", "inv-2", "inv-3"):
        mine = [a for a in attempts if a.run.triggered_by == obj]
        assert len(mine) == 4 and max_overlap(mine) == 1, obj
    across = [
        (a.run.triggered_by, b.run.triggered_by)
        for a, b in combinations(attempts, 2)
        if a.run.triggered_by != b.run.triggered_by and a.started_at < b.finished_at and b.started_at < a.finished_at
    ]
    print(f"\n[e2e flow] per-key pool: max concurrency {max_overlap(attempts)} over 3 keys, each key 1")
    assert across, "different keys never ran at the same time"


@postgres_only
def test_round_robin_no_key_waits_behind_another_keys_backlog(workers):
    two = pool("two", max_concurrency=2)
    tenant = pool("tenant", key_template="{triggered_by}")  # no limit: it names each run's key
    rule = rule_with("fair", two, tenant, seconds=0.2)
    # Two long runs fill the pool, so the backlog queues up before the first slot frees.
    blockers = fire(rule_with("blocker", two, tenant, seconds=4), 2, by="z")
    wait_for(
        lambda: TaskRun.objects.filter(id__in=[b.id for b in blockers], state="running").count() == 2,
        timeout=START_TIMEOUT,
        what="the two blockers to run",
    )
    backlog = fire(rule, 20, by="a") + fire(rule, 20, by="b") + fire(rule, 20, by="c")  # a's backlog first

    wait_done(backlog)

    order = "".join(a.run.triggered_by for a in attempts_of(backlog))
    print(f"\n[e2e flow] start order of 3 keys x 20 runs, limit 2:\n  {order}")
    first_30 = order[:30]
    # Without round robin the first 20 starts would all be a's.
    assert all(first_30.count(key) >= 6 for key in "abc"), first_30
    assert order.index("c") < 10, order


@postgres_only
def test_raising_a_limit_in_the_admin_takes_effect_within_a_minute_without_a_restart(workers):
    dial = pool("dial", max_concurrency=1)
    runs = fire(rule_with("dial", dial, seconds=1.5), 8)
    wait_for(
        lambda: TaskRun.objects.filter(id__in=[r.id for r in runs], state="running").exists(),
        timeout=START_TIMEOUT,
        what="the first run to start",
    )
    admin = User.objects.create_superuser("flow-admin", "a@example.com", "pw")
    client = Client()
    client.force_login(admin)

    # The new limit holds from the save's commit, inside the POST: "before the edit" ends when it begins.
    edit_begun_at = timezone.now()
    response = client.post(
        reverse("admin:tasks_pool_change", args=[dial.id]),
        {
            "name": "dial",
            "enabled": "on",
            "reason": "more capacity for the backlog",
            "max_concurrency": "3",
            "key_template": "",
            "rate_count": "",
            "rate_period_seconds": "",
            "rate_burst": "",
        },
    )
    changed_at = timezone.now()

    assert response.status_code == 302, response.content.decode()[:2000]
    wait_done(runs)
    attempts = attempts_of(runs)
    after = [a for a in attempts if a.started_at >= changed_at]
    first_three_at = next(
        (a.started_at for a in after if max_overlap([b for b in attempts if b.started_at <= a.started_at]) >= 3), None
    )
    print(
        f"\n[e2e flow] limit 1 -> 3: max before {max_overlap(attempts, until=edit_begun_at)}, "
        f"after {max_overlap(after)}, "
        f"3 at once {(first_three_at - changed_at).total_seconds() if first_three_at else None}s after the edit"
    )
    assert max_overlap(attempts, until=edit_begun_at) == 1 and max_overlap(attempts) == 3
    assert first_three_at is not None and first_three_at - changed_at < timedelta(minutes=1)


@postgres_only
def test_a_rate_pool_of_five_per_five_seconds_paces_twenty_runs(workers):
    rate = pool("rate", rate_count=5, rate_period_seconds=5)
    runs = fire(rule_with("paced", rate, seconds=0), 20)

    wait_done(runs, timeout=RUN_TIMEOUT + 60)

    attempts = attempts_of(runs)
    starts = [(a.started_at - attempts[0].started_at).total_seconds() for a in attempts]
    print("\n[e2e flow] rate 5/5s, 20 runs, start times (s): " + " ".join(f"{s:.1f}" for s in starts))
    assert len(attempts) == 20 and {a.outcome for a in attempts} == {"succeeded"}
    # A burst of 5, then one token a second: start i (i >= 5) can come no earlier than i - 5 s
    # after the first. Load only delays starts, so these lower bounds hold on a slow machine.
    assert all(start >= i - 5 for i, start in enumerate(starts)), starts
    assert starts[-1] >= 14


KEY_ENV = "HARNESS_SECRET_H11_E2E_MODEL_KEY"  # a granted name (tasks/secrets.py)
KEY = "sk-e2e-flow-4c2a"
GOOD = {"summary": "paced", "severity": "info"}


@postgres_only
def test_a_provider_answering_429_with_retry_after_slows_the_pool_and_nothing_is_dead_lettered(harness):
    server = FakeModelServer().start()
    try:
        Pool.objects.get_or_create(name=GLOBAL_POOL, defaults={"reason": "every run"})
        harness.worker("w1", concurrency=2, extra_env={KEY_ENV: KEY})
        harness.worker("w2", concurrency=2, extra_env={KEY_ENV: KEY})
        harness.beat()
        provider = pool("provider")
        agent = Agent.objects.create(
            name="writer",
            provider="openai",
            base_url=server.base_url,
            model="gpt-test",
            api_key_env=KEY_ENV,
            pool=provider,
        )
        retry_after = 3
        server.respond(
            *[Reply(429, '{"error": "slow down"}', {"Retry-After": str(retry_after)})] * 2, json_completion(GOOD)
        )
        rule = recording_rule(
            "llm", kind="interval", interval_seconds=3600, enabled=False, skill="llm_json", agent=agent
        )
        payload = {
            "params": {"prompt": "Summarise {topic}.", "topic": "the queue", "action": "harness.record"},
            "output_schema": {"type": "object", "required": ["summary"]},
        }
        runs = fire(rule, 6, payload=payload, agent=agent.name)

        # Watch for the pause while the runs go on: the first moment this process sees it recorded
        # bounds when it was written. A call decided after that must wait; one decided before it was
        # already under way, and on a loaded machine it may reach the provider seconds later.
        seen: list[tuple[datetime, datetime]] = []
        ids = [r.id for r in runs]

        def finished() -> bool:
            if not seen and (until := Pool.objects.filter(id=provider.id).values_list("paused_until", flat=True)[0]):
                seen.append((timezone.now(), until))
            return TaskRun.objects.filter(id__in=ids).exclude(state__in=TaskRun.FINISHED).count() == 0

        wait_for(finished, timeout=RUN_TIMEOUT, interval=0.05, what="6 runs to finish")

        assert set(TaskRun.objects.filter(id__in=ids).values_list("state", flat=True)) == {"succeeded"}
        assert not DeadLetter.objects.exists()
        assert ExternalCall.objects.filter(status=429).exists()
        assert seen, "the pool was never seen paused"
        seen_at, paused_until = seen[0]
        calls = list(ExternalCall.objects.order_by("started_at"))
        # Every request the provider saw is recorded (none bypasses the record the check is made on).
        assert len(server.requests) == len(calls)
        arrivals = [r["at"] for r in server.requests]
        print(
            "\n[e2e flow] provider 429 Retry-After 3: request times (s) "
            + " ".join(f"{t - arrivals[0]:.1f}" for t in arrivals)
            + "; calls decided (s after the pause was seen) "
            + " ".join(f"{(c.started_at - seen_at).total_seconds():.1f}" for c in calls)
        )
        during = [c.started_at for c in calls if seen_at < c.started_at < paused_until]
        assert not during, (seen_at, paused_until, during)
        assert Pool.objects.get(id=provider.id).paused_until is not None
    finally:
        server.stop()
