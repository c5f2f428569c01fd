"""Skills in steps: checkpointed outputs, dry-run write skipping, and actions that wait for a human.

A step's output is checkpointed as a RunStep row under the run's fence. A retried or replayed
attempt finds the row and returns its output instead of doing the step again, so a run killed
after `call_model` resumes at `write_result` without calling the model a second time.

- A read step (`write=False`, e.g. a model call) runs outside any transaction (never hold a database
  lock across a network call) and is checkpointed afterwards, in one statement that writes only
  while this attempt holds the lease.
- A write step runs inside the fenced transaction together with its checkpoint: the write and the
  record that it happened commit together or not at all, and only while this attempt holds the lease.
  The same transaction looks the checkpoint up (runs.engine.leases.fenced_step).
"""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from harness_site import tracing
from runs.engine.leases import LeaseLost, fenced_step
from runs.engine.store import database, store
from runs.models import ActionProposal, RunStep
from tasks.skills.actions import APPROVAL_RISKS, action_get, effective_risk
from tasks.skills.sdk import AwaitApproval, ErrorKind, SkillContext, SkillError, digest

# An unanswered approval expires after this long (params.approval_ttl_seconds overrides it per rule).
DEFAULT_APPROVAL_TTL = timedelta(hours=24)


def step_done(ctx: SkillContext, name: str) -> RunStep | None:
    return store().step_read(ctx.run_id, name)


class Checkpoints:
    """One attempt's view of its run's checkpoints: every one read in one statement at the
    attempt's first read step, then kept up to date with the checkpoints the attempt writes itself,
    so a skill of N read steps costs one read, not N. Only the attempt holding the run's fence writes
    a checkpoint, so none appears behind this attempt's back while it holds the lease; once it has
    lost the lease its own checkpoint write is refused (LeaseLost), whatever this view says.
    `none`: the statement that claimed the run found it has no checkpoint (a first attempt): nothing
    to read."""

    def __init__(self, *, none: bool = False) -> None:
        self._by_name: dict[str, RunStep] | None = {} if none else None

    def get(self, ctx: SkillContext, name: str) -> RunStep | None:
        if self._by_name is None:
            self._by_name = store().steps_read(ctx.run_id)
        return self._by_name.get(name)

    def add(self, step: RunStep) -> None:
        if self._by_name is not None:
            self._by_name.setdefault(step.name, step)


@tracing.traced(
    "run.step", attributes=lambda ctx, name, *_a, write=False, **_k: {"harness.step": name, "harness.write": write}
)
def run_step(
    ctx: SkillContext,
    name: str,
    fn: Callable[[], Any],
    *,
    write: bool = False,
    checkpoints: Checkpoints | None = None,
) -> Any:
    """Run step `name` of this run once and checkpoint its output; return the checkpoint if it exists.

    A write step in a dry run is not run: it is recorded as skipped and returns None.
    Raises LeaseLost if this attempt no longer holds the run: nothing is written.
    `checkpoints`: the attempt's view of them (the executor's runtime keeps one per attempt); None
    reads this step's afresh. A write step looks its checkpoint up inside its own transaction.
    """
    if write and not ctx.dry_run:
        with fenced_step(run_id=ctx.run_id, fence=ctx.fence, name=name, lost=ctx.lease_lost) as done:
            if done is not None:
                return _resumed(ctx, done)
            output = fn()
            step = _step(ctx, name, output)
            store().step_insert(step)
        if checkpoints is not None:
            checkpoints.add(step)
        return output
    database.connection_refresh()  # a step may follow minutes of work: replace a connection the server dropped
    done = checkpoints.get(ctx, name) if checkpoints is not None else step_done(ctx, name)
    if done is not None:
        return _resumed(ctx, done)
    if write:
        step = _checkpoint(ctx, name, None, skipped=True)
        ctx.logger.info("run %s: dry run, write step %s skipped", ctx.run_id, name)
    else:
        # The attempt's view of the checkpoints cannot see a newer attempt's: one that knows its lease is
        # gone starts no read step (a model call), whose checkpoint it could not write anyway.
        if ctx.lease_lost():
            raise LeaseLost()
        database.connection_release()  # a read step may wait (a model call): hold no pooled connection meanwhile
        step = _checkpoint(ctx, name, fn())
    if checkpoints is not None:
        checkpoints.add(step)
    return step.output


def _resumed(ctx: SkillContext, done: RunStep) -> Any:
    ctx.logger.info("run %s: step %s completed in attempt %s; resuming after it", ctx.run_id, done.name, done.attempt)
    return done.output


def _checkpoint(ctx: SkillContext, name: str, output: Any, *, skipped: bool = False) -> RunStep:
    """The step's checkpoint alone, under the fence (one statement where the store can)."""
    if ctx.lease_lost():
        raise LeaseLost()
    database.connection_refresh()  # after a read step's wait
    step = _step(ctx, name, output, skipped=skipped)
    if not store().step_checkpoint(step, fence=ctx.fence):
        raise LeaseLost()
    return step


def _step(ctx: SkillContext, name: str, output: Any, *, skipped: bool = False) -> RunStep:
    return RunStep(
        run_id=ctx.run_id,
        name=name,
        attempt=ctx.attempt,
        output=output,
        digest=digest(output),  # TypeError here means the step returned something that is not JSON
        skipped=skipped,
        completed_at=ctx.current_time(),
    )


def propose_action(
    ctx: SkillContext,
    action: str,
    args: dict[str, Any],
    *,
    step: str | None = None,
    risk: str | None = None,
    checkpoints: Checkpoints | None = None,
) -> Any:
    """Run `action` once for this run, as step `step` (default "action:<name>").

    Low risk runs at once. Medium and high park the run (AwaitApproval) until a human approves;
    the approved proposal's args, the ones the human saw, are what runs. A rejected or expired
    proposal fails the attempt (state_precondition). In a dry run the action is skipped.
    """
    step = step or f"action:{action}"
    handler = action_get(action)
    grade = effective_risk(handler.risk, risk)
    # Only an action that needs approval looks its step up here: run_step looks it up anyway.
    if not ctx.dry_run and grade in APPROVAL_RISKS and step_done(ctx, step) is None:
        proposal = ActionProposal.objects.filter(run_id=ctx.run_id, step=step).first()
        if proposal is None or proposal.status == ActionProposal.Status.PENDING:
            raise AwaitApproval(step=step, action=action, risk=grade, args=args, ttl=_approval_ttl(ctx))
        if proposal.status != ActionProposal.Status.APPROVED:
            who = f" by {proposal.decided_by}" if proposal.decided_by else ""
            raise SkillError(ErrorKind.STATE_PRECONDITION, f"action {action!r} was {proposal.status}{who}")
        args = proposal.args
    return run_step(ctx, step, lambda: handler.fn(ctx, args), write=True, checkpoints=checkpoints)


def _approval_ttl(ctx: SkillContext) -> timedelta:
    value = ctx.params.get("approval_ttl_seconds")
    if value is None:
        return DEFAULT_APPROVAL_TTL
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise SkillError(
            ErrorKind.INVALID_PARAM, f"params.approval_ttl_seconds must be a positive number, got {value!r}"
        )
    return timedelta(seconds=value)
