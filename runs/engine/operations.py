"""Operator actions on runs and leases: retry now, cancel, force-release. Each is a compare-and-set
on the row's state (a second click, or two operators at once, changes nothing the second time) and
writes its audit row in the same transaction."""

from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from deadletters.models import DeadLetter
from deadletters.services import deadletter_mark_replayed
from harness_site.audit.models import AuditEntry
from harness_site.audit.services import Actor, actor_name, audit_record
from runs.engine.dispatch import run_dispatch_on_commit
from runs.engine.store import ForceRelease, Replay, store
from runs.models import Lease, TaskRun
from tasks.skills.sdk import ErrorKind

RETRYABLE_STATES = (TaskRun.State.WAITING_RETRY, TaskRun.State.FAILED)
CANCELLABLE_STATES = (TaskRun.State.PENDING, TaskRun.State.WAITING_RETRY)


class OperationError(ValueError):
    """An action that cannot be done, with the reason to show the operator."""


def run_retry_now(*, run_id: int, actor: Actor, now: datetime, reason: str = "", ticket_id: int | None = None) -> bool:
    """Make a waiting or failed run due now: the one replay, from the run page or the dead-letter desk.

    The run keeps its biz_key, so the unique constraint keeps holding (invariant 6). A failed run's
    open ticket is marked replayed in the same transaction, so the desk and the run agree. From the
    desk (`ticket_id`), the ticket is compare-and-set first: a double-click or two on-call replaying
    at once queue ONE replay, and the loser gets False; if that ticket's run is no longer failed (or
    no longer exists), OperationError is raised and nothing changes. False also: the run is in no retryable state.
    """
    with transaction.atomic():
        if ticket_id is not None and not deadletter_mark_replayed(ticket_id=ticket_id, now=now):
            return False
        run = TaskRun.objects.filter(id=run_id, state__in=RETRYABLE_STATES).first()
        if run is None or (ticket_id is not None and run.state != TaskRun.State.FAILED):
            if ticket_id is None:
                return False
            state = TaskRun.objects.filter(id=run_id).values_list("state", flat=True).first()
            if state is None:
                raise OperationError(_("run %(run)s no longer exists") % {"run": run_id})
            raise OperationError(f"run {run_id} is {TaskRun.State(state).label.lower()}, not failed")
        # Compare-and-set on the state we read: False means someone else acted first.
        try:
            changed = store().replay(Replay(run_id=run.id, from_state=run.state, now=now))
        except IntegrityError:
            # A coalescing rule keeps one pending run per object (run_one_pending_per_object): a newer
            # trigger of this object is already pending and carries the newest payload.
            raise OperationError(
                f"run {run.id}: object {run.object_key} already has a pending run with a newer trigger; "
                "that run carries its work"
            ) from None
        if not changed:
            if ticket_id is not None:
                transaction.set_rollback(True)  # give the ticket back its open state
            return False
        ticket = deadletter_mark_replayed(run_id=run.id, now=now) if ticket_id is None else ticket_id
        if ticket:
            audit_record(
                actor=actor,
                action=AuditEntry.Action.DEADLETTER_REPLAY,
                target=DeadLetter.objects.get(id=ticket),
                now=now,
                reason=reason,
                label=run.biz_key,
                details={"run_id": run.id, "from_state": run.state},
            )
        else:
            audit_record(
                actor=actor,
                action=AuditEntry.Action.RUN_RETRY,
                target=run,
                now=now,
                reason=reason,
                details={"from_state": run.state},
            )
        run_dispatch_on_commit(run_ids=[run.id], now=now)
    return True


def run_cancel(*, run_id: int, actor: Actor, now: datetime, reason: str = "") -> bool:
    """Cancel a run that has not started or is waiting to retry. False: not in such a state."""
    with transaction.atomic():
        run = TaskRun.objects.filter(id=run_id, state__in=CANCELLABLE_STATES).first()
        if run is None:
            return False
        # The executor claims only pending/waiting runs, so a cancelled run can never start.
        if not store().cancel(run.id, from_state=run.state, now=now):
            return False
        audit_record(
            actor=actor,
            action=AuditEntry.Action.RUN_CANCEL,
            target=run,
            now=now,
            reason=reason,
            details={"from_state": run.state},
        )
    return True


def run_lease_force_release(*, run_id: int, actor: Actor, now: datetime, reason: str) -> bool:
    """Take a running run's lease away: back to waiting_retry, due now, fence bumped.

    The fence bump is what makes this safe: the old holder's result write checks the fence in the
    same statement, so it cannot commit after this. False: the run is not running any more.
    """
    if not (reason or "").strip():
        raise OperationError("A reason is required to force-release a lease.")
    with transaction.atomic():
        run = TaskRun.objects.filter(id=run_id, state=TaskRun.State.RUNNING).first()
        if run is None:
            return False
        message = f"lease of {run.lease_owner or '?'} force-released by {actor_name(actor)}: {reason}"
        # Its running attempt is fenced and its pool slots go with the lease, as on expiry (the
        # next sweep hands them on). False: finished or renewed under a new fence meanwhile.
        release = ForceRelease(
            run_id=run.id, fence=run.fence, now=now, message=message, error_kind=ErrorKind.LEASE_LOST
        )
        if not store().force_release(release):
            return False
        audit_record(
            actor=actor,
            action=AuditEntry.Action.LEASE_RELEASE,
            target=run,
            now=now,
            reason=reason,
            details={
                "owner": run.lease_owner,
                "fence": run.fence,
                "expires_at": run.lease_expires_at.isoformat() if run.lease_expires_at else None,
            },
        )
        run_dispatch_on_commit(run_ids=[run.id], now=now)
    return True


def lease_force_release(*, lease_id: int, actor: Actor, now: datetime, reason: str) -> bool:
    """Expire a key lease (rule or object) now and bump its token, so the old holder is fenced out.
    A run it names that is still running is released too. False: the lease is already free."""
    if not (reason or "").strip():
        raise OperationError("A reason is required to force-release a lease.")
    with transaction.atomic():
        lease = Lease.objects.filter(id=lease_id).first()
        if lease is None or not lease.owner:
            return False
        if not store().keyed_lease_force_release(lease.id, owner=lease.owner, token=lease.token, now=now):
            return False
        audit_record(
            actor=actor,
            action=AuditEntry.Action.LEASE_RELEASE,
            target=lease,
            now=now,
            reason=reason,
            details={
                "owner": lease.owner,
                "token": lease.token,
                "expires_at": lease.expires_at.isoformat() if lease.expires_at else None,
            },
        )
        if lease.run_id:
            run_lease_force_release(run_id=lease.run_id, actor=actor, now=now, reason=reason)
    return True
