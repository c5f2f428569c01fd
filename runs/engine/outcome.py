"""Every outcome of a run, in one module: succeed, retry later, fail for good, park, cancel late.

Each function is one state change written in the caller's transaction (or its own), and each one
that follows an attempt is fenced: written only while that attempt still holds the run's lease
(invariant 2). This module decides; the run store writes each outcome as one named operation
(runs.engine.store.protocol). `run_fail` is the only place that writes FAILED and opens the run's
dead-letter ticket (invariant 6).
"""

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction

from deadletters.alerts import alert_retry
from deadletters.services import deadletter_open
from runs.engine.admission import pool_wake_freed
from runs.engine.retry import RetryDecision, decide_retry
from runs.engine.store import AttemptEnd, BudgetPark, ErrorRecord, Failure, Proposal, store
from runs.models import Attempt, TaskRun
from tasks.skills.error_words import START_WINDOW_KIND  # re-exported: the kinds recorded here
from tasks.skills.errors import ClassifiedError
from tasks.skills.sdk import AwaitApproval, BudgetWait, ErrorKind, RunParked

log = logging.getLogger("harness.outcome")


@dataclass(frozen=True)
class ExecuteOutcome:
    run_id: int
    # not_claimable | start_window_passed | object_busy | pool_wait | succeeded | retry | failed | fenced
    # | awaiting_approval | waiting_budget
    status: str
    detail: str = ""
    # The attempt's pool slots were given back by the outcome's own statement (run_succeed on
    # PostgreSQL): the executor has none left to release.
    released: bool = field(default=False, compare=False)


def attempt_mark_fenced(attempt: Attempt, *, now: datetime) -> ExecuteOutcome:
    """The attempt lost its lease before it could commit: its outcome is discarded."""
    # Also over "lease_expired": the sweeper wrote that first, and "fenced" adds that the worker
    # came back and tried to commit.
    store().attempt_end(
        AttemptEnd(
            run_id=attempt.run_id,
            number=attempt.number,
            outcome=Attempt.Outcome.FENCED,
            now=now,
            error_kind=ErrorKind.LEASE_LOST,
            only_from=(Attempt.Outcome.RUNNING, Attempt.Outcome.LEASE_EXPIRED),
        )
    )
    log.warning("run %s attempt %s lost its lease; outcome discarded", attempt.run_id, attempt.number)
    return ExecuteOutcome(attempt.run_id, "fenced", "lease lost before commit")


def run_succeed(
    run: TaskRun, attempt: Attempt, result: object, *, now: datetime, release_worker: str | None = None
) -> ExecuteOutcome:
    """The attempt succeeded: the run is done, with its result (fenced).

    `release_worker`: the executor whose admission took the attempt's pool slots; where the store
    can (PostgreSQL), the same statement gives them back (fenced or not), and the outcome says so
    (`released`).
    """
    done = store().run_succeed(run, attempt, _jsonable(result), now=now, release_worker=release_worker)
    released = done.waiting is not None
    if done.waiting:  # freed pairs that runs wait for (none, mostly)
        pool_wake_freed(done.waiting, now=now)
    if not done.written:
        fenced_out = attempt_mark_fenced(attempt, now=now)
        return ExecuteOutcome(fenced_out.run_id, fenced_out.status, fenced_out.detail, released=released)
    return ExecuteOutcome(run.id, "succeeded", released=released)


def run_attempt_failed(
    run: TaskRun, attempt: Attempt, error: ClassifiedError, *, now: datetime, draw: float, retry_after: object = None
) -> ExecuteOutcome:
    """A worker's attempt failed with `error`: retry later or fail for good, by the run's policy (fenced).

    `retry_after`: what the raised exception said of a server's Retry-After (seconds); a number is
    the floor of the delay (runs.engine.retry), anything else is ignored.
    """
    with transaction.atomic():
        decision = run_record_failure(
            run,
            error=error,
            now=now,
            draw=draw,
            retry_after=float(retry_after) if isinstance(retry_after, int | float) else None,
            attempt_number=attempt.number,
        )
        if decision is None:
            return attempt_mark_fenced(attempt, now=now)
    status = "retry" if decision.retry else "failed"
    log.info("run %s attempt %s %s: %s (%s)", run.id, attempt.number, status, error.kind, decision.reason)
    return ExecuteOutcome(run.id, status, decision.reason)


def run_record_failure(
    run: TaskRun,
    *,
    error: ClassifiedError,
    now: datetime,
    draw: float,
    attempt_number: int,
    retry_after: float | None = None,
    take_lease: bool = False,
    attempt_outcome: str | None = None,
    attempt_only_from: tuple[str, ...] = (),
) -> RetryDecision | None:
    """Apply the run's retry policy (invariant 5) to its failed attempt `attempt_number`, fenced on
    `run.fence`.

    Used by the executor (its own attempt failed) and by the sweeper (`take_lease`: the lease
    expired, so the fence is bumped and the lost worker can never commit; only an attempt still
    in `attempt_only_from` is ended). None: the fence no longer held and nothing was written. A
    retry waits in the database (run_after) and records its alert; a final failure goes through
    `run_fail`, the one place that writes FAILED.
    """
    record = _record(error)
    policy = run.retry_policy()
    first_failure_at = run.first_failure_at or now
    decision = decide_retry(
        policy,
        attempt=run.attempts,
        error_kind=error.kind,
        first_failure_at=first_failure_at,
        now=now,
        draw=draw,
        retry_after=retry_after,
    )
    failure = Failure(
        run_id=run.id,
        error=record,
        first_failure_at=first_failure_at,
        now=now,
        fence=run.fence,
        take_lease=take_lease,
    )
    if decision.retry:
        assert decision.run_after is not None, "a retry says when"
        if not store().retry_later(failure, run_after=decision.run_after):
            return None
    elif not run_fail(run, error=error, reason=decision.reason, now=now, failure=failure):
        return None
    store().attempt_end(
        AttemptEnd(
            run_id=run.id,
            number=attempt_number,
            outcome=attempt_outcome or (Attempt.Outcome.RETRY if decision.retry else Attempt.Outcome.FAILED),
            now=now,
            error=record,
            only_from=attempt_only_from,
        )
    )
    if decision.retry:
        # Recorded with the outcome (an outbox row); sent by a worker after commit.
        alert_retry(run=run, attempt=run.attempts, max_attempts=policy.max_attempts, error=error, now=now)
    return decision


def run_fail(
    run: TaskRun,
    *,
    error: ClassifiedError,
    reason: str,
    now: datetime,
    from_states: tuple[str, ...] = (),
    failure: Failure | None = None,
) -> bool:
    """Fail the run for good and open its one dead-letter ticket, in the caller's transaction.

    The write is conditional: on the fence (`failure`, as run_record_failure builds it for an
    attempt that holds the lease) or on the run still being in one of `from_states` (a slot failed
    at fire time, an approval expired). False: the condition no longer held; nothing was written
    and no ticket was opened.
    """
    if failure is None:
        failure = Failure(
            run_id=run.id,
            error=_record(error),
            first_failure_at=run.first_failure_at or now,
            now=now,
            from_states=from_states,
        )
    if not store().fail(failure):
        return False
    run.refresh_from_db()
    deadletter_open(run=run, error=error, reason=reason, now=now)
    return True


def run_park(run: TaskRun, attempt: Attempt, parked: RunParked, *, now: datetime) -> ExecuteOutcome:
    """Release the lease and park the run (fenced): it is not failing, it must wait.

    - AwaitApproval: awaiting_approval (not claimable, no lease: a DB check constraint); the
      proposal is recorded once per (run, step). The attempt counts: it did work.
    - BudgetWait: waiting_retry until the budget window resets (or, ProviderWait, until the agent's
      provider pool may be called again). The attempt is taken back (deleted, count decremented):
      waiting must not use up retries.
    """
    if isinstance(parked, AwaitApproval):
        proposal = Proposal(
            step=parked.step,
            action=parked.action,
            risk=parked.risk,
            args=parked.action_args,
            expires_at=now + parked.ttl,
        )
        written, status = store().park_for_approval(run, attempt, proposal, now=now), "awaiting_approval"
    elif isinstance(parked, BudgetWait):
        park = BudgetPark(until=parked.until, message=str(parked), kind=parked.kind)
        written, status = store().park_for_budget(run, attempt, park), "waiting_budget"
    else:
        raise TypeError(f"unknown parking reason {parked!r}")
    if not written:
        return attempt_mark_fenced(attempt, now=now)
    log.info("run %s parked: %s", run.id, parked)
    return ExecuteOutcome(run.id, status, str(parked))


def run_cancel_late(run: TaskRun, *, now: datetime) -> bool:
    """Cancel a first attempt whose start window (run.start_by) has passed; True if cancelled.

    Only first attempts: a retry is the same unit of work already started in time. The slot keeps
    its (cancelled) run, so it stays accounted for (invariant 3); explain shows the reason.
    """
    start_by = run.start_by
    if run.state != TaskRun.State.PENDING or run.attempts != 0 or start_by is None or now <= start_by:
        return False
    # Compare-and-set: False means a worker claimed it (in time) or it changed meanwhile.
    message = f"start window passed: it had to start by {start_by.isoformat()}"
    return store().cancel_late(run.id, now=now, message=message, kind=START_WINDOW_KIND)


def _record(error: ClassifiedError) -> ErrorRecord:
    return ErrorRecord(kind=error.kind, message=error.message, digest=error.digest)


def _jsonable(value: object) -> object:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return {"repr": repr(value)}
