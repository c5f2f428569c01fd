"""The sweeper: takes back expired leases, reclaims their pool slots, hands free pool capacity to
waiting runs and re-dispatches due runs whose message may be lost."""

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q

from runs.admission import pool_sweep
from runs.dispatch import run_dispatch_on_commit
from runs.models import Attempt, PoolSlot, TaskRun
from runs.outcome import run_record_failure
from tasks.skills.errors import ClassifiedError
from tasks.skills.sdk import ErrorKind

log = logging.getLogger("harness.sweeper")

# A queued message normally reaches a worker within seconds; re-send only after this long.
REDISPATCH_AFTER = timedelta(seconds=30)
SWEEP_BATCH = 500


@dataclass(frozen=True)
class SweepResult:
    expired: int
    dispatched: int
    slots_reclaimed: int = 0
    woken: int = 0


def sweep(*, now: datetime, rand: Callable[[], float] = random.random) -> SweepResult:
    """One pass: expire stale leases first (their runs may become due and their slots free), reclaim
    expired pool slots and wake waiting runs into the capacity, then dispatch due runs."""
    expired = sum(_expire_one(run_id, fence, now=now, draw=rand()) for run_id, fence in _expired_leases(now))
    pools = pool_sweep(now=now)
    return SweepResult(
        expired=expired,
        dispatched=_dispatch_due(now=now),
        slots_reclaimed=pools["slots_reclaimed"],
        woken=pools["woken"],
    )


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
        run = (
            TaskRun.objects.select_for_update(skip_locked=True)
            .filter(id=run_id, fence=fence, state=TaskRun.State.RUNNING, lease_expires_at__lt=now)
            .first()
        )
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
            attempts=Attempt.objects.filter(run=run, number=run.attempts, outcome=Attempt.Outcome.RUNNING),
            take_lease=True,
            attempt_outcome=Attempt.Outcome.LEASE_EXPIRED,
        )
        if decision is None:
            return False
        # The lost attempt's pool slots go with its lease (pool_sweep hands them on).
        PoolSlot.objects.filter(run_id=run_id, fence=fence).delete()
    log.warning("run %s: lease expired, %s", run_id, decision.reason)
    return True


def _dispatch_due(*, now: datetime) -> int:
    with transaction.atomic():
        # run_list_due: served by run_due_idx. Never-dispatched or long-unanswered runs only.
        ids = list(
            TaskRun.objects.filter(state__in=TaskRun.CLAIMABLE, run_after__lte=now)
            .filter(
                Q(dispatched_at__isnull=True)
                | Q(dispatched_at__lt=now - REDISPATCH_AFTER)
                | Q(state=TaskRun.State.WAITING_RETRY, dispatched_at__lt=F("run_after"))
            )
            .order_by("run_after")
            .values_list("id", flat=True)[:SWEEP_BATCH]
        )
        run_dispatch_on_commit(run_ids=ids, now=now)
    return len(ids)
