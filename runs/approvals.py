"""Approving, rejecting and expiring proposed actions (issue 5).

Every decision is a compare-and-set on the proposal's status, so a double-click or two people
deciding at once act once: the loser gets `False` and nothing changes. Approve sends the run back to
pending; its skill resumes after its last checkpointed step and runs the approved action once.
"""

import logging
from datetime import datetime

from django.db import transaction
from django.db.models import DateTimeField, F, Value
from django.db.models.functions import Coalesce

from runs.dispatch import run_dispatch_on_commit
from runs.models import ActionProposal, TaskRun
from tasks.skills.errors import ClassifiedError

log = logging.getLogger("harness.approvals")

APPROVAL_EXPIRED_KIND = "approval_expired"
AUDIT_APPROVE = "proposal.approve"
AUDIT_REJECT = "proposal.reject"
EXPIRE_BATCH = 500


def _actor_name(actor) -> str:
    return getattr(actor, "get_username", lambda: str(actor))()


def proposal_approve(*, proposal_id: int, actor, now: datetime, note: str = "") -> bool:
    """Approve a pending, unexpired proposal and make its run due now. False if it was already
    decided, expired, or its run is no longer waiting (nothing is changed then)."""
    from harness_site.audit.services import audit_record

    with transaction.atomic():
        # Compare-and-set: a row count of 0 means someone decided first (or it expired).
        won = ActionProposal.objects.filter(
            id=proposal_id, status=ActionProposal.Status.PENDING, expires_at__gt=now
        ).update(status=ActionProposal.Status.APPROVED, decided_by=_actor_name(actor), decided_at=now, note=note)
        if not won:
            return False
        proposal = ActionProposal.objects.select_related("run").get(id=proposal_id)
        moved = TaskRun.objects.filter(id=proposal.run_id, state=TaskRun.State.AWAITING_APPROVAL).update(
            state=TaskRun.State.PENDING, run_after=now
        )
        if not moved:  # the run was cancelled meanwhile: undo by rolling back the whole decision
            transaction.set_rollback(True)
            return False
        audit_record(
            actor=actor,
            action=AUDIT_APPROVE,
            target=proposal.run,
            now=now,
            reason=note,
            details={"proposal": proposal.id, "action": proposal.action, "risk": proposal.risk},
        )
        run_dispatch_on_commit(run_ids=[proposal.run_id], now=now)
    log.info(
        "proposal %s (%s, run %s) approved by %s", proposal_id, proposal.action, proposal.run_id, _actor_name(actor)
    )
    return True


def proposal_reject(*, proposal_id: int, actor, now: datetime, note: str = "") -> bool:
    """Reject a pending proposal and cancel its run. False if it was already decided."""
    from harness_site.audit.services import audit_record

    with transaction.atomic():
        won = ActionProposal.objects.filter(id=proposal_id, status=ActionProposal.Status.PENDING).update(
            status=ActionProposal.Status.REJECTED, decided_by=_actor_name(actor), decided_at=now, note=note
        )
        if not won:
            return False
        proposal = ActionProposal.objects.select_related("run").get(id=proposal_id)
        TaskRun.objects.filter(id=proposal.run_id, state=TaskRun.State.AWAITING_APPROVAL).update(
            state=TaskRun.State.CANCELLED,
            finish_at=now,
            last_error=f"action {proposal.action!r} rejected by {_actor_name(actor)}" + (f": {note}" if note else ""),
            last_error_kind="rejected",
        )
        audit_record(
            actor=actor,
            action=AUDIT_REJECT,
            target=proposal.run,
            now=now,
            reason=note,
            details={"proposal": proposal.id, "action": proposal.action, "risk": proposal.risk},
        )
    return True


def approval_expire_due(*, now: datetime) -> int:
    """Expire unanswered proposals past their deadline: the run fails and gets a dead-letter ticket,
    whose alert tells on-call (invariant 6). Served by proposal_pending_idx."""
    from deadletters.services import deadletter_open

    expired = 0
    ids = list(
        ActionProposal.objects.filter(status=ActionProposal.Status.PENDING, expires_at__lte=now)
        .order_by("expires_at")
        .values_list("id", flat=True)[:EXPIRE_BATCH]
    )
    for proposal_id in ids:
        with transaction.atomic():
            if not ActionProposal.objects.filter(id=proposal_id, status=ActionProposal.Status.PENDING).update(
                status=ActionProposal.Status.EXPIRED, decided_at=now, decided_by="sweeper"
            ):
                continue  # decided meanwhile
            proposal = ActionProposal.objects.get(id=proposal_id)
            message = (
                f"action {proposal.action!r} ({proposal.risk} risk) was not approved by "
                f"{proposal.expires_at:%Y-%m-%dT%H:%M:%SZ}"
            )
            if TaskRun.objects.filter(id=proposal.run_id, state=TaskRun.State.AWAITING_APPROVAL).update(
                state=TaskRun.State.FAILED,
                finish_at=now,
                first_failure_at=Coalesce(F("first_failure_at"), Value(now, output_field=DateTimeField())),
                last_error=message,
                last_error_kind=APPROVAL_EXPIRED_KIND,
            ):
                run = TaskRun.objects.get(id=proposal.run_id)
                error = ClassifiedError(kind=APPROVAL_EXPIRED_KIND, message=message, digest="approval-expired")
                deadletter_open(run=run, error=error, reason="approval expired unanswered", now=now)
            expired += 1
        log.warning("proposal %s (run %s) expired unanswered", proposal_id, proposal.run_id)
    return expired
