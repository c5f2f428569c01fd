"""What one machine throws at a worker, with real worker and beat processes on both brokers:
a pool child killed, the worker itself killed with runs in hand, a stuck pool at SIGTERM, a frozen
worker. The file broker is the embedded default (harness_site/broker.py); the PostgreSQL pass uses Redis.
"""

import os
import signal
import time

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from runs.models import TaskRun
from tests.e2e.helpers import (
    claim,
    heartbeat,
    outside_transactions,
    pause_quiescent,
    pool_children,
    wait_heartbeat,
    wait_succeeded,
    wait_ticking,
)
from tests.support.processes import Proc, alive, proc_stat, wait_for

pytestmark = [pytest.mark.e2e]

FILE_BROKER = settings.CELERY_BROKER_URL.startswith("filesystem://")


def freeze_idle_pool(proc: Proc, *, tries: int = 10) -> None:
    """SIGSTOP a worker's pool processes while none runs a task. One stopped mid-task (a sweep comes
    every second) is a busy worker, not a stuck one, by design: it would never be "not consuming"."""
    children = pool_children(proc)
    for _ in range(tries):
        for pid in children:
            os.kill(pid, signal.SIGSTOP)
        # A child stopped inside a transaction: on SQLite it holds the write lock, and the heartbeat
        # waited for below could not be written at all.
        if not outside_transactions(children):
            for pid in children:
                os.kill(pid, signal.SIGCONT)
            time.sleep(0.3)
            continue
        stopped = timezone.now()
        report = wait_for(
            lambda stopped=stopped: (h := heartbeat(proc)) and h.beat_at > stopped and h,
            timeout=30,
            what=f"a heartbeat of {proc.name} after its pool stopped",
        )
        if report.active == 0:
            return
        for pid in children:
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.3)
    raise AssertionError(f"could not stop the pool of {proc.name} between tasks in {tries} tries")


def healthz() -> tuple[int, dict]:
    """/healthz with its details: a staff session."""
    client = Client()
    client.force_login(get_user_model().objects.get_or_create(username="oncall", defaults={"is_staff": True})[0])
    response = client.get("/healthz")
    return response.status_code, response.json()


def test_killing_every_idle_pool_child_does_not_stop_the_worker(harness):
    """The blocking prefork pool deadlocked for good when a child died holding the queue lock (13 of
    13 times); the event-loop pool replaces its children and goes on."""
    worker = harness.worker("w1", concurrency=2)
    harness.beat()
    wait_ticking()
    wait_heartbeat(worker)
    children = wait_for(lambda: pool_children(worker), timeout=10, what="the pool children")
    for pid in children:  # idle: whichever held a lock dies with it
        os.kill(pid, signal.SIGKILL)

    runs = [claim(f"after-kill-{i}") for i in range(5)]
    took = wait_succeeded(runs, timeout=30, what="runs sent after the pool children died to succeed")
    replaced = pool_children(worker)
    print(f"\n[e2e pool child] killed {len(children)} idle children; 5 runs done {took:.1f}s later")
    assert worker.popen.poll() is None and not set(replaced) & set(children)


def test_runs_held_by_a_killed_worker_are_delivered_again_without_waiting_for_a_sweep(harness):
    """w1 holds runs it received and had not started (prefetched); kill -9. The file broker puts them
    back when its consumer dies (about a second); on Redis the sweeper re-sends them once w1 is silent
    and they are neither queued nor held (runs/engine/sweeper.py), instead of after a 30 s re-dispatch."""
    harness.beat()
    # w1 takes runs only: with ticks and sweeps in its prefetch too, CI saw it hold two of the three.
    w1 = harness.worker("w1", concurrency=1, args=("--prefetch-multiplier=3", "--queues=celery"))
    wait_heartbeat(w1)
    # Long enough that w1 is still on its first run when w2 is up, even on a loaded machine where a
    # worker takes 10 s or more to start (CI saw w1 finish an 8 s run and start the next one first).
    runs = [claim(f"held-{i}", seconds=20) for i in range(3)]
    # One running, two received and waiting in w1 (its heartbeat lists what it holds).
    wait_for(
        lambda: (h := heartbeat(w1)) and {r.id for r in runs} <= set(h.held) and h.active == 1,
        timeout=30,
        what="w1 to hold all three runs, one running",
    )
    waiting = list(TaskRun.objects.filter(id__in=[r.id for r in runs], state=TaskRun.State.PENDING))
    running = TaskRun.objects.get(id__in=[r.id for r in runs], state=TaskRun.State.RUNNING)
    assert len(waiting) == 2
    # Room for all three at once: the retried run need not wait 20 s behind the two held ones.
    w2 = harness.worker("w2", concurrency=3)
    wait_heartbeat(w2)
    wait_ticking()  # w2 serves the control queue: ticks and the sweeps that re-send on Redis

    assert TaskRun.objects.filter(id__in=[r.id for r in waiting], state=TaskRun.State.PENDING).count() == 2
    w1.kill9()
    killed = time.monotonic()
    wait_for(
        lambda: not TaskRun.objects.filter(id__in=[r.id for r in waiting], attempts=0).exists(),
        timeout=60,
        what="the runs w1 held, not started, to start elsewhere",
    )
    delay = time.monotonic() - killed
    wait_succeeded(waiting, timeout=60, what="the runs w1 held, not started, to succeed elsewhere")
    wait_succeeded([running], timeout=90, what="the run w1 was executing to be retried after its lease")
    lease_delay = time.monotonic() - killed
    # One message at the claim and one per retry (attempts - 1); any more were re-sent as lost.
    resent = sum(
        d - a for d, a in TaskRun.objects.filter(id__in=[r.id for r in runs]).values_list("dispatches", "attempts")
    )
    print(
        f"\n[e2e killed worker] broker {'file' if FILE_BROKER else 'redis'}: the 2 prefetched runs "
        f"started on w2 {delay:.1f}s after kill -9; the running one (lease 4 s, runs 20 s) succeeded "
        f"after {lease_delay:.1f}s; messages re-sent by the sweeper: {resent}"
    )
    assert TaskRun.objects.get(id=running.id).attempts == 2
    if FILE_BROKER:
        assert resent == 0  # the broker itself delivered them again


def test_sigterm_ends_a_worker_whose_pool_is_stuck(harness):
    """A worker whose pool process is frozen mid-run never finishes a warm shutdown by itself; it exits
    after HARNESS_WORKER_SHUTDOWN_SECONDS, taking its pool with it, and the run is retried elsewhere
    after its lease."""
    worker = harness.worker("w1", concurrency=1, extra_env={"HARNESS_WORKER_SHUTDOWN_SECONDS": "3"})
    harness.beat()
    wait_ticking()
    wait_heartbeat(worker)
    run = claim("stuck", seconds=5)
    wait_for(lambda: TaskRun.objects.get(id=run.id).state == TaskRun.State.RUNNING, timeout=30, what="the run")
    children = pool_children(worker)
    for pid in children:
        os.kill(pid, signal.SIGSTOP)

    worker.popen.send_signal(signal.SIGTERM)
    started = time.monotonic()
    code = worker.popen.wait(timeout=30)
    took = time.monotonic() - started
    worker.stopped = True
    print(f"\n[e2e stuck pool] SIGTERM: the worker exited ({code}) after {took:.1f}s (shutdown grace 3 s)")
    wait_for(lambda: not [pid for pid in children if running(pid)], timeout=10, what="its pool to be gone")
    harness.worker("w2", concurrency=1)
    wait_succeeded([run], timeout=60, what="the stuck run to be retried by another worker")


def running(pid: int) -> bool:
    return alive(proc_stat(pid))


def test_healthz_reports_a_frozen_worker_and_one_that_takes_no_work(harness):
    """SIGSTOP of a whole worker: it stops reporting, /healthz says "not responding" well within a
    minute. Only its pool frozen, work waiting: it still reports, /healthz says "not consuming", and
    the watchdog ends it (exit 70) so that its runner starts it again."""
    frozen = harness.worker("frozen", concurrency=1)
    stuck = harness.worker("stuck", concurrency=1, extra_env={"HARNESS_WORKER_STALL_SECONDS": "10"})
    harness.beat()
    wait_ticking()
    wait_heartbeat(frozen)
    wait_heartbeat(stuck)
    assert healthz()[0] == 200

    # Frozen: the whole process group stops (never inside a database transaction).
    pause_quiescent(frozen)
    paused = time.monotonic()
    status, body = wait_for(
        lambda: (h := healthz()) and h[1]["reason"] == "worker_not_responding" and h,
        timeout=60,
        what="/healthz to report the frozen worker",
    )
    print(f"\n[e2e liveness] SIGSTOP: /healthz {status} after {time.monotonic() - paused:.1f}s: {body['detail']}")
    assert status == 503 and frozen.name in body["detail"]

    # Stuck: its pool frozen while work waits for it. The other worker stays frozen until /healthz
    # has said so, or it could take all the work (CI saw it) and none would wait for the stuck one;
    # beat's sweep, every second, and the runs below are work only the stuck worker can receive.
    stuck_name = wait_heartbeat(stuck).name
    freeze_idle_pool(stuck)
    for i in range(4):
        claim(f"waits-{i}")
    status, body = wait_for(
        lambda: (
            (h := healthz())
            and any(w["name"] == stuck_name and w["status"] == "not consuming" for w in h[1]["workers"])
            and h
        ),
        timeout=60,
        what="/healthz to report the worker that takes no work",
    )
    row = next(w for w in body["workers"] if w["name"] == stuck_name)
    print(f"[e2e liveness] pool frozen: /healthz {status}: {row['name']} {row['status']} ({row['waiting']} waiting)")
    assert status == 503 and row["waiting"] >= 1
    frozen.resume()
    code = stuck.popen.wait(timeout=60)
    stuck.stopped = True
    assert code == 70
    waits = list(TaskRun.objects.filter(biz_key__startswith="waits-"))
    wait_succeeded(waits, timeout=60, what="the runs that waited for the stuck worker to succeed elsewhere")


def test_a_pool_process_stuck_mid_run_ends_the_worker_once_its_lease_runs_out(harness):
    """A pool process stopped inside a run: its task stays "running", its lease renewer stops with it.
    Every pool process busy used to count as progress for ever; now a task past the stall period
    without a live lease is stuck, nothing finishes, and the watchdog ends the worker (exit 70) with
    a log line saying why. A long run whose lease lives is busy, not stuck (test_runs_held_by...)."""
    worker = harness.worker(
        "w1",
        concurrency=1,
        extra_env={"HARNESS_WORKER_STALL_SECONDS": "6", "HARNESS_WORKER_HEARTBEAT_SECONDS": "0.5"},
        args=("--queues=celery",),
    )
    wait_heartbeat(worker)
    run = claim("frozen-mid-run", seconds=60)
    wait_for(lambda: TaskRun.objects.get(id=run.id).state == TaskRun.State.RUNNING, timeout=30, what="the run")
    time.sleep(1)  # inside the skill's sleep, outside any transaction
    children = pool_children(worker)
    for pid in children:
        os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    code = worker.popen.wait(timeout=60)
    worker.stopped = True
    took = time.monotonic() - stopped
    line = next(line for line in worker.log().splitlines() if "finished and started no task" in line)
    print(f"\n[e2e stuck mid-run] the watchdog ended the worker ({code}) {took:.1f}s after its pool stopped: {line}")
    assert code == 70
    assert "1 running, 1 of them past the stall period without a live lease" in line
