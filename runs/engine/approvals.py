"""Approvals: a skill's proposed actions and the catch-up gate.

Every decision is a compare-and-set on the proposal's (or run's) state, so a double-click or two
people deciding at once act once: the loser gets `False` (or 0) and nothing changes. Approving a
proposal sends the run back to pending; its skill resumes after its last checkpointed step and runs
the approved action once. Catch-up runs above a rule's threshold wait until an operator releases
them; approval re-paces them from the moment of approval. Every decision is audited.
"""

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import QuerySet

from harness_site.audit.models import AuditEntry
from harness_site.audit.services import Actor, actor_name, audit_record
from runs.engine.dispatch import run_dispatch_on_commit
from runs.engine.outcome import run_fail
from runs.engine.store import Gate, store
from runs.models import ActionProposal, TaskRun
from tasks.skills.errors import ClassifiedError

log = logging.getLogger("harness.approvals")

APPROVAL_EXPIRED_KIND = "approval_expired"
EXPIRE_BATCH = 500


def proposal_approve(*, proposal_id: int, actor: Actor, now: datetime, note: str = "") -> bool:
    """Approve a pending, unexpired proposal and make its run due now. False if it was already
    decided, expired, or its run is no longer waiting (nothing is changed then)."""
    with transaction.atomic():
        # Compare-and-set: a row count of 0 means someone decided first (or it expired).
        won = ActionProposal.objects.filter(
            id=proposal_id, status=ActionProposal.Status.PENDING, expires_at__gt=now
        ).update(status=ActionProposal.Status.APPROVED, decided_by=actor_name(actor), decided_at=now, note=note)
        if not won:
            return False
        proposal = ActionProposal.objects.select_related("run").get(id=proposal_id)
        if not store().approve(
            proposal.run_id, now=now
        ):  # the run was cancelled meanwhile: undo by rolling back the whole decision
            transaction.set_rollback(True)
            return False
        audit_record(
            actor=actor,
            action=AuditEntry.Action.PROPOSAL_APPROVE,
            target=proposal.run,
            now=now,
            reason=note,
            details={"proposal": proposal.id, "action": proposal.action, "risk": proposal.risk},
        )
        run_dispatch_on_commit(run_ids=[proposal.run_id], now=now)
    log.info(
        "proposal %s (%s, run %s) approved by %s", proposal_id, proposal.action, proposal.run_id, actor_name(actor)
    )
    return True


def proposal_reject(*, proposal_id: int, actor: Actor, now: datetime, note: str = "") -> bool:
    """Reject a pending proposal and cancel its run. False if it was already decided."""
    with transaction.atomic():
        won = ActionProposal.objects.filter(id=proposal_id, status=ActionProposal.Status.PENDING).update(
            status=ActionProposal.Status.REJECTED, decided_by=actor_name(actor), decided_at=now, note=note
        )
        if not won:
            return False
        proposal = ActionProposal.objects.select_related("run").get(id=proposal_id)
        message = f"action {proposal.action!r} rejected by {actor_name(actor)}" + (f": {note}" if note else "")
        store().reject(proposal.run_id, now=now, message=message, kind="rejected")
        audit_record(
            actor=actor,
            action=AuditEntry.Action.PROPOSAL_REJECT,
            target=proposal.run,
            now=now,
            reason=note,
            details={"proposal": proposal.id, "action": proposal.action, "risk": proposal.risk},
        )
    return True


def approval_expire_due(*, now: datetime) -> int:
    """Expire unanswered proposals past their deadline: the run fails and gets a dead-letter ticket,
    whose alert tells on-call (invariant 6). Served by proposal_pending_idx."""
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
            run = TaskRun.objects.get(id=proposal.run_id)
            error = ClassifiedError(kind=APPROVAL_EXPIRED_KIND, message=message, digest="approval-expired")
            run_fail(
                run,
                error=error,
                reason="approval expired unanswered",
                now=now,
                from_states=(TaskRun.State.AWAITING_APPROVAL,),
            )
            expired += 1
        log.warning("proposal %s (run %s) expired unanswered", proposal_id, proposal.run_id)
    return expired


# --- The catch-up gate ---

APPROVE_PERM = "runs.approve_catchup"


# Runs the scheduler gates before they start: catch-up above a rule's threshold, and a slot on a
# day its business calendar is uncertain of (no notice yet, hold policy).
GATED_SOURCES = (TaskRun.Source.CATCHUP, TaskRun.Source.SCHEDULER)


def _gated(ids: list[int]) -> QuerySet[TaskRun]:
    # Only runs gated before their first attempt: the same state is used by runs parked for an
    # action approval, which have attempts and are approved elsewhere.
    return TaskRun.objects.filter(
        id__in=ids, state=TaskRun.State.AWAITING_APPROVAL, source__in=GATED_SOURCES, attempts=0
    )


def _gate(run_ids: list[int], *, actor: Actor, now: datetime) -> Gate:
    return Gate(run_ids=tuple(run_ids), sources=GATED_SOURCES, approved_by=actor_name(actor), now=now)


def catchup_approve(*, run_ids: list[int], actor: Actor, now: datetime) -> int:
    """Release runs the scheduler held (a catch-up burst, an uncertain calendar day); each rule's runs
    are paced again from `now` in slot order, by its catch-up spacing.
    Returns how many were released (a run approved meanwhile by someone else is not counted)."""
    released, due = 0, []
    with transaction.atomic():
        runs = list(
            _gated(run_ids).select_for_update(of=("self",)).select_related("rule").order_by("rule_id", "slot", "id")
        )
        position: dict[int | None, int] = {}
        for run in runs:
            spacing = timedelta(seconds=run.rule.catchup_spacing_seconds if run.rule else 0)
            i = position[run.rule_id] = position.get(run.rule_id, -1) + 1
            run_after = now + spacing * i
            # Compare-and-set: 0 rows means it was approved or rejected concurrently.
            n = store().gate_release(_gate([run.id], actor=actor, now=now), run_after=run_after)
            released += n
            if n and run_after <= now:
                due.append(run.id)
        if released:
            audit_record(
                actor=actor,
                action=AuditEntry.Action.CATCHUP_APPROVE,
                target=runs[0].rule or runs[0],
                now=now,
                details={"run_ids": [r.id for r in runs], "released": released},
            )
        run_dispatch_on_commit(run_ids=due, now=now)
    return released


def catchup_reject(*, run_ids: list[int], actor: Actor, now: datetime) -> int:
    """Cancel runs the scheduler held; the slot keeps its (cancelled) run, so it stays accounted for."""
    name = actor_name(actor)
    with transaction.atomic():
        runs = list(_gated(run_ids).select_related("rule").order_by("id"))
        gate = _gate([r.id for r in runs], actor=actor, now=now)
        rejected = store().gate_reject(gate, message=f"held run rejected by {name}")
        if rejected:
            audit_record(
                actor=actor,
                action=AuditEntry.Action.CATCHUP_REJECT,
                target=runs[0].rule or runs[0],
                now=now,
                details={"run_ids": [r.id for r in runs], "rejected": rejected},
            )
    return rejected
