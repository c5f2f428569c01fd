"""Inside each Celery worker's main process: a heartbeat in the database, a stall watchdog and a bound
on the warm shutdown (connected in harness_site/celery.py at
worker_init, once the models can be imported).

* A worker reports as soon as it starts (before its pool exists), again when it is ready, then every
  HARNESS_WORKER_HEARTBEAT_SECONDS: what it holds (runs/engine/workers.py), runs received, running, waiting,
  and when it last made progress. A SIGSTOPped, frozen or killed worker stops reporting, and /healthz
  says "not responding"; a worker started again on the same node replaces it at its first report.
* The heartbeat's writes never cross a fork of a pool process (harness_site/forks.py), and never wait
  for the broker: a second thread looks into the worker's queues, each look bounded by a short timeout,
  and the heartbeat reads its last answer.
* Progress is work finished or started (runs/engine/workers.py worker_progressed), not work received: a
  worker holding messages that finishes and starts nothing is "not consuming" after half of
  HARNESS_WORKER_STALL_SECONDS; at the full period the watchdog ends the worker (its pool processes
  first), so that its runner starts a fresh one (the Procfile runner, harness_site/keepalive.py;
  systemd's Restart=always in production). Runs that keep their leases alive are busy, not stuck.
* It observes database and broker outages it lives through (the alerts pass, a Celery task, cannot: it
  needs both): the heartbeat's write failing with a database error, and the queue watch's look
  failing, each until the next success. Once over, an outage that lasted at least two heartbeats is
  recorded as an incident (runs/engine/downtime.py decides, runs/engine/incidents.py records; several workers that
  saw one outage widen one incident).
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
from collections import deque
from datetime import timedelta
from urllib.parse import urlsplit

from celery import current_app
from celery.worker import state as worker_state
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from harness_site.broker import PROBE_TIMEOUT, RUN_HEADER, queue_probe
from harness_site.forks import background_writes
from harness_site.release import migrations_missing
from runs.engine.downtime import Downtime, Span
from runs.engine.incidents import incident_record_outage
from runs.engine.store import database
from runs.engine.workers import (
    WorkerReport,
    pool_report,
    runs_with_live_lease,
    worker_beat,
    worker_gone,
    worker_progressed,
    worker_starting,
)

log = logging.getLogger("harness.worker")

EXIT_STALLED = 70  # the exit status of a worker the watchdog ended (EX_SOFTWARE)
EXIT_UNMIGRATED = 78  # a worker whose code needs migrations not yet applied (EX_CONFIG)

_watch: "WorkerWatch | None" = None


def on_worker_init(sender=None, **_kwargs) -> None:
    """Report at once, before the pool starts: a worker started again on the same node replaces the
    one that died as soon as its runner has started it, not one heartbeat after it is ready."""
    if sender is None:
        return
    _refuse_unmigrated()
    name = f"{sender.hostname}:{os.getpid()}"
    try:
        worker_starting(
            name=name,
            hostname=sender.hostname,
            pid=os.getpid(),
            stall_seconds=settings.HARNESS["WORKER_STALL_SECONDS"],
            now=timezone.now(),
        )
    except Exception as exc:  # the database may still be starting: the heartbeat reports later
        log.warning("worker start report failed: %s: %s", type(exc).__name__, str(exc)[:200])
    else:
        log.info("worker %s reported as started; its pool starts next", name)
    finally:
        connection.close()  # the main thread forks the pool next: no connection of its own crosses


def _refuse_unmigrated() -> None:
    """A worker whose code needs migrations the database has not applied would fail on its first
    statement that reads them: it ends at once, with one line that says what to do."""
    try:
        missing = migrations_missing()
    except Exception as exc:  # the database may still be starting: the worker's own retries cover it
        log.warning("worker migration check failed: %s: %s", type(exc).__name__, str(exc)[:200])
        return
    finally:
        connection.close()
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        log.error("worker not started: its code needs migrations not yet applied (%s); run manage.py migrate", shown)
        logging.shutdown()
        os._exit(EXIT_UNMIGRATED)


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


class QueueWatch(threading.Thread):
    """Looks into the worker's queues when the heartbeat asks (a pool process free, nothing received),
    each look bounded by PROBE_TIMEOUT, off the heartbeat's path: with the broker down a look fails
    after its timeout and the heartbeat goes on with the last answer."""

    def __init__(self, queues: list[str], *, outage_after: timedelta):
        super().__init__(name="harness-queue-watch", daemon=True)
        self.queues = queues
        self.broker = Downtime(at_least=outage_after)
        self.outages: deque[Span] = deque()  # broker outages over, for the heartbeat to record
        self.oldest_age: dict[str, float | None] = {}  # the last answer per queue; absent: unknown
        self._wanted = threading.Event()
        self.looked = threading.Event()  # set after each round of looks (what a caller may wait for)
        self._halt = False

    def run(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            if self._halt:
                return
            now, failed = timezone.now(), False
            for queue in self.queues:
                try:
                    look = queue_probe(current_app, queue, timeout=PROBE_TIMEOUT, held=False)
                    self.oldest_age[queue] = look.oldest_age
                except Exception:  # an unreachable or hung broker: an outage if it lasts
                    self.oldest_age.pop(queue, None)
                    failed = True
            if failed:
                self.broker.failed(now=now)
            elif self.queues and (span := self.broker.succeeded(now=now)):
                self.outages.append(span)
            self.looked.set()

    def ask(self) -> None:
        self._wanted.set()

    def stop(self) -> None:
        self._halt = True
        self._wanted.set()


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
        self.last_accepted = worker_state.all_total_count[0]
        self.last_active = 0
        self.queues = sorted(q.name for q in consumer.task_consumer.queues) if consumer.task_consumer else []
        self.concurrency = getattr(self.pool, "limit", 0) or 0
        # Prefork runs each task in a child with its own connections; these pools run them here.
        self.pool_in_process = type(self.pool).__module__.rsplit(".", 1)[-1] in ("thread", "solo", "gevent", "eventlet")
        # Failures for two heartbeats are an outage; shorter is a hiccup. Spans this close are one outage.
        self.outage_after = timedelta(seconds=2 * self.interval)
        self.queue_watch = QueueWatch(self.queues, outage_after=self.outage_after)
        self.database = Downtime(at_least=self.outage_after)
        self.outages: list[tuple[str, Span]] = []  # over, not yet recorded (kind, span)
        self._halt = threading.Event()
        self._stopping_since: float | None = None

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        self.queue_watch.start()
        while True:  # the first report at once: the worker is ready now
            with background_writes():
                now = timezone.now()
                try:
                    self.beat()
                except Exception as exc:  # a database hiccup must not end the heartbeat thread
                    if isinstance(exc, OperationalError | InterfaceError):
                        self.database.failed(now=now)
                    log.warning("worker heartbeat failed: %s: %s", type(exc).__name__, str(exc)[:200])
                    with contextlib.suppress(Exception):
                        connection.close()
                else:
                    if span := self.database.succeeded(now=now):
                        self.outages.append(("database", span))
                    self._record_outages()
            if self._stopping_since is not None and time.monotonic() - self._stopping_since > self.shutdown_grace:
                log.error(
                    "worker %s: shutdown still not finished after %.0fs; ending the pool and exiting",
                    self.name_,
                    self.shutdown_grace,
                )
                self.hard_exit(0)
            if self._halt.wait(self.interval):
                return

    def beat(self) -> None:
        now = timezone.now()
        reserved = list(worker_state.reserved_requests)
        active = list(worker_state.active_requests)
        accepted = worker_state.all_total_count[0]
        waiting = len({id(r) for r in reserved} - {id(r) for r in active})
        if self.queue_watch.broker.down or (not waiting and (not self.concurrency or len(active) < self.concurrency)):
            self.queue_watch.ask()  # for the next beat: is old work queued that this worker does not take?
        started = accepted - self.last_accepted
        finished = self.last_active + started - len(active)  # what was running, plus started, less running
        if worker_progressed(
            started=started,
            finished=finished,
            active=len(active),
            waiting=waiting,
            concurrency=self.concurrency,
            queued_too_long=self._queued_too_long(),
            stuck=(stuck := self._stuck(active, now=now)),
        ):
            self.progress_at = now
        self.last_accepted, self.last_active = accepted, len(active)
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
            # The pool's figures mean the runs' only where they share this process's pool (threads).
            db_pool=pool_report(database.pool_stats()) if self.pool_in_process else None,
        )
        try:
            worker_beat(report, now=now)
        finally:  # a write that failed (a database locked by the stuck pool itself) must not hide the stall
            self._end_if_stalled(report, now=now, active=len(active), waiting=waiting, stuck=stuck)

    def _record_outages(self) -> None:
        """Record each outage that is over as an incident; one that fails to record waits for the next beat."""
        while self.queue_watch.outages:
            self.outages.append(("broker", self.queue_watch.outages.popleft()))
        while self.outages:
            kind, span = self.outages[0]
            try:
                incident, new = incident_record_outage(
                    kind=kind,
                    subject=outage_subject(kind),
                    started_at=span.start,
                    ended_at=span.end,
                    join=self.outage_after,
                    seen_by=self.name_,
                    now=timezone.now(),
                )
            except Exception as exc:
                log.warning("worker %s: %s outage not recorded yet: %s: %s", self.name_, kind, type(exc).__name__, exc)
                with contextlib.suppress(Exception):
                    connection.close()
                return
            log.warning(
                "worker %s: %s unreachable for %.0fs (%s to %s): incident %s %s",
                self.name_,
                kind,
                span.seconds,
                f"{span.start:%H:%M:%S}",
                f"{span.end:%H:%M:%S}",
                incident.id,
                "recorded" if new else "widened",
            )
            self.outages.pop(0)

    def _end_if_stalled(self, report, *, now, active: int, waiting: int, stuck: int) -> None:

        stalled = (now - self.progress_at).total_seconds()
        if stalled > self.stall and self._stopping_since is None:
            log.error(
                "worker %s: finished and started no task for %.0fs while holding %s (%s running, %s of them "
                "past the stall period without a live lease; %s received, not started): pool stuck; exiting "
                "so that its runner starts it again",
                self.name_,
                stalled,
                active + waiting,
                active,
                stuck,
                waiting,
            )
            with contextlib.suppress(Exception):  # say it is going: its runner starts a new one
                worker_beat(dataclasses.replace(report, stopping=True), now=now)
            self.hard_exit(EXIT_STALLED)

    def _stuck(self, active: list, *, now) -> int:
        """How many running tasks started longer than the stall period ago and are not runs whose
        lease is still alive (a run renews its lease while its skill works, however long)."""

        wall = time.time()
        old = [r for r in active if r.time_start and wall - r.time_start > self.stall]
        if not old:
            return 0
        runs = [run for r in old if isinstance(run := (r.request_dict or {}).get(RUN_HEADER), int)]
        live = runs_with_live_lease(runs, now=now) if runs else set()
        return sum(1 for r in old if (r.request_dict or {}).get(RUN_HEADER) not in live)

    def _queued_too_long(self) -> bool:
        """A message in one of this worker's queues is older than the stall period (the queue
        watch's last look; unknown counts as no)."""
        return any(age is not None and age > self.stall for age in list(self.queue_watch.oldest_age.values()))

    # --- ending -------------------------------------------------------------------------------

    def shutting_down(self) -> None:
        if self._stopping_since is None:
            self._stopping_since = time.monotonic()

    def stop(self) -> None:
        self._halt.set()
        self.queue_watch.stop()
        with contextlib.suppress(Exception), background_writes():
            worker_gone(name=self.name_)

    def hard_exit(self, code: int) -> None:
        """End the pool processes, then this process, at once (no cleanup: it is stuck)."""
        for pid in _children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        logging.shutdown()
        os._exit(code)


def outage_subject(kind: str) -> str:
    """Which database or broker was down: its address, as every worker of a deployment names it, with
    no credentials (an incident's subject, shown in its page and alerts)."""
    if kind == "database":
        return database_address(settings.DATABASES["default"])
    return broker_address(str(current_app.conf.broker_url or ""))


def database_address(db: dict) -> str:
    vendor = db["ENGINE"].rsplit(".", 1)[-1]
    where = f"{db.get('HOST')}:{db.get('PORT') or ''}/" if db.get("HOST") else ""
    return f"{vendor}:{where}{db['NAME']}"


def broker_address(broker_url: str) -> str:
    url = urlsplit(broker_url)
    where = f"{url.hostname}:{url.port or ''}" if url.hostname else ""
    return f"{url.scheme}://{where}{url.path}"


def _children() -> list[int]:
    """Pids of this process's children (Linux /proc), e.g. the prefork pool processes."""
    pids: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{os.getpid()}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{os.getpid()}/task/{task}/children") as f:
                pids += [int(p) for p in f.read().split()]
    return pids
