"""Shared pieces of the end-to-end tests: rules, readiness, pausing a worker safely, and a worker's
runs, pool processes and heartbeat."""

import os
import sqlite3
import time
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from runs.engine.claims import Work, run_claim
from runs.models import SchedulerTick, TaskRun, WorkerHeartbeat
from tasks.models import TriggerRule
from tests.support.processes import Proc, wait_for
from tests.support.rules import make_rule
from tests.support.runs import run_policy

# Generous bounds: the suite shares a small machine with other test runs.
START_TIMEOUT = 60
RUN_TIMEOUT = 90


def recording_rule(name: str, **fields) -> TriggerRule:
    """A rule whose runs record themselves (the harness.record skill), checked and saved as the admin would."""
    return make_rule(name, **{"reason": "end-to-end test", "skill": "harness.record", **fields})


def next_whole_second(after: datetime, *, plus: float = 0) -> datetime:
    at = after + timedelta(seconds=plus)
    return at.replace(microsecond=0) + timedelta(seconds=1)


def wait_ticking(*, since: datetime | None = None, timeout: float = START_TIMEOUT) -> None:
    """Wait until a beat has sent a tick and a worker has run it (both processes are up)."""
    since = since or timezone.now()
    wait_for(
        lambda: SchedulerTick.objects.filter(last_tick_at__gte=since).exists(),
        timeout=timeout,
        what="a scheduler tick run by a worker (beat and worker up)",
    )


def wait_finished(run: TaskRun, *, timeout: float = RUN_TIMEOUT) -> TaskRun:
    def finished():
        fresh = TaskRun.objects.get(pk=run.pk)
        return fresh if fresh.state in TaskRun.FINISHED else None

    return wait_for(finished, timeout=timeout, what=f"run {run.biz_key} to finish")


def wait_run_of(rule: TriggerRule, *, timeout: float = RUN_TIMEOUT, **filters) -> TaskRun:
    return wait_for(
        lambda: TaskRun.objects.filter(rule=rule, **filters).order_by("id").first(),
        timeout=timeout,
        what=f"a run of {rule.name} with {filters}",
    )


def freeze(*rules: TriggerRule) -> None:
    """Stop new slots without save(): save() would re-read the schedule from now."""
    TriggerRule.objects.filter(pk__in=[r.pk for r in rules]).update(enabled=False)


def pause_quiescent(proc: Proc, *, tries: int = 10) -> None:
    """SIGSTOP a worker group, but never while one of its processes holds a database lock.

    A group frozen mid-transaction (a tick, a sweep, a lease renewal) would hold the SQLite write
    lock or a PostgreSQL row lock and stall every other process: that tests nothing but the freeze.
    """
    for _ in range(tries):
        proc.pause()
        if outside_transactions(proc.group_pids()):
            return
        proc.resume()
        time.sleep(0.3)
    raise AssertionError(f"could not pause {proc.name} outside a database transaction in {tries} tries")


def outside_transactions(pids: list[int]) -> bool:
    """None of these (stopped) processes sits inside a database transaction.

    SQLite cannot say who holds its write lock, so there the question is whether anyone does; a
    running process that holds it briefly is waited for. PostgreSQL can: only the sessions whose
    client ports belong to these processes are looked at, since any other test process may be
    inside a transaction of its own (CI saw a full run fail 10 of 10 tries on the whole database).
    """
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        con = sqlite3.connect(db["NAME"], timeout=2)
        try:
            con.execute("BEGIN IMMEDIATE")
            con.rollback()
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            con.close()
    ports = tcp_ports(pids)
    if not ports:
        return True
    # A statement sent just before the stop still runs to its end: give it a moment to become
    # "idle" (autocommit) or "idle in transaction" (it stays so, being stopped).
    deadline = time.monotonic() + 2
    while True:
        time.sleep(0.3)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s) AND state <> 'idle'",
                [sorted(ports)],
            )
            if cursor.fetchone()[0] == 0:
                return True
        if time.monotonic() > deadline:
            return False


def tcp_ports(pids: list[int]) -> set[int]:
    """The local ports of these processes' TCP sockets (Linux /proc): how PostgreSQL names a client."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:  # the process or the descriptor is gone
            continue
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


# A run's policy in the worker-fault tests: short leases and retries, so a lost worker shows in seconds.
POLICY = {
    "max_attempts": 5,
    "backoff_base_seconds": 1.0,
    "max_delay_seconds": 2,
    "max_retry_window_seconds": 3600,
    "jitter_min": 1.0,
    "jitter_max": 1.0,
    "lease_ttl_seconds": 4,
}


def claim(biz_key: str, *, seconds: float = 0.0, max_attempts: int = POLICY["max_attempts"]) -> TaskRun:
    """A run of harness.record (one DiagnosticRecord per success), dispatched at once."""
    work = Work(
        biz_key=biz_key,
        skill="harness.record",
        source=TaskRun.Source.API,
        triggered_by="e2e",
        payload={"params": {"seconds": seconds}},
        policy=run_policy({**POLICY, "max_attempts": max_attempts}),
    )
    return run_claim(work, now=timezone.now()).run


def pool_children(proc: Proc) -> list[int]:
    pids = []
    for task in os.listdir(f"/proc/{proc.pid}/task"):
        with open(f"/proc/{proc.pid}/task/{task}/children") as f:
            pids += [int(p) for p in f.read().split()]
    return pids


def heartbeat(proc: Proc) -> WorkerHeartbeat | None:
    return WorkerHeartbeat.objects.filter(pid=proc.pid).first()


def wait_heartbeat(proc: Proc) -> WorkerHeartbeat:
    return wait_for(lambda: heartbeat(proc), timeout=START_TIMEOUT, what=f"a heartbeat of {proc.name}")


def wait_succeeded(runs: list[TaskRun], *, timeout: float, what: str) -> float:
    """Seconds until every run succeeded."""
    started = time.monotonic()
    ids = [r.id for r in runs]
    wait_for(
        lambda: TaskRun.objects.filter(id__in=ids, state=TaskRun.State.SUCCEEDED).count() == len(ids),
        timeout=timeout,
        what=what,
    )
    return time.monotonic() - started


def private_env(harness, pg, rd, **extra: str) -> dict[str, str]:
    """The environment of processes on the test's own servers (the `servers` fixture), its database migrated."""
    env = {"DATABASE_URL": pg.url, "CELERY_BROKER_URL": rd.url, "REDIS_URL": rd.url, **extra}
    migrated = harness.manage("migrate", "--no-input", extra_env=env, timeout=300)
    assert migrated.returncode == 0, migrated.stderr
    return env
