"""A failed attempt becomes a retry or a final failure: one rule for the executor and the sweeper."""

from datetime import datetime

from django.db.models import QuerySet

from runs.models import Attempt, TaskRun
from runs.retry import RetryDecision, RetryPolicy, decide_retry
from tasks.skills.errors import ClassifiedError


def run_record_failure(
    *,
    run: TaskRun,
    attempt_number: int,
    attempts: QuerySet[Attempt],
    error: ClassifiedError,
    now: datetime,
    draw: float,
    retry_after: float | None = None,
    where: dict,
    extra: dict,
    attempt_outcome: str | None = None,
) -> RetryDecision | None:
    """Apply the run's retry policy (invariant 5) to a failed attempt, inside the caller's transaction.

    The run row is updated only where `where` still matches (the executor's fence check); None means
    it did not, and nothing was written. Otherwise `attempts` get their outcome (`attempt_outcome`,
    or retry/failed by the decision), and a final failure opens its one ticket (invariant 6) while a
    retry records its escalating alert.
    """
    from deadletters.alerts import alert_retry
    from deadletters.services import deadletter_open

    policy = RetryPolicy.from_dict(run.policy)
    first_failure_at = run.first_failure_at or now
    decision = decide_retry(
        policy,
        attempt=attempt_number,
        error_kind=error.kind,
        first_failure_at=first_failure_at,
        now=now,
        draw=draw,
        retry_after=retry_after,
    )
    fields = {
        **extra,
        "lease_owner": "",
        "lease_expires_at": None,
        "first_failure_at": first_failure_at,
        "last_error": error.message,
        "last_error_kind": error.kind,
    }
    if decision.retry:
        fields.update(state=TaskRun.State.WAITING_RETRY, run_after=decision.run_after)
    else:
        fields.update(state=TaskRun.State.FAILED, finish_at=now)
    if not TaskRun.objects.filter(id=run.id, **where).update(**fields):
        return None
    attempts.update(
        outcome=attempt_outcome or (Attempt.Outcome.RETRY if decision.retry else Attempt.Outcome.FAILED),
        finished_at=now,
        error_kind=error.kind,
        error_digest=error.digest,
        error=error.message,
    )
    if decision.retry:
        # Recorded with the outcome (an outbox row); sent by a worker after commit.
        alert_retry(run=run, attempt=attempt_number, max_attempts=policy.max_attempts, error=error, now=now)
    else:
        run.refresh_from_db()
        deadletter_open(run=run, error=error, reason=decision.reason, now=now)
    return decision
