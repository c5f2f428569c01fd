"""The sweeper: takes back expired leases, reclaims their pool slots, hands free pool capacity to
waiting runs, dispatches due runs that have no message yet and re-dispatches runs whose message is lost.

A message is taken for lost only when the broker and the workers both say it is nowhere: not in the
queue (the file broker lists its run ids; on Redis, the run was dispatched before every message at the
old end of the queue) and held by no consumer (received and not acknowledged: the file broker's claims, Redis's
unacked messages, or a responding worker's heartbeat), for redispatch_after() since it was sent. So a
healthy backlog, however deep, is never sent twice; a message that died with a worker is.
"""

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q

from harness_site.broker import QueueProbe, queue_probe
from runs.engine.admission import pool_sweep
from runs.engine.dispatch import run_dispatch_on_commit
from runs.engine.outcome import run_record_failure
from runs.engine.rollup import rollup_refresh
from runs.engine.store import store
from runs.engine.workers import silent_after, worker_held_runs
from runs.models import Attempt, TaskRun
from tasks.skills.errors import ClassifiedError
from tasks.skills.sdk import RUN_QUEUES, ErrorKind

log = logging.getLogger("harness.sweeper")

SWEEP_BATCH = 500


def redispatch_after() -> timedelta:
    """How long a message must have been nowhere before it is sent again (HARNESS_REDISPATCH_SECONDS).

    Short because the queue probe confirms the message is gone; the alert outbox's
    ALERT_REDISPATCH_AFTER is longer because nothing confirms it (docs/architecture.md, "Lost messages").
    """
    return timedelta(seconds=settings.HARNESS["REDISPATCH_SECONDS"])


@dataclass(frozen=True)
class SweepResult:
    expired: int
    dispatched: int
    slots_reclaimed: int = 0
    woken: int = 0
    resent: int = 0  # of `dispatched`: messages taken for lost and sent again
    rolled_up: int = 0  # dashboard rollup buckets recomputed (runs/engine/rollup.py)


def sweep(
    *,
    now: datetime,
    rand: Callable[[], float] = random.random,
    probe: Callable[[str], QueueProbe | None] | None = None,
) -> SweepResult:
    """One pass: expire stale leases first (their runs may become due and their slots free), reclaim
    expired pool slots and wake waiting runs into the capacity, then dispatch due runs; last, a few
    buckets of the dashboard's rollup. `probe(queue)` looks at one of the run queues (default: the
    configured broker); None from it means "cannot tell"."""
    expired = sum(_expire_one(run_id, fence, now=now, draw=rand()) for run_id, fence in _expired_leases(now))
    pools = pool_sweep(now=now)
    dispatched, resent = _dispatch_due(now=now, probe=probe or _probe_execute_queue)
    return SweepResult(
        expired=expired,
        dispatched=dispatched,
        slots_reclaimed=pools["slots_reclaimed"],
        woken=pools["woken"],
        resent=resent,
        rolled_up=rollup_refresh(now=now),
    )


def _probe_execute_queue(queue: str) -> QueueProbe | None:
    try:
        return queue_probe(current_app, queue)
    except Exception as exc:  # an unreachable broker: no message can be sent now either
        log.warning("sweeper: cannot look into the queue (%s: %s); no message re-sent", type(exc).__name__, exc)
        return None


def _expired_leases(now: datetime) -> list[tuple[int, int]]:
    # run_list_expired_leases: served by run_lease_idx.
    return list(
        TaskRun.objects.filter(state=TaskRun.State.RUNNING, lease_expires_at__lt=now)
        .order_by("lease_expires_at")
        .values_list("id", "fence")[:SWEEP_BATCH]
    )


def _expire_one(run_id: int, fence: int, *, now: datetime, draw: float) -> bool:
    """Take the lease back from a lost worker: bump the fence so it can never commit, count the
    attempt, then retry or dead-letter by the run's policy."""
    with transaction.atomic():
        run = store().expiring(run_id, fence=fence, now=now)
        if run is None:  # renewed, finished or taken by another sweeper meanwhile
            return False
        error = ClassifiedError(
            kind=ErrorKind.LEASE_LOST,
            message=f"lease held by {run.lease_owner or '?'} expired at {run.lease_expires_at:%Y-%m-%dT%H:%M:%SZ}",
            digest="lease-expired",
        )
        # Bumping the fence means the lost worker can never commit.
        decision = run_record_failure(
            run,
            error=error,
            now=now,
            draw=draw,
            attempt_number=run.attempts,
            take_lease=True,
            attempt_outcome=Attempt.Outcome.LEASE_EXPIRED,
            attempt_only_from=(Attempt.Outcome.RUNNING,),
        )
        if decision is None:
            return False
        # The lost attempt's pool slots go with its lease (pool_sweep hands them on).
        store().slots_drop(run_id=run_id, fence=fence)
        # A model call it sent and never saw answered may still be billed: say so on its row.
        store().call_mark_lost(run_id)
    log.warning("run %s: lease expired, %s", run_id, decision.reason)
    return True


def _dispatch_due(*, now: datetime, probe: Callable[[str], QueueProbe | None]) -> tuple[int, int]:
    """Send the due runs that have no message: never dispatched, a retry that came due, or a message
    that is lost. Returns (sent, of which re-sent).

    The queue is looked at before the runs are read: a message taken from the queue after the look is
    then either held, or its run is no longer claimable when read. Each run is looked for in its own
    queue, where it was sent (TaskRun.queue)."""
    queues = {name: probe(name) for name in RUN_QUEUES}
    held = worker_held_runs(now=now) if any(q is not None for q in queues.values()) else set()
    with transaction.atomic():
        # run_list_due: served by run_due_idx. Never-dispatched, retry-due or possibly lost runs.
        rows = list(
            TaskRun.objects.filter(state__in=TaskRun.CLAIMABLE, run_after__lte=now)
            .filter(
                Q(dispatched_at__isnull=True)
                | Q(dispatched_at__lt=now - redispatch_after())
                | Q(state=TaskRun.State.WAITING_RETRY, dispatched_at__lt=F("run_after"))
            )
            .order_by("run_after")
            .values_list("id", "state", "run_after", "dispatched_at", "queue")[:SWEEP_BATCH]
        )
        ids, resent = [], 0
        for run_id, state, run_after, dispatched_at, queue_name in rows:
            queue = queues.get(queue_name)
            if dispatched_at is None or (state == TaskRun.State.WAITING_RETRY and dispatched_at < run_after):
                ids.append(run_id)
            elif queue is not None and message_lost(run_id, dispatched_at, queue=queue, held=held):
                ids.append(run_id)
                resent += 1
        run_dispatch_on_commit(run_ids=ids, now=now)
    if resent:
        log.warning("sweeper: %s message(s) lost (not queued, held by no worker): sent again", resent)
    return len(ids), resent


def message_lost(run_id: int, dispatched_at: datetime, *, queue: QueueProbe, held: set[int]) -> bool:
    """Whether the message of a run dispatched at `dispatched_at` (over redispatch_after() ago) is lost:
    not in the queue, and held by no consumer. A consumer's hold counts while the consumer responds
    (its heartbeat lists the run, `held`), or, from the broker's side, for silent_after() after it
    received the message (the time a heartbeat takes to report it)."""
    if queue.queued_runs is not None:
        if run_id in queue.queued_runs:
            return False
    elif queue.depth and queue.oldest_dispatched_at is not None:
        if dispatched_at.timestamp() >= queue.oldest_dispatched_at:
            return False
    elif queue.depth:
        return False  # messages are queued, of unknown age: cannot tell
    if run_id in held:
        return False
    age = queue.held.get(run_id, -1.0)
    if age is None or (age >= 0 and age < silent_after().total_seconds()):
        return False
    return True
