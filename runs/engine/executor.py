"""Executing one run: the orchestration of one attempt, from start window to outcome.

The lease lives in runs/engine/leases.py, every outcome in runs/engine/outcome.py; this module only decides the
order: start window -> object gate -> pool admission -> run lease -> skill -> outcome.
"""

import logging
import random
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import OperationalError

from harness_site import tracing
from runs.engine import outcome
from runs.engine.admission import Admission, pool_release, run_admit
from runs.engine.calls import SkillRuntime
from runs.engine.leases import LeaseRenewer, fenced, object_gate_enter, object_gate_exit
from runs.engine.store import database, store
from runs.models import Attempt, TaskRun
from tasks.skills.errors import classify
from tasks.skills.identities import identity_require
from tasks.skills.sdk import RunParked, SkillContext, SkillError, registry

log = logging.getLogger("harness.executor")

Clock = Callable[[], datetime]
ExecuteOutcome = outcome.ExecuteOutcome


@tracing.scoped
def run_execute(*, run_id: int, worker: str, clock: Clock, rand: Callable[[], float] = random.random) -> ExecuteOutcome:
    """Execute one attempt of the run, if it is ours to execute.

    1. Read the run row (once per attempt; everything below works from it); a run not due is not
       ours. A run with nothing in its way (no object, no start window, pools that limit nothing)
       is claimed in the same statement on PostgreSQL (the run store's run_take), and goes to step 6.
    2. A first attempt past its start window is cancelled instead ("start_window_passed").
    3. A run with an object key takes that object's lease first, so runs of one object never execute
       at once; "object_busy" means it was pushed back for a later dispatch.
    4. Take a slot in every pool the run draws from (runs/engine/admission.py); "pool_wait" means it was
       put back unstarted (no attempt, no lease) until a slot, a token or the provider frees up.
    5. Take the run lease (compare-and-set, fence + 1); "not_claimable" when another worker holds
       it, it is not due, or it has finished. Pools that limit nothing (PostgreSQL) are taken in
       the claim's own statement instead of step 4's transaction.
    6. Run the skill in this thread while a second thread renews the lease (and the pool slots).
    7. Write the outcome under the fence; an attempt that lost its lease ends "fenced". Whatever
       the outcome, the slots are given back and handed to the next waiting runs.
    """
    # Read the run, and claim it in the same statement where nothing stands in its way (the store's
    # claims_in_take): due and claimable, no object (step 3 comes first), no start window (step 2),
    # and pools that all limit nothing (its agent's provider pool among them).
    taken = store().run_take(run_id, worker=worker, now=clock())
    run, attempt = taken.run, taken.attempt
    # Known only where the same statement claimed the run: a first attempt then reads no checkpoints.
    checkpoints_none = attempt is not None and taken.checkpoints is False
    # The store returns an attempt only with its run, so a missing run is not ours either.
    if run is None or (attempt is None and (run.state not in TaskRun.CLAIMABLE or run.run_after > clock())):
        # Not due: it must not take an object lease, a pool slot or a rate token meanwhile.
        return ExecuteOutcome(run_id, "not_claimable")
    tracing.run_bind(run)  # its trace and fields on every span and log line below
    gate = admission = None
    released = False
    ttl = timedelta(seconds=run.lease_ttl_seconds)  # the rule's, copied into the run at claim
    try:
        if attempt is not None:
            admission = Admission(run.id, run.fence)
        else:
            if outcome.run_cancel_late(run, now=clock()):
                return ExecuteOutcome(run_id, "start_window_passed")
            gate = object_gate_enter(run=run, worker=worker, ttl=ttl, clock=clock)
            if gate is not None and gate.held is None:
                return ExecuteOutcome(run_id, "object_busy")
            # Plain admission only where run_take did not find a pool that limits something.
            attempt, admission = run_admit(
                run, worker=worker, clock=clock, ttl=ttl, plain=taken.plain is not False and store().plain_admission
            )
            if attempt is None:
                refusal = admission.refusal if admission is not None else None
                if refusal is not None:
                    return ExecuteOutcome(run_id, "pool_wait", str(refusal))
                return ExecuteOutcome(run_id, "not_claimable")
        # Started lazily: its thread exists only once the first renewal (ttl/3) is due.
        renewer = LeaseRenewer(run_id=run.id, fence=run.fence, ttl=ttl, clock=clock, expires_at=run.lease_expires_at)
        renewer.start()
        # With a connection pool, the skill's wait (a model call) holds no connection: each of its
        # writes borrows one, and the outcome takes one again.
        database.connection_release()
        try:
            result, error = _call_skill(
                run, attempt, worker, clock, lost=renewer.lost, checkpoints_none=checkpoints_none
            )
        finally:
            renewer.stop()
        database.connection_refresh()  # the skill may have run for minutes; its connection may be gone
        now = clock()
        if error is None:
            done = outcome.run_succeed(run, attempt, result, now=now, release_worker=worker)
            released = done.released
            return done
        if isinstance(error, RunParked):  # waiting for a human or a budget window, not a failure
            return outcome.run_park(run, attempt, error, now=now)
        # A server's Retry-After travels on the exception (tasks.agents.client.ModelError); the outcome decides.
        hint = getattr(error, "retry_after", None)
        return outcome.run_attempt_failed(run, attempt, classify(error), now=now, draw=rand(), retry_after=hint)
    finally:
        if admission is not None and admission.admitted and not released:
            # Every outcome (success, retry wait, failure, park, fenced, not claimed) frees the slots:
            # a run waiting for a retry holds none (invariant 5).
            pool_release(run_id=run_id, fence=admission.fence, now=clock(), worker=worker)
        if gate is not None:  # the run names an object
            object_gate_exit(gate, now=clock())


@tracing.traced(
    "run.attempt",
    attributes=lambda run, attempt, worker, *_a, **_k: {
        "harness.run_id": run.id,
        "harness.attempt": attempt.number,
        "harness.skill": run.skill,
        "harness.worker": worker,
    },
)
def _call_skill(
    run: TaskRun, attempt: Attempt, worker: str, clock: Clock, *, lost: threading.Event, checkpoints_none: bool
) -> tuple[object, BaseException | None]:
    logger = logging.getLogger(f"harness.skill.{run.skill}")
    ctx = SkillContext(
        run_id=run.id,
        biz_key=run.biz_key,
        fence=run.fence,
        attempt=attempt.number,
        params=run.payload.get("params", {}),
        now=clock(),
        clock=clock,
        logger=logger,
        worker=worker,
        rule_name=run.rule_name,
        agent=run.agent,
        slot=run.slot,
        payload=run.payload,
        fenced=lambda: fenced(run_id=run.id, fence=run.fence, lost=lost),
        lease_lost=lost.is_set,
        runtime=SkillRuntime(checkpoints_none=checkpoints_none),
    )
    try:
        # Least privilege (invariant 8): the executing identity's allow-list is checked at run time too.
        identity_require(identity=run.identity, skill=run.skill)
        return registry.get(run.skill).fn(ctx), None
    except OperationalError:
        # The harness's own database went away (a restart, a session ended): not the skill's failure.
        # Handed back as a lost worker's attempt (runs/jobs.py): its lease runs out, the sweeper retries.
        raise
    except Exception as exc:  # any skill failure becomes a classified attempt outcome
        # A known error kind is expected operation; only an unclassified one needs its traceback.
        logger.warning(
            "run %s attempt %s %s: %s",
            run.id,
            attempt.number,
            "parked" if isinstance(exc, RunParked) else "failed",
            exc,
            exc_info=not isinstance(exc, SkillError | RunParked),
        )
        return None, exc
