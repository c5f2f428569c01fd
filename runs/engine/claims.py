"""Claiming a unit of work: one run per biz_key, ever (invariant 1); shed or coalesced at intake."""

import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from django.db import IntegrityError, transaction

from deadletters.alerts import alert_decisions
from harness_site import tracing
from runs.engine.admission import pool_release
from runs.engine.backpressure import Pressure, pressure_check, pressure_note_admitted
from runs.engine.dispatch import run_send_on_commit
from runs.engine.incidents import incident_unfolded
from runs.engine.store import store
from runs.models import Decision, TaskRun, run_policy_fields
from tasks.models import TriggerRule
from tasks.rules import backpressure, keys
from tasks.rules.policy import RunPolicy
from tasks.skills.sdk import registry

log = logging.getLogger("harness.claims")


@dataclass(frozen=True)
class Work:
    """What one trigger asks to be run, assembled by tasks.triggers.work for every trigger kind.

    `identity` is the executing identity ("" for an unrestricted rule), `object_key` the object the
    run is serialized on ("" for none); `payload` carries the rule's snapshot as it was at trigger
    time, and `policy` its engine policy (copied into the run's columns); `start_by` the latest
    start of a first attempt (the rule's start window), if any.
    `recoverability` is what intake may do with it under backpressure (only "recomputable" is
    shed; operator work is one-time input); `coalesce_window` is set when the trigger replaces its
    object's pending run (rule class "coalesce"): the new run waits that long for newer triggers.
    `trace_id` is the trace the trigger belongs to (harness_site/tracing.py): the current one where
    the work is assembled (the trigger's span, the HTTP request's, the queue message's), else a new one.
    """

    biz_key: str
    skill: str
    source: str
    triggered_by: str
    payload: dict[str, Any] = field(hash=False)
    rule: TriggerRule | None = None  # None: a run from the API or a test, with no rule behind it
    policy: RunPolicy = field(default_factory=RunPolicy)  # the rule's, as it was at trigger time
    identity: str = ""
    object_key: str = ""
    slot: datetime | None = None
    run_after: datetime | None = None
    start_by: datetime | None = None
    is_trial: bool = False
    recoverability: str = backpressure.ONE_TIME_INPUT
    coalesce_window: timedelta | None = None
    trace_id: str = field(default_factory=tracing.trace_id_here, compare=False)

    @property
    def coalesces(self) -> bool:
        return self.coalesce_window is not None and bool(self.object_key) and self.rule is not None


@dataclass(frozen=True)
class ClaimResult:
    """`run` is the run created or found (None only when shed); `decision` the shed decision;
    `replaced` the pending runs this trigger coalesced (each now a coalesced decision)."""

    run: TaskRun | None
    created: bool
    decision: Decision | None = None
    replaced: tuple[TaskRun, ...] = ()

    @property
    def shed(self) -> bool:
        return self.decision is not None

    @property
    def outcome(self) -> "ClaimOutcome":
        if self.decision is not None:
            return ClaimOutcome.SHED
        if not self.created:
            return ClaimOutcome.DEDUPE_HIT
        return ClaimOutcome.COALESCED if self.replaced else ClaimOutcome.CREATED


class ClaimOutcome(StrEnum):
    """What became of one trigger's claim."""

    CREATED = "created"
    COALESCED = "coalesced"  # created, replacing its object's pending run(s)
    DEDUPE_HIT = "dedupe_hit"  # its biz_key had a run: counted on that run
    SHED = "shed"  # recorded as a "shed" decision (recomputable work above the watermark)
    BATCHED = "batched"  # joined the tick's claim batch, which writes and counts it
    DECIDED = "decided"  # no claim: the slot's decision says why (a key that cannot be rendered)


# Concurrent coalescers of one object take turns replacing each other's runs; each turn succeeds
# for one of them, so this bounds a storm of triggers for one object arriving in the same instant.
MAX_COALESCE_TURNS = 50


@tracing.traced(
    "run.claim",
    trace_of=lambda work, **_: work.trace_id,
    attributes=lambda work, **_: {"harness.biz_key": work.biz_key, "harness.source": work.source},
)
def run_claim(work: Work, *, now: datetime, dispatch: bool = True, state: str | None = None) -> ClaimResult:
    """Insert the run for `work`, or count a dedupe hit on the run that already has its biz_key.

    Insert-and-catch-conflict, never check-then-insert: the unique constraint decides the winner
    even across processes. A dedupe hit is acknowledged (returned) and counted, never retried.
    `state` other than pending (awaiting approval) is for runs that must not start on their own.

    1. Recomputable work in a scope above its high watermark is shed: a dedupe hit if its biz_key
       already has a run, else a "shed" decision (runs.engine.backpressure; nothing is inserted).
    2. Coalescing work whose object already has a pending, never-started run replaces it: the old
       run becomes "coalesced" (kept, so its biz_key stays taken) with a decision pointing at the
       new one. The partial unique index run_one_pending_per_object makes the second insert
       conflict, so two concurrent triggers cannot both leave a pending run.
    3. A key outside the rule's namespaces (keys.in_namespace) raises ValueError: keys are scoped by
       construction (tasks.triggers.work), and this is the one door every run comes through.

    No transaction of the caller's is needed: in autocommit a plain claim is one committed INSERT,
    its message sent right after; a caller with more to write (an audit entry, a delivery record)
    wraps the claim in its own, and the message goes on that commit.
    """
    if not keys.in_namespace(work.biz_key, work.rule.pk if work.rule else None):
        raise ValueError(f"biz_key {work.biz_key!r} is outside the namespace of its rule")
    if work.recoverability == backpressure.RECOMPUTABLE:
        pressure = pressure_check(work.rule, now=now)
        if (
            pressure is not None
            and backpressure.intake_verdict(work.recoverability, shedding=True) == backpressure.SHED
        ):
            return _shed(work, pressure, now=now)
    payload = dict(work.payload)
    rule = work.rule
    # A run gated for approval is not coalesced: approving it later must never meet a pending one
    # of its object on the run_one_pending_per_object index.
    coalesces = work.coalesces and state in (None, TaskRun.State.PENDING)
    run_after = work.run_after or now
    if coalesces and work.run_after is None:
        assert work.coalesce_window is not None, "Work.coalesces implies a window"
        run_after = now + work.coalesce_window
    # Marked dispatched in the INSERT itself: no second statement for the hint sent on commit.
    dispatch_now = dispatch and run_after <= now and (state or TaskRun.State.PENDING) == TaskRun.State.PENDING
    fields = _run_fields(work, payload=payload, now=now, state=state, coalesces=coalesces, dispatched=dispatch_now)
    replaced: list[TaskRun] = []
    # A plain claim is one statement and needs no transaction; a coalescing one writes several rows
    # that stand or fall together, so it opens its own (or joins the caller's, adding no savepoint).
    with transaction.atomic(savepoint=False) if coalesces else nullcontext():
        for _turn in range(MAX_COALESCE_TURNS):
            if not coalesces:
                # No savepoint: ON CONFLICT (biz_key) DO NOTHING cannot poison the caller's transaction.
                run = TaskRun(run_after=run_after, **fields)
                if store().runs_insert([run]):
                    break
                found = store().dedupe_hit(work.biz_key)
                if found is not None:
                    return ClaimResult(run=found, created=False)
                continue  # the conflicting row is gone (never in practice): insert again
            try:
                # A savepoint, so the conflict does not poison the caller's transaction.
                run = TaskRun(run_after=run_after, **fields)
                store().run_create(run)
                break
            except IntegrityError:
                found = store().dedupe_hit(work.biz_key)
                if found is not None:
                    return ClaimResult(run=found, created=False)
                if not coalesces:  # the conflict was not on biz_key: a real error
                    raise
                head = _replace_pending(work, now=now)
                if head is not None:
                    replaced.append(head)
                    # The survivor starts no later than the run it replaced would have.
                    run_after = min(run_after, head.run_after)
                    if run_after <= now and dispatch and state in (None, TaskRun.State.PENDING):
                        fields["dispatched_at"], fields["dispatches"] = now, 1
                # None: the pending run started or was replaced meanwhile; insert again.
        else:
            raise RuntimeError(f"could not coalesce {work.biz_key!r} in {MAX_COALESCE_TURNS} turns")
        for head in replaced:
            _record_coalesced(head, survivor=run, work=work, now=now)
    pressure_note_admitted(rule)
    if dispatch and run.run_after <= now and run.state == TaskRun.State.PENDING:
        run_send_on_commit(run_ids=[run.id], dispatched_at=run.dispatched_at or now, queues={run.id: run.queue})
    return ClaimResult(run=run, created=True, replaced=tuple(replaced))


def _run_fields(
    work: Work, *, payload: dict[str, Any], now: datetime, state: str | None, coalesces: bool, dispatched: bool
) -> dict[str, Any]:
    """The new run's fields (TaskRun's keyword arguments)."""
    rule = work.rule
    return {
        "biz_key": work.biz_key,
        "rule": rule,
        "rule_name": rule.name if rule else "",
        "rule_version": rule.version if rule else None,
        "skill": work.skill,
        "source": work.source,
        "triggered_by": work.triggered_by,
        "slot": work.slot,
        "trigger_at": now,
        "payload": payload,
        "start_by": work.start_by,
        **run_policy_fields(work.policy),
        "is_trial": work.is_trial,
        "identity": work.identity,
        "object_key": work.object_key,
        "coalesces": coalesces,
        "state": state or TaskRun.State.PENDING,
        "dispatched_at": now if dispatched else None,
        "dispatches": 1 if dispatched else 0,  # messages sent for the run (runs/engine/sweeper.py counts re-sends)
        "trace_id": work.trace_id,
        "queue": (rule.queue if rule else "") or registry.queue_of(work.skill),
    }


@dataclass
class ClaimCounts:
    """What a claim batch wrote: runs created, dedupe hits counted, decisions recorded."""

    claimed: int = 0
    dedupe_hits: int = 0
    decisions: int = 0


class ClaimTally(Protocol):
    """Where a slot's claim is counted: ClaimCounts, or a tick's result (which also counts rules)."""

    claimed: int
    dedupe_hits: int
    decisions: int


class ClaimBatch:
    """Claims and slot decisions of one tick, written together: one multi-row INSERT ... ON CONFLICT
    (biz_key) DO NOTHING RETURNING, one UPDATE counting the dedupe hits, one dispatch on commit (one
    producer), and one multi-row INSERT of the decisions.

    The tick passes it down explicitly (`claim_batch`) and reads `counts` once it is flushed. Only
    plain work joins (`claim`): pending, dispatched, not coalescing, not subject to shedding, of a
    rule without an overlap guard. The unique index still decides every key (invariant 1): a key
    taken before, or by an earlier slot of the same batch, is a counted dedupe hit exactly as in
    run_claim. Any other claim flushes the batch first, so it sees every run claimed before it.
    """

    MAX_ROWS = 500  # per statement: well inside PostgreSQL's and SQLite's parameter limits

    def __init__(self, *, now: datetime) -> None:
        self.now = now
        self.counts = ClaimCounts()
        self._runs: list[TaskRun] = []
        self._decisions: list[Decision] = []

    @staticmethod
    def accepts(work: Work, *, dispatch: bool, state: str | None) -> bool:
        # An overlap guard counts the rule's active runs before each slot: those are claimed at once.
        return (
            dispatch
            and state in (None, TaskRun.State.PENDING)
            and not work.coalesces
            and work.recoverability != backpressure.RECOMPUTABLE
            and (work.rule is None or work.rule.overlap == TriggerRule.Overlap.ALLOW)
        )

    def claim(self, work: Work, *, dispatch: bool = True, state: str | None = None) -> bool:
        """Join the batch if the work is plain (True); else flush, so the caller's own claim sees
        every run claimed before it, and return False."""
        if not self.accepts(work, dispatch=dispatch, state=state):
            self.flush()
            return False
        if not keys.in_namespace(work.biz_key, work.rule.pk if work.rule else None):
            raise ValueError(f"biz_key {work.biz_key!r} is outside the namespace of its rule")
        run_after = work.run_after or self.now
        fields = _run_fields(
            work,
            payload=dict(work.payload),
            now=self.now,
            state=None,
            coalesces=False,
            dispatched=run_after <= self.now,
        )
        self._runs.append(TaskRun(run_after=run_after, **fields))
        if len(self._runs) >= self.MAX_ROWS:
            self.flush()
        return True

    def decide(self, decision: Decision) -> None:
        """Record a slot's decision with the batch."""
        self._decisions.append(decision)
        if len(self._decisions) >= self.MAX_ROWS:
            self._flush_decisions()

    def flush(self) -> None:
        self._flush_decisions()
        runs, self._runs = self._runs, []
        if not runs:
            return
        created = store().runs_insert(runs)
        taken: dict[str, int] = {}
        for run in runs:
            if run.pk is None:
                taken[run.biz_key] = taken.get(run.biz_key, 0) + 1
        if taken:
            store().dedupe_hits_add(taken)
        for run in created:
            pressure_note_admitted(run.rule)
        sent = [r for r in created if r.dispatched_at is not None]
        run_send_on_commit(
            run_ids=[r.id for r in sent],
            dispatched_at=self.now,
            traces={r.id: r.trace_id for r in sent},
            queues={r.id: r.queue for r in sent},
        )
        self.counts.claimed += len(created)
        self.counts.dedupe_hits += sum(taken.values())

    def _flush_decisions(self) -> None:
        pending, self._decisions = self._decisions, []
        if not pending:
            return
        # One per (rule, slot), decided by decision_one_per_slot: another tick's decision stands.
        created = store().decisions_insert(pending)
        # Their alerts (outbox rows) in one batch, only for decisions written now, never another tick's;
        # a slot missed inside a scheduler outage is the outage's page, not one of its own.
        alert_decisions(incident_unfolded(created), now=self.now)
        self.counts.decisions += len(created)


@contextmanager
def claim_batch(*, now: datetime) -> Iterator[ClaimBatch]:
    """A batch for the claims and decisions the caller passes it, written together on exit (an
    exception discards them with the caller's transaction)."""
    batch = ClaimBatch(now=now)
    yield batch
    batch.flush()


def _replace_pending(work: Work, *, now: datetime) -> TaskRun | None:
    """Take the object's pending, never-started run out of the way: state coalesced, in the
    caller's transaction. Locked first, so a worker's compare-and-set claim and this update
    cannot both succeed: a run that started is never replaced."""
    assert work.rule is not None, "Work.coalesces implies a rule"
    head = store().coalesce_pending(rule_id=work.rule.pk, object_key=work.object_key, now=now)
    if head is not None:
        # It may have been waiting for pool capacity (its waiter row went with it), or just been
        # handed a slot: a handed slot goes to the next waiting run now, not in 30 s.
        # A handed slot is for the attempt it would have started: fence + 1 (runs/engine/admission.py).
        pool_release(run_id=head.pk, fence=head.fence + 1, now=now)
    return head


def _record_coalesced(head: TaskRun, *, survivor: TaskRun, work: Work, now: datetime) -> None:
    """The replaced run's decision points at the run that replaced it. A longer chain is followed
    when asked (runs.desk.selectors.run_coalesced_into), not rewritten here: repointing every earlier
    decision would cost each trigger of a busy object a write per trigger before it."""
    assert work.rule is not None, "Work.coalesces implies a rule"
    store().run_note(head.pk, last_error=f"coalesced into run {survivor.id} ({survivor.biz_key})")
    details = {
        "run_id": head.id,
        "slot": head.slot.isoformat() if head.slot else None,
        "object_key": head.object_key,
        "source": head.source,
        "triggered_at": head.trigger_at.isoformat(),
        "survivor_run_id": survivor.id,
        "survivor_biz_key": survivor.biz_key,
        "survivor_source": work.source,
        "window_seconds": work.coalesce_window.total_seconds() if work.coalesce_window else 0,
    }
    decision = Decision(
        rule=work.rule,
        slot=None,
        biz_key=head.biz_key,
        reason=Decision.Reason.COALESCED,
        details=details,
        survivor=survivor,
        created_at=now,
    )
    # replace: the trigger was shed once before it got its run; the decision now says coalesced.
    store().decision_record(decision, replace=True)


def _shed(work: Work, pressure: Pressure, *, now: datetime) -> ClaimResult:
    """Record a shed trigger: a slot's decision by (rule, slot), an event's by (rule, biz_key).

    A trigger whose biz_key already has a run is a dedupe hit, not shed: nothing is inserted here,
    so reading first cannot break invariant 1.
    """
    found = store().dedupe_hit(work.biz_key)
    if found is not None:
        return ClaimResult(run=found, created=False)
    details = {
        **pressure.as_details(),
        "recoverability": work.recoverability,
        "source": work.source,
        "triggered_by": work.triggered_by,
        "biz_key": work.biz_key,
    }
    # A slot's decision is keyed by (rule, slot): a key template without {slot} may give two slots
    # one key, so the slot is the identity. An event's by (rule, biz_key). The same slot (another
    # tick) or the same business event (a resend) decided already counts one more hit.
    decision = store().decision_record(
        Decision(
            rule=work.rule,
            slot=work.slot,
            biz_key="" if work.slot is not None else work.biz_key,
            reason=Decision.Reason.SHED,
            details=details,
            created_at=now,
        ),
        replace=False,
    )
    log.info("shed %s (%s) at %d pending in %s", work.biz_key, work.source, pressure.pending, pressure.pool)
    return ClaimResult(run=None, created=False, decision=decision)
