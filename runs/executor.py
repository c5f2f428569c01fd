"""Executing one run under its lease (invariant 2), then recording the outcome."""

import logging
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import close_old_connections, connection, transaction
from django.db.models import F
from django.db.models.functions import Coalesce

from runs.leases import object_gate_enter, object_gate_exit
from runs.models import Attempt, TaskRun
from runs.outcome import run_record_failure
from runs.start_window import start_window_passed
from runs.steps import RunParked
from tasks.skills.errors import ClassifiedError, classify
from tasks.skills.identities import identity_require
from tasks.skills.sdk import ErrorKind, SkillContext, SkillError, registry

log = logging.getLogger("harness.executor")

DEFAULT_LEASE_TTL_SECONDS = 300
Clock = Callable[[], datetime]


class LeaseLost(SkillError):
    """This attempt no longer holds the run's lease: another worker may be executing it."""

    def __init__(self, message: str = "the run's lease was lost to another worker"):
        super().__init__(ErrorKind.LEASE_LOST, message)


@dataclass(frozen=True)
class ExecuteOutcome:
    run_id: int
    status: str  # "not_claimable" | "succeeded" | "retry" | "failed" | "fenced"
    detail: str = ""


def run_execute(*, run_id: int, worker: str, clock: Clock, rand: Callable[[], float] = random.random) -> ExecuteOutcome:
    """Claim the run, execute its skill while renewing the lease, commit the outcome under the fence.

    1. Compare-and-set the run to running (claimable, due, no live lease) and bump its fence.
    2. Run the skill in this thread while a second thread renews the lease.
    3. Write the outcome only if the fence still matches; otherwise the attempt is marked fenced.
    Returns "not_claimable" when another worker holds it, it is not due, or it has finished.
    A run with an object key first takes that object's lease (runs/leases.py), so runs of one
    object never execute at once; "object_busy" means it was pushed back for a later dispatch.
    "start_window_passed": a scheduled run that missed its rule's start window was cancelled.
    """
    if start_window_passed(run_id=run_id, now=clock()):
        return ExecuteOutcome(run_id, "start_window_passed")
    gate = object_gate_enter(run_id=run_id, worker=worker, clock=clock)
    if gate is not None and gate.held is None:
        return ExecuteOutcome(run_id, "object_busy")
    try:
        return _execute_claimed(run_id=run_id, worker=worker, clock=clock, rand=rand)
    finally:
        object_gate_exit(gate, now=clock())


def _execute_claimed(*, run_id: int, worker: str, clock: Clock, rand: Callable[[], float]) -> ExecuteOutcome:
    claimed = _claim(run_id=run_id, worker=worker, now=clock())
    if claimed is None:
        return ExecuteOutcome(run_id, "not_claimable")
    run, attempt = claimed
    ttl = timedelta(seconds=run.policy.get("lease_ttl_seconds", DEFAULT_LEASE_TTL_SECONDS))

    renewer = _LeaseRenewer(run_id=run.id, fence=run.fence, ttl=ttl, clock=clock)
    renewer.start()
    try:
        result, error = _call_skill(run, attempt, worker, clock)
    finally:
        renewer.stop()
    if error is None:
        return _finish_success(run, attempt, result, now=clock())
    if isinstance(error, RunParked):  # waiting for a human or a budget window, not a failure
        from runs.parking import run_park

        return run_park(run, attempt, error, now=clock())
    return _finish_failure(run, attempt, classify(error), now=clock(), draw=rand(), retry_after=_retry_after(error))


def _claim(*, run_id: int, worker: str, now: datetime) -> tuple[TaskRun, Attempt] | None:
    with transaction.atomic():
        policy_ttl = (
            TaskRun.objects.filter(id=run_id).values_list("payload__policy__lease_ttl_seconds", flat=True).first()
        )
        ttl = timedelta(seconds=policy_ttl or DEFAULT_LEASE_TTL_SECONDS)
        # Compare-and-set: a row count of 0 means another worker got there first (or it is not due).
        claimed = TaskRun.objects.filter(id=run_id, state__in=TaskRun.CLAIMABLE, run_after__lte=now).update(
            state=TaskRun.State.RUNNING,
            attempts=F("attempts") + 1,
            fence=F("fence") + 1,
            lease_owner=worker,
            lease_expires_at=now + ttl,
            start_at=Coalesce(F("start_at"), now),
            executed_by=worker,
        )
        if not claimed:
            return None
        run = TaskRun.objects.get(id=run_id)
        attempt = Attempt.objects.create(run=run, number=run.attempts, fence=run.fence, worker=worker, started_at=now)
    return run, attempt


def _call_skill(run: TaskRun, attempt: Attempt, worker: str, clock: Clock) -> tuple[object, BaseException | None]:
    logger = logging.getLogger(f"harness.skill.{run.skill}")
    ctx = SkillContext(
        run_id=run.id,
        biz_key=run.biz_key,
        fence=run.fence,
        attempt=attempt.number,
        params=run.payload.get("params", {}),
        now=clock(),
        logger=logger,
        worker=worker,
        rule_name=run.rule_name,
        slot=run.slot,
        payload=run.payload,
        fenced=lambda: fenced(run_id=run.id, fence=run.fence),
    )
    try:
        # Least privilege (invariant 8): the executing identity's allow-list is checked at run time too.
        identity_require(identity=run.identity, skill=run.skill)
        return registry.get(run.skill).fn(ctx), None
    except Exception as exc:  # any skill failure becomes a classified attempt outcome
        # A known error kind is expected operation; only an unclassified one needs its traceback.
        logger.warning(
            "run %s attempt %s %s: %s",
            run.id,
            attempt.number,
            "parked" if isinstance(exc, RunParked) else "failed",
            exc,
            exc_info=not isinstance(exc, SkillError | RunParked),
        )
        return None, exc


@contextmanager
def fenced(*, run_id: int, fence: int) -> Iterator[None]:
    """A transaction that commits only while `fence` still holds the run's lease.

    The row lock (PostgreSQL) or the IMMEDIATE write lock (SQLite) keeps the sweeper from
    taking the lease between the check and the caller's writes.
    """
    with transaction.atomic():
        holds = TaskRun.objects.select_for_update().filter(id=run_id, fence=fence, state=TaskRun.State.RUNNING).exists()
        if not holds:
            raise LeaseLost()
        yield


def _finish_success(run: TaskRun, attempt: Attempt, result: object, *, now: datetime) -> ExecuteOutcome:
    with transaction.atomic():
        done = _fenced_update(
            run,
            state=TaskRun.State.SUCCEEDED,
            finish_at=now,
            result=_jsonable(result),
            last_error="",
            last_error_kind="",
        )
        if not done:
            return _mark_fenced(attempt, now)
        Attempt.objects.filter(id=attempt.id).update(outcome=Attempt.Outcome.SUCCEEDED, finished_at=now)
    return ExecuteOutcome(run.id, "succeeded")


def _finish_failure(
    run: TaskRun, attempt: Attempt, error: ClassifiedError, *, now: datetime, draw: float, retry_after: float | None
) -> ExecuteOutcome:
    with transaction.atomic():
        decision = run_record_failure(
            run=run,
            attempt_number=attempt.number,
            attempts=Attempt.objects.filter(id=attempt.id),
            error=error,
            now=now,
            draw=draw,
            retry_after=retry_after,
            # Fenced: written only while this attempt still holds the lease (invariant 2).
            where={"fence": run.fence, "state": TaskRun.State.RUNNING},
            extra={},
        )
        if decision is None:
            return _mark_fenced(attempt, now)
    status = "retry" if decision.retry else "failed"
    log.info("run %s attempt %s %s: %s (%s)", run.id, attempt.number, status, error.kind, decision.reason)
    return ExecuteOutcome(run.id, status, decision.reason)


def _fenced_update(run: TaskRun, **fields) -> bool:
    """Write the outcome only if this attempt's fence still holds the lease (same statement)."""
    return bool(
        TaskRun.objects.filter(id=run.id, fence=run.fence, state=TaskRun.State.RUNNING).update(
            lease_owner="", lease_expires_at=None, **fields
        )
    )


def _mark_fenced(attempt: Attempt, now: datetime) -> ExecuteOutcome:
    # Also over "lease_expired": the sweeper wrote that first, and "fenced" adds that the worker
    # came back and tried to commit.
    Attempt.objects.filter(id=attempt.id, outcome__in=[Attempt.Outcome.RUNNING, Attempt.Outcome.LEASE_EXPIRED]).update(
        outcome=Attempt.Outcome.FENCED, finished_at=now, error_kind=ErrorKind.LEASE_LOST
    )
    log.warning("run %s attempt %s lost its lease; outcome discarded", attempt.run_id, attempt.number)
    return ExecuteOutcome(attempt.run_id, "fenced", "lease lost before commit")


def _retry_after(error: BaseException) -> float | None:
    value = getattr(error, "retry_after", None)
    return float(value) if isinstance(value, int | float) else None


def _jsonable(value: object) -> object:
    import json

    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return {"repr": repr(value)}


class _LeaseRenewer:
    """Extends the run lease every ttl/3 while the skill runs, on its own connection.

    Renewal is conditional on the fence, so a worker that lost the lease stops renewing it.
    """

    def __init__(self, *, run_id: int, fence: int, ttl: timedelta, clock: Clock):
        self.run_id, self.fence, self.ttl, self.clock = run_id, fence, ttl, clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"lease-renewer-{run_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        interval = max(self.ttl.total_seconds() / 3, 0.2)
        try:
            while not self._stop.wait(interval):
                renewed = TaskRun.objects.filter(id=self.run_id, fence=self.fence, state=TaskRun.State.RUNNING).update(
                    lease_expires_at=self.clock() + self.ttl
                )
                if not renewed:
                    log.warning("run %s: lease lost (fence %s), renewal stopped", self.run_id, self.fence)
                    return
        finally:
            close_old_connections()
            connection.close()
