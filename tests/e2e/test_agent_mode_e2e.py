"""Runs that wait hold no database connection: a threads-pool worker with a bounded connection pool.

Agent runs spend their time waiting on a model. A worker in the threads pool holds many such runs
at once; with HARNESS_DB_POOL_MAX set, each thread borrows a pooled connection for each short write
and gives it back before the skill waits (runs.engine.store's connection_release). Here 40 runs of
`harness.sleep` (a stand-in for a model call) are in flight together on one worker whose pool
holds at most 4 connections: every run succeeds once, and the server never sees more than 4
connections from the worker.
"""

import time

import pytest
from django.db import connection
from django.utils import timezone

from runs.engine.claims import run_claim
from runs.models import Attempt, TaskRun, WorkerHeartbeat
from tests.support.runs import api_work

pytestmark = [pytest.mark.e2e, pytest.mark.backend]

RUNS = 40
POOL_MAX = 4
SECONDS = 3


def _sessions() -> int:
    """Connections to the test database other than this process's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a connection pool is PostgreSQL's")
def test_forty_waiting_runs_share_four_pooled_connections(harness):
    harness.worker(
        "agents",
        concurrency=RUNS,
        args=("--pool=threads", "--queues=celery,harness_control"),
        extra_env={"HARNESS_DB_POOL_MAX": str(POOL_MAX), "HARNESS_DB_POOL_MIN": "1"},
    )
    now = timezone.now()
    runs = [
        run_claim(api_work(f"agent-mode:{i}", skill="harness.sleep", params={"seconds": SECONDS}), now=now).run
        for i in range(RUNS)
    ]
    ids = [r.id for r in runs]
    connection.close()

    peak_sessions = peak_running = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        peak_sessions = max(peak_sessions, _sessions())
        states = list(TaskRun.objects.filter(id__in=ids).values_list("state", flat=True))
        peak_running = max(peak_running, states.count(TaskRun.State.RUNNING))
        if all(s in TaskRun.FINISHED for s in states):
            break
        time.sleep(0.2)

    states = list(TaskRun.objects.filter(id__in=ids).values_list("state", flat=True))
    assert states == [TaskRun.State.SUCCEEDED] * RUNS, states
    assert Attempt.objects.filter(run_id__in=ids).count() == RUNS  # each ran once
    assert peak_running >= RUNS // 2, f"only {peak_running} runs were in flight at once"
    assert 0 < peak_sessions <= POOL_MAX, f"{peak_sessions} connections for {POOL_MAX} pooled"
    # The worker's heartbeat reports its pool (/metrics, the dashboard): its size, and the requests.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pools = [w.db_pool for w in WorkerHeartbeat.objects.all() if w.db_pool and w.db_pool["requests_num"]]
        if pools:
            break
        time.sleep(0.2)
    assert pools and pools[0]["pool_max"] == POOL_MAX and 0 <= pools[0]["in_use"] <= POOL_MAX, pools
