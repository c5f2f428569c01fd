"""Dead-letter tickets (invariant 6): open, mark replayed, close, assign."""

from datetime import datetime
from typing import TYPE_CHECKING

from django.db import IntegrityError, transaction

from deadletters.alerts import alert_final_failure
from deadletters.models import DeadLetter
from harness_site.audit.models import AuditEntry
from harness_site.audit.services import audit_record
from tasks.skills.errors import ClassifiedError

if TYPE_CHECKING:
    from runs.models import TaskRun  # a sink below runs: it reads the run it is handed, never imports it


def deadletter_open(*, run: "TaskRun", error: ClassifiedError, reason: str, now: datetime) -> DeadLetter:
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
                raw_output=error.raw_output,
                trace_id=run.trace_id,
                created_at=now,
            )
            # The alert is an outbox row in the ticket's transaction; a worker sends it after commit.
            alert_final_failure(ticket=ticket, reason=reason, now=now)
    except IntegrityError:
        return DeadLetter.objects.get(run=run, state=DeadLetter.State.PENDING_MANUAL)
    return ticket


class DeadLetterError(ValueError):
    """A desk action that cannot be done, with the reason to show on-call."""


def deadletter_mark_replayed(*, now: datetime, ticket_id: int | None = None, run_id: int | None = None) -> int | None:
    """Mark the open ticket (by id, or the run's open one) replayed; its id, or None if none was open.

    Compare-and-set on the open state, so two replays of one ticket mark it once. Called by the one
    replay, runs.engine.operations.run_retry_now, in its transaction.
    """
    open_tickets = DeadLetter.objects.filter(state=DeadLetter.State.PENDING_MANUAL)
    found = open_tickets.filter(id=ticket_id) if ticket_id is not None else open_tickets.filter(run_id=run_id)
    ticket = found.values_list("id", flat=True).first()
    if ticket is None:
        return None
    won = DeadLetter.objects.filter(id=ticket, state=DeadLetter.State.PENDING_MANUAL).update(
        state=DeadLetter.State.REPLAYED, replayed_at=now, updated_at=now
    )
    return ticket if won else None


def deadletter_close(*, ticket_id: int, actor, now: datetime, note: str) -> bool:
    """Close an open ticket with a note saying why. False: it was not open."""
    if not (note or "").strip():
        raise DeadLetterError("A note is required to close a ticket.")
    with transaction.atomic():
        if not DeadLetter.objects.filter(id=ticket_id, state=DeadLetter.State.PENDING_MANUAL).update(
            state=DeadLetter.State.CLOSED, closed_at=now, note=note, updated_at=now
        ):
            return False
        ticket = DeadLetter.objects.get(id=ticket_id)
        audit_record(
            actor=actor,
            action=AuditEntry.Action.DEADLETTER_CLOSE,
            target=ticket,
            now=now,
            reason=note,
            label=ticket.biz_key,
            details={"run_id": ticket.run_id},
        )
    return True


def deadletter_assign(*, ticket_id: int, owner, actor, now: datetime, reason: str = "") -> bool:
    """Give a ticket an owner (None: unassign). False: no such ticket."""
    with transaction.atomic():
        if not DeadLetter.objects.filter(id=ticket_id).update(owner=owner, updated_at=now):
            return False
        ticket = DeadLetter.objects.get(id=ticket_id)
        audit_record(
            actor=actor,
            action=AuditEntry.Action.DEADLETTER_ASSIGN,
            target=ticket,
            now=now,
            reason=reason,
            label=ticket.biz_key,
            details={"owner": owner.get_username() if owner else None},
        )
    return True
