"""Opening dead-letter tickets (invariant 6)."""

from datetime import datetime

from django.db import IntegrityError, transaction

from deadletters.alerts import alert_final_failure
from deadletters.models import DeadLetter
from runs.models import TaskRun
from tasks.skills.errors import ClassifiedError


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
                raw_output=error.raw_output,
                created_at=now,
            )
            # The alert is an outbox row in the ticket's transaction; a worker sends it after commit.
            alert_final_failure(ticket=ticket, reason=reason, now=now)
    except IntegrityError:
        return DeadLetter.objects.get(run=run, state=DeadLetter.State.PENDING_MANUAL)
    return ticket


class DeadLetterError(ValueError):
    """A desk action that cannot be done, with the reason to show on-call."""


def deadletter_replay(*, ticket_id: int, actor, now: datetime, reason: str = "") -> bool:
    """Replay with the original biz_key: the same run gets a new attempt (back to pending, due now).

    Compare-and-set on the ticket state: only an open ticket moves to replayed, so a double-click or
    two on-call replaying at once queue ONE replay; the loser gets False. The run keeps its biz_key,
    so the unique constraint keeps holding. Raises DeadLetterError if the run is no longer failed
    (retried from the run page meanwhile); nothing is changed then.
    """
    from harness_site.audit.models import AuditEntry
    from harness_site.audit.services import audit_record
    from runs.dispatch import run_dispatch_on_commit

    with transaction.atomic():
        if not DeadLetter.objects.filter(id=ticket_id, state=DeadLetter.State.PENDING_MANUAL).update(
            state=DeadLetter.State.REPLAYED, replayed_at=now, updated_at=now
        ):
            return False
        ticket = DeadLetter.objects.select_related("run").get(id=ticket_id)
        # A fresh retry window for the new attempt; attempt numbers go on from the last one.
        moved = TaskRun.objects.filter(id=ticket.run_id, state=TaskRun.State.FAILED).update(
            state=TaskRun.State.PENDING, run_after=now, finish_at=None, first_failure_at=None
        )
        if not moved:
            raise DeadLetterError(f"run {ticket.run_id} is {ticket.run.get_state_display().lower()}, not failed")
        audit_record(
            actor=actor,
            action=AuditEntry.Action.DEADLETTER_REPLAY,
            target=ticket,
            now=now,
            reason=reason,
            label=ticket.biz_key,
            details={"run_id": ticket.run_id},
        )
        run_dispatch_on_commit(run_ids=[ticket.run_id], now=now)
    return True


def deadletter_close(*, ticket_id: int, actor, now: datetime, note: str) -> bool:
    """Close an open ticket with a note saying why. False: it was not open."""
    from harness_site.audit.models import AuditEntry
    from harness_site.audit.services import audit_record

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
    from harness_site.audit.models import AuditEntry
    from harness_site.audit.services import audit_record

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
