"""Opening dead-letter tickets (invariant 6)."""

from datetime import datetime

from django.db import IntegrityError, transaction

from runs.errors import ClassifiedError
from runs.models import TaskRun

from .alerts import alert_final_failure
from .models import DeadLetter


def deadletter_open(*, run: TaskRun, error: ClassifiedError, reason: str, now: datetime) -> DeadLetter:
    """Open the one ticket for a run that failed for good, and alert after commit.

    A second call for the same run (a racing sweeper, a retried message) finds the open ticket
    through the partial unique constraint and neither duplicates it nor alerts again.
    """
    first = run.first_failure_at or now
    try:
        with transaction.atomic():
            ticket = DeadLetter.objects.create(
                run=run,
                biz_key=run.biz_key,
                rule_name=run.rule_name,
                source=run.source,
                raw_payload=run.payload,
                first_failure_at=first,
                last_failure_at=now,
                attempts=run.attempts,
                error_kind=error.kind,
                last_error_digest=error.digest,
                last_error=error.message,
                created_at=now,
            )
    except IntegrityError:
        return DeadLetter.objects.get(run=run, state=DeadLetter.State.PENDING_MANUAL)
    transaction.on_commit(lambda: alert_final_failure(ticket=ticket, reason=reason))
    return ticket
