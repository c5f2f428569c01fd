"""Inside each Celery worker's main process: a heartbeat in the database, a stall watchdog and a bound
on the warm shutdown (connected in harness_site/celery.py).

* Every HARNESS_WORKER_HEARTBEAT_SECONDS a thread records what the worker holds (runs/workers.py):
  runs received, running, waiting, and when it last took work. A SIGSTOPped, frozen or killed worker
  stops reporting, and /healthz says "not responding".
* Work waiting (received, or in its queue for longer than the stall period) while the worker starts
  nothing: "not consuming" after half of HARNESS_WORKER_STALL_SECONDS; at the full period the
  watchdog ends the worker (its pool processes first), so that its runner starts a fresh one (the Procfile runner,
  harness_site/keepalive.py; systemd's Restart=always in production).
* A warm shutdown (SIGTERM) that has not finished after HARNESS_WORKER_SHUTDOWN_SECONDS ends the same
  way: a worker whose pool is stuck would otherwise wait for it for ever. Runs still running then lose
  their leases, and the sweeper retries them.
"""

import contextlib
import dataclasses
import logging
import os
import signal
import socket
import threading
import time

from celery import current_app
from celery.worker import state as worker_state
from django.conf import settings
from django.db import connection
from django.utils import timezone

from harness_site.broker import RUN_HEADER, queue_probe

log = logging.getLogger("harness.worker")

EXIT_STALLED = 70  # the exit status of a worker the watchdog ended (EX_SOFTWARE)

_watch: "WorkerWatch | None" = None


def on_worker_ready(sender=None, **_kwargs) -> None:
    global _watch
    if _watch is None and sender is not None:
        _watch = WorkerWatch(sender)
        _watch.start()


def on_worker_shutting_down(**_kwargs) -> None:
    if _watch is not None:
        _watch.shutting_down()


def on_worker_shutdown(**_kwargs) -> None:
    if _watch is not None:
        _watch.stop()


class WorkerWatch(threading.Thread):
    def __init__(self, consumer):
        super().__init__(name="harness-worker-watch", daemon=True)
        self.consumer = consumer
        self.pool = consumer.pool
        self.hostname = consumer.hostname or socket.gethostname()
        self.name_ = f"{self.hostname}:{os.getpid()}"
        self.interval = settings.HARNESS["WORKER_HEARTBEAT_SECONDS"]
        self.stall = settings.HARNESS["WORKER_STALL_SECONDS"]
        self.shutdown_grace = settings.HARNESS["WORKER_SHUTDOWN_SECONDS"]
        self.started_at = timezone.now()
        self.progress_at = self.started_at
        self.last_accepted = -1
        self.queues = sorted(q.name for q in consumer.task_consumer.queues) if consumer.task_consumer else []
        self.concurrency = getattr(self.pool, "limit", 0) or 0
        self._halt = threading.Event()
        self._stopping_since: float | None = None

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            try:
                self.beat()
            except Exception as exc:  # a database hiccup must not end the heartbeat thread
                log.warning("worker heartbeat failed: %s: %s", type(exc).__name__, str(exc)[:200])
                with contextlib.suppress(Exception):
                    connection.close()
            if self._stopping_since is not None and time.monotonic() - self._stopping_since > self.shutdown_grace:
                log.error(
                    "worker %s: shutdown still not finished after %.0fs; ending the pool and exiting",
                    self.name_,
                    self.shutdown_grace,
                )
                self.hard_exit(0)

    def beat(self) -> None:
        # Imported here: harness_site/celery.py imports this module before Django's apps are ready,
        # so the models can only be loaded once the worker runs.
        from runs.workers import WorkerReport, worker_beat

        now = timezone.now()
        reserved = list(worker_state.reserved_requests)
        active = list(worker_state.active_requests)
        accepted = worker_state.all_total_count[0]
        waiting = len({id(r) for r in reserved} - {id(r) for r in active})
        if accepted != self.last_accepted or not self._work_waiting(waiting, len(active)):
            self.progress_at = now
        self.last_accepted = accepted
        held = sorted(
            {run for r in {*reserved, *active} if isinstance(run := (r.request_dict or {}).get(RUN_HEADER), int)}
        )
        report = WorkerReport(
            name=self.name_,
            hostname=self.hostname,
            pid=os.getpid(),
            queues=",".join(self.queues)[:200],
            pool=type(self.pool).__module__.rsplit(".", 1)[-1],
            concurrency=self.concurrency,
            started_at=self.started_at,
            progress_at=self.progress_at,
            accepted=accepted,
            active=len(active),
            waiting=waiting,
            held=held,
            stall_seconds=self.stall,
            stopping=self._stopping_since is not None,
        )
        worker_beat(report, now=now)
        stalled = (now - self.progress_at).total_seconds()
        if stalled > self.stall and self._stopping_since is None:
            log.error(
                "worker %s: work has waited %.0fs and it started none (pool stuck?); exiting so that its "
                "runner starts it again",
                self.name_,
                stalled,
            )
            with contextlib.suppress(Exception):  # say it is going: its runner starts a new one
                worker_beat(dataclasses.replace(report, stopping=True), now=now)
            self.hard_exit(EXIT_STALLED)

    def _work_waiting(self, waiting: int, active: int) -> bool:
        """Work is waiting for a free pool process of this worker: messages it received and has not
        started, or a message in one of its queues older than the stall period. Every pool process
        running is busy, not stuck, however long its runs take (the shutdown grace bounds those)."""
        if self.concurrency and active >= self.concurrency:
            return False
        if waiting:
            return True
        for queue in self.queues:
            with contextlib.suppress(Exception):  # an unreachable broker is /healthz's business
                age = queue_probe(current_app, queue).oldest_age
                if age is not None and age > self.stall:
                    return True
        return False

    # --- ending -------------------------------------------------------------------------------

    def shutting_down(self) -> None:
        if self._stopping_since is None:
            self._stopping_since = time.monotonic()

    def stop(self) -> None:
        self._halt.set()
        with contextlib.suppress(Exception):
            from runs.workers import worker_gone

            worker_gone(name=self.name_)

    def hard_exit(self, code: int) -> None:
        """End the pool processes, then this process, at once (no cleanup: it is stuck)."""
        for pid in _children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        logging.shutdown()
        os._exit(code)


def _children() -> list[int]:
    """Pids of this process's children (Linux /proc), e.g. the prefork pool processes."""
    pids: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{os.getpid()}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{os.getpid()}/task/{task}/children") as f:
                pids += [int(p) for p in f.read().split()]
    return pids
