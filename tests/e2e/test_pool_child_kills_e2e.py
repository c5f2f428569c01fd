"""A pool process killed again and again never stalls the worker (issue 31): on the embedded default
a replacement child forked while the heartbeat thread held SQLite's write lock used to wait for that
lock for ever (3 of 119 kills at a 2 s heartbeat). Here the heartbeat writes every 50 ms, so most
forks land next to a heartbeat write, and every run sent after each kill must finish.
"""

import os
import signal
import time

import pytest
from django.conf import settings

from runs.models import TaskRun
from tests.e2e.helpers import claim, pool_children, wait_heartbeat, wait_succeeded, wait_ticking
from tests.support.processes import wait_for

pytestmark = [pytest.mark.e2e]

KILLS = 100  # at least: each round kills both children, every other one while a run executes
HEARTBEAT = "0.05"
RUN_AFTER_KILL_TIMEOUT = 20  # seconds; the stall this looks for never ends by itself
POLL = 0.05


def kill_children(pids: list[int]) -> int:
    killed = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    return killed


@pytest.mark.skipif(
    not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"), reason="the embedded default: SQLite"
)
def test_a_hundred_pool_child_kills_idle_and_busy_never_stall_the_worker(harness):
    worker = harness.worker("w1", concurrency=2, extra_env={"HARNESS_WORKER_HEARTBEAT_SECONDS": HEARTBEAT})
    harness.beat()  # the sweeper retries the runs killed mid-execution once their lease ends
    wait_ticking()
    wait_heartbeat(worker)
    started = time.monotonic()
    kills, rounds, after_kill, interrupted, slowest = 0, 0, [], [], 0.0
    while kills < KILLS:
        children = wait_for(lambda: pool_children(worker), timeout=10, interval=POLL, what="the pool children")
        if rounds % 2:  # busy: a run executes in one of them; both die
            # Its retries may be killed in later rounds too (each round kills both children): with an
            # attempt a round it never runs out of attempts, so it must end succeeded.
            run = claim(f"interrupted-{rounds}", seconds=1, max_attempts=KILLS + 1)
            wait_for(
                lambda run=run: TaskRun.objects.get(id=run.id).state != TaskRun.State.PENDING,
                timeout=RUN_AFTER_KILL_TIMEOUT,
                interval=POLL,
                what=f"run {run.biz_key} to start before kill {kills}",
            )
            kills += kill_children(pool_children(worker))
            interrupted.append(run)
        else:  # idle: both die between runs
            kills += kill_children(children)
        rounds += 1
        run = claim(f"after-kill-{rounds}")
        sent = time.monotonic()
        wait_for(
            lambda run=run: TaskRun.objects.get(id=run.id).state == TaskRun.State.SUCCEEDED,
            timeout=RUN_AFTER_KILL_TIMEOUT,
            interval=POLL,
            what=f"the run sent after kill {kills} to succeed",
        )
        slowest = max(slowest, time.monotonic() - sent)
        after_kill.append(run)
    wait_succeeded(interrupted, timeout=180, what="the runs killed mid-execution to be retried and succeed")
    elapsed = time.monotonic() - started
    most_attempts = max(TaskRun.objects.get(id=r.id).attempts for r in interrupted)
    print(
        f"\n[e2e pool kills] {kills} pool children killed ({len(interrupted)} rounds mid-run), heartbeat "
        f"{HEARTBEAT}s: all {len(after_kill)} runs sent after a kill succeeded (slowest {slowest:.1f}s); "
        f"the interrupted runs took up to {most_attempts} attempts; "
        f"{elapsed:.0f}s in all"
    )
    assert kills >= KILLS
    assert worker.popen.poll() is None  # the same worker process throughout: no watchdog restart
