"""Faults under an agent worker: one threads-pool worker holding 500 waiting runs at once on a pool
of 10 database connections, then killed (kill -9), stopped (SIGTERM) or cut off from its database
(a PostgreSQL restart). Every run ends succeeded, exactly once: one `harness.record` row per run,
none lost, none doubled, none stuck.

PostgreSQL + Redis only: the connection pool is PostgreSQL's. A control worker (ticks and sweeps on
harness_control) and a beat stay up throughout, as in production (Procfile); the sweeper takes back
the leases of the lost attempts and re-sends the messages the dead worker held.
"""

import signal
import time
from collections import Counter

import pytest
from django.db import connection
from django.utils import timezone

from runs.engine.claims import Work, run_claim
from runs.models import Attempt, ExternalCall, RunStep, TaskRun
from tasks.models import Agent, DiagnosticRecord, Pool
from tests.e2e.helpers import private_env, tcp_ports
from tests.support.agent_runs import (
    AGENT_ENV,
    GOOD,
    KEY,
    KEY_ENV,
    LEASE_TTL,
    POLICY,
    POOL_MAX,
    attempt_story,
    control,
    model_claim,
)
from tests.support.fake_model import FakeModelServer, Reply, json_completion
from tests.support.processes import Harness, Proc, wait_for
from tests.support.runs import run_policy
from tests.support.servers import PG_BIN

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.backend,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="a connection pool is PostgreSQL's"),
]

RUNS = 500
# Each run waits this long (checking its lease every 0.1 s), so that all 500 are in flight at once even
# when starting them takes a loaded 2-core machine many seconds (at 12 s the first finished before the
# last started); a few leases each.
SECONDS = 20
# Generous bounds for a loaded 2-core machine; the assertions are on end states.
IN_FLIGHT_TIMEOUT = 360  # a ceiling for a loaded 2-core machine (both backends' e2e phases at once)
SETTLE_TIMEOUT = 300


def agent_worker(harness: Harness, name: str, env: dict | None = None, **extra: str) -> Proc:
    return harness.worker(
        name,
        concurrency=RUNS,
        args=("--pool=threads", "--queues=celery,agents"),
        extra_env={**(env or {}), **AGENT_ENV, **extra},
    )


def claim(prefix: str) -> list[int]:
    now = timezone.now()
    ids = [
        run_claim(
            Work(
                biz_key=f"{prefix}:{i}",
                skill="harness.record",
                source=TaskRun.Source.API,
                triggered_by="e2e",
                payload={"params": {"seconds": SECONDS}},
                policy=run_policy(POLICY),
            ),
            now=now,
        ).run.id
        for i in range(RUNS)
    ]
    connection.close()  # the workers must see every claim
    return ids


class Census:
    """Samples the runs' states (and the agent worker's connections) from the database."""

    def __init__(self, ids: list[int], worker: Proc | None = None) -> None:
        self.ids, self.worker = ids, worker
        self.peak_running = self.peak_connections = 0

    def states(self) -> Counter:
        states = Counter(TaskRun.objects.filter(id__in=self.ids).values_list("state", flat=True))
        self.peak_running = max(self.peak_running, states[TaskRun.State.RUNNING])
        if self.worker is not None and self.worker.popen.poll() is None:
            self.peak_connections = max(self.peak_connections, worker_connections(self.worker))
        return states

    def all_running(self) -> bool:
        states = self.states()
        finished = sum(states[s] for s in TaskRun.FINISHED)
        assert not finished, f"{finished} runs finished before all {len(self.ids)} were in flight: {dict(states)}"
        return states[TaskRun.State.RUNNING] == len(self.ids)

    def settled(self) -> bool:
        states = self.states()
        return sum(states[s] for s in TaskRun.FINISHED) == len(self.ids)


def worker_connections(worker: Proc) -> int:
    """The worker's sessions on the database (by its processes' client ports)."""
    ports = tcp_ports(worker.group_pids())
    if not ports:
        return 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s)", [sorted(ports)])
        return cursor.fetchone()[0]


def assert_exactly_once(ids: list[int], records: Counter) -> None:
    states = Counter(TaskRun.objects.filter(id__in=ids).values_list("state", flat=True))
    assert states == {TaskRun.State.SUCCEEDED: RUNS}, f"not all succeeded: {dict(states)}"
    assert len(records) == RUNS and set(records.values()) == {1}, (
        f"records: {len(records)} runs recorded, {sum(n > 1 for n in records.values())} more than once"
    )


def assert_leases_kept(ids: list[int]) -> None:
    """Every run waits twice its lease: no attempt on a living worker lost it (kept by renewals)."""
    fenced = Attempt.objects.filter(run_id__in=ids, outcome=Attempt.Outcome.FENCED).count()
    assert fenced == 0, f"{fenced} attempts lost their lease on a living worker"


def records_of(ids: list[int]) -> Counter:
    return Counter(DiagnosticRecord.objects.filter(run_id__in=ids).values_list("run_id", flat=True))


def attempts_of(ids: list[int]) -> Counter:
    return Counter(TaskRun.objects.filter(id__in=ids).values_list("attempts", flat=True))


def test_kill_9_of_an_agent_worker_with_500_runs_in_flight_loses_and_doubles_none(harness):
    control(harness)
    first = agent_worker(harness, "agents1")
    ids = claim("kill9")
    census = Census(ids, first)
    wait_for(census.all_running, timeout=IN_FLIGHT_TIMEOUT, interval=0.5, what=f"{RUNS} runs in flight")
    assert census.peak_running == RUNS
    time.sleep(LEASE_TTL / 2)  # past a renewal: the leases were kept alive by the one renewal thread
    assert census.all_running(), "runs lost their leases while their worker was alive"

    first.kill9()
    killed = time.monotonic()
    agent_worker(harness, "agents2")
    wait_for(census.settled, timeout=SETTLE_TIMEOUT, interval=0.5, what="every run to finish after kill -9")
    took = time.monotonic() - killed

    records = records_of(ids)
    print(
        f"\n[e2e agent kill -9] {RUNS} runs in flight on {census.peak_connections} connections (pool {POOL_MAX}); "
        f"all finished {took:.0f}s after kill -9; attempts per run {dict(sorted(attempts_of(ids).items()))}; "
        f"attempts {attempt_story(ids)}"
    )
    assert_exactly_once(ids, records)
    assert_leases_kept(ids)
    assert census.peak_connections <= POOL_MAX + 1  # the pool's, and the lease renewer's own
    assert min(attempts_of(ids)) >= 2  # every run was in flight on the killed worker: retried after its lease


def test_sigterm_of_an_agent_worker_with_500_runs_in_flight_finishes_or_hands_back_each_once(harness):
    control(harness)
    # A shorter grace than the runs' wait: the warm shutdown ends with runs still in flight.
    first = agent_worker(harness, "agents1", HARNESS_WORKER_SHUTDOWN_SECONDS=str(SECONDS // 3))
    ids = claim("sigterm")
    census = Census(ids, first)
    wait_for(census.all_running, timeout=IN_FLIGHT_TIMEOUT, interval=0.5, what=f"{RUNS} runs in flight")

    first.popen.send_signal(signal.SIGTERM)
    code = first.popen.wait(timeout=120)
    first.stopped = True
    left_running = census.states()[TaskRun.State.RUNNING]
    agent_worker(harness, "agents2")
    wait_for(census.settled, timeout=SETTLE_TIMEOUT, interval=0.5, what="every run to finish after SIGTERM")

    records = records_of(ids)
    print(
        f"\n[e2e agent SIGTERM] worker exited ({code}) with {left_running} of {RUNS} runs still running; "
        f"attempts per run {dict(sorted(attempts_of(ids).items()))}; attempts {attempt_story(ids)}"
    )
    assert_exactly_once(ids, records)
    assert_leases_kept(ids)


CLAIM_SCRIPT = f"""
from django.utils import timezone
from runs.engine.claims import Work, run_claim
from runs.models import TaskRun
from tests.support.runs import run_policy
now = timezone.now()
for i in range({RUNS}):
    run_claim(Work(biz_key=f"restart:{{i}}", skill="harness.record", source=TaskRun.Source.API,
        triggered_by="e2e", payload={{"params": {{"seconds": {SECONDS}}}}}, policy=run_policy({POLICY!r})), now=now)
"""


@pytest.mark.skipif(PG_BIN is None, reason="needs PostgreSQL's server binaries")
def test_a_postgres_restart_with_500_agent_runs_in_flight_loses_and_doubles_none(harness, servers):
    pg, rd = servers
    env = private_env(harness, pg, rd)
    control(harness, env)
    worker = agent_worker(harness, "agents1", env)
    claimed = harness.manage("shell", "-c", CLAIM_SCRIPT, extra_env=env, timeout=300)
    assert claimed.returncode == 0, claimed.stderr

    def running() -> int:
        (finished,) = pg.rows("SELECT count(*) FROM runs_taskrun WHERE state = 'succeeded'")[0]
        assert not finished, f"{finished} runs finished before all {RUNS} were in flight"
        return pg.rows("SELECT count(*) FROM runs_taskrun WHERE state = 'running'")[0][0]

    peak = wait_for(lambda: (n := running()) == RUNS and n, timeout=IN_FLIGHT_TIMEOUT, what=f"{RUNS} in flight")
    pg.restart(down=2)
    restarted = time.monotonic()

    def unfinished() -> int:
        return pg.rows("SELECT count(*) FROM runs_taskrun WHERE state NOT IN ('succeeded','failed','cancelled')")[0][0]

    wait_for(lambda: unfinished() == 0, timeout=SETTLE_TIMEOUT, interval=0.5, what="every run to finish")
    took = time.monotonic() - restarted

    states = Counter(s for (s,) in pg.rows("SELECT state FROM runs_taskrun"))
    records = Counter(r for (r,) in pg.rows("SELECT run_id FROM tasks_diagnosticrecord"))
    attempts = Counter(a for (a,) in pg.rows("SELECT attempts FROM runs_taskrun"))
    story = Counter(pg.rows("SELECT split_part(worker, '@', 1), outcome, error_kind FROM runs_attempt"))
    print(
        f"\n[e2e agent postgres restart] {peak} runs in flight; all finished {took:.0f}s after the restart; "
        f"attempts per run {dict(sorted(attempts.items()))}; attempts {dict(sorted(story.items()))}"
    )
    assert worker.popen.poll() is None, "the agent worker died with its database"
    assert states == {"succeeded": RUNS}, f"not all succeeded: {dict(states)}"
    assert len(records) == RUNS and set(records.values()) == {1}


# --- The invariants under the threads pool, with a real model provider on loopback ---------------

MODEL_RUNS = 60
MODEL_SECONDS = 12  # each model call waits this long: twice the lease, so every lease must be renewed
PAUSE_SECONDS = 3


@pytest.fixture
def provider():
    server = FakeModelServer().start()
    yield server
    server.stop()


def test_agent_runs_on_a_threads_worker_keep_every_invariant_through_a_429_pause(harness, provider):
    """60 runs of llm_json on one threads worker (pool of 4 connections): a 429 with Retry-After
    pauses the agent's pool, and no request reaches the provider until the pause ends; every model
    call then waits twice the lease, so each run's lease is renewed (no attempt fenced); every run
    succeeds once with one successful model call and one write (checkpointed steps, each once)."""
    pool = Pool.objects.create(name="provider", reason="the provider's limits")
    agent = Agent.objects.create(
        name="writer",
        provider="openai",
        base_url=provider.base_url,
        model="gpt-test",
        api_key_env=KEY_ENV,
        read_timeout_seconds=MODEL_SECONDS * 5,
        pool=pool,
    )
    provider.respond(
        Reply(429, '{"error": "slow down"}', {"Retry-After": str(PAUSE_SECONDS)}),
        Reply(**{**vars(json_completion(GOOD)), "hang": MODEL_SECONDS}),
    )
    control(harness)
    worker = harness.worker(
        "agents1",
        concurrency=MODEL_RUNS,
        args=("--pool=threads", "--queues=celery,agents"),
        extra_env={"HARNESS_DB_POOL_MAX": "4", KEY_ENV: KEY},
    )
    first = model_claim(agent, 0, now=timezone.now())
    paused = wait_for(
        lambda: (
            Pool.objects.filter(id=pool.id, paused_until__isnull=False).values_list("paused_until", flat=True).first()
        ),
        timeout=IN_FLIGHT_TIMEOUT,
        what="the provider's 429 to pause the agent's pool",
    )
    ids = [first] + [model_claim(agent, i, now=timezone.now()) for i in range(1, MODEL_RUNS)]
    connection.close()
    census = Census(ids, worker)
    wait_for(census.settled, timeout=SETTLE_TIMEOUT, interval=0.5, what="every model run to finish")

    arrivals = sorted(r["at"] for r in provider.requests)
    records = records_of(ids)
    calls = Counter(ExternalCall.objects.filter(run_id__in=ids).values_list("status", flat=True))
    steps = Counter(RunStep.objects.filter(run_id__in=ids).values_list("run_id", "name"))
    print(
        f"\n[e2e agent 429 + threads] {MODEL_RUNS} runs, peak {census.peak_running} in flight on "
        f"{census.peak_connections} connections; first request after the pause "
        f"{arrivals[1] - paused.timestamp():+.2f}s from its end; calls by status {dict(calls)}; "
        f"attempts {attempt_story(ids)}"
    )
    # The 429 paused the whole pool: the next request came after the pause, none during it.
    assert arrivals[1] >= paused.timestamp()
    states = Counter(TaskRun.objects.filter(id__in=ids).values_list("state", flat=True))
    assert states == {TaskRun.State.SUCCEEDED: MODEL_RUNS}
    assert len(records) == MODEL_RUNS and set(records.values()) == {1}
    # One successful call per run (call_model checkpointed, never repeated) and the one 429.
    assert calls == {200: MODEL_RUNS, 429: 1}
    assert set(steps.values()) == {1} and len(steps) == 3 * MODEL_RUNS
    # Every call outlived the lease twice over: kept by renewals, no attempt lost it.
    assert_leases_kept(ids)
    assert census.peak_running >= MODEL_RUNS // 2
