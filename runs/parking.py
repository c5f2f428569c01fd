"""Parking a run that is not failing but must wait: for a human's approval, or for its agent's
budget window to reset (issue 5). Called by the executor when a skill raises RunParked."""

import logging
from datetime import datetime

from django.db import transaction
from django.db.models import F

from runs.executor import ExecuteOutcome, _mark_fenced
from runs.models import ActionProposal, Attempt, TaskRun
from runs.steps import AwaitApproval, BudgetWait, RunParked

log = logging.getLogger("harness.parking")

BUDGET_WAIT_KIND = "budget"


def run_park(run: TaskRun, attempt: Attempt, parked: RunParked, *, now: datetime) -> ExecuteOutcome:
    """Release the lease and park the run, in one fenced transaction.

    - AwaitApproval: the run goes to awaiting_approval (not claimable, no lease: a DB check
      constraint) and its proposal is recorded once per (run, step). The attempt counts: it did work.
    - BudgetWait: the run goes to waiting_retry with run_after at the window's reset. The attempt is
      taken back (deleted, count decremented): no call was made, and waiting must not use up retries.
    If this attempt lost its lease meanwhile, nothing is written and the attempt is marked fenced.
    """
    with transaction.atomic():
        if isinstance(parked, AwaitApproval):
            fields = {"state": TaskRun.State.AWAITING_APPROVAL, "last_error": "", "last_error_kind": ""}
        elif isinstance(parked, BudgetWait):
            fields = {
                "state": TaskRun.State.WAITING_RETRY,
                "run_after": parked.until,
                "attempts": F("attempts") - 1,
                "last_error": str(parked),
                "last_error_kind": BUDGET_WAIT_KIND,
            }
        else:
            raise TypeError(f"unknown parking reason {parked!r}")
        # Compare-and-set on the fence: 0 rows means another worker holds the run now.
        done = TaskRun.objects.filter(id=run.id, fence=run.fence, state=TaskRun.State.RUNNING).update(
            lease_owner="", lease_expires_at=None, **fields
        )
        if not done:
            return _mark_fenced(attempt, now)
        if isinstance(parked, AwaitApproval):
            Attempt.objects.filter(id=attempt.id).update(outcome=Attempt.Outcome.PARKED, finished_at=now)
            ActionProposal.objects.get_or_create(
                run_id=run.id,
                step=parked.step,
                defaults={
                    "action": parked.action,
                    "risk": parked.risk,
                    "args": parked.action_args,
                    "proposed_at": now,
                    "expires_at": now + parked.ttl,
                },
            )
            status = "awaiting_approval"
        else:
            Attempt.objects.filter(id=attempt.id).delete()
            status = "waiting_budget"
    log.info("run %s parked: %s", run.id, parked)
    return ExecuteOutcome(run.id, status, str(parked))
