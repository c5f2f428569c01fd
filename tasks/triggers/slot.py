"""Slot services: evaluate one due slot against its rule's guards and act on the verdict.

The verdict comes from tasks.rules.evaluation (pure); this module does the I/O inside the tick's
transaction: claim a run, hold the slot (readiness wait, overlap buffer), or record a decision.
A held slot is re-checked by every tick at its recheck_at (hold_due_idx) until it becomes a run
or a decision; resolving deletes the hold in the same transaction (invariant 3).
"""

import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Max

from deadletters.alerts import alert_decisions, alert_slot_expired
from harness_site import tracing
from runs.engine.claims import ClaimBatch, ClaimOutcome, ClaimTally, run_claim
from runs.engine.incidents import incident_unfolded
from runs.engine.outcome import run_fail
from runs.engine.store import store
from runs.models import Decision, SlotHold, TaskRun
from tasks.models import ReadinessFlag, TriggerRule
from tasks.rules import catchup, evaluation, keys, schedule
from tasks.rules import explain as explained
from tasks.rules.guards import rule_guards
from tasks.rules.spread import Spread
from tasks.sentences import error_text
from tasks.skills.errors import ClassifiedError
from tasks.skills.sdk import ErrorKind
from tasks.triggers.work import rule_flag_scope, slot_spread, slot_values, work_for_slot

log = logging.getLogger("harness.scheduler")

HOLD_BATCH = 200
# Runs of a rule that still count as "active" for the overlap policy (not trials).
ACTIVE_STATES = (
    TaskRun.State.PENDING,
    TaskRun.State.RUNNING,
    TaskRun.State.WAITING_RETRY,
    TaskRun.State.AWAITING_APPROVAL,
)


def slot_facts(rule: TriggerRule, slot: datetime, *, hold: SlotHold | None = None) -> evaluation.Facts:
    """Look up what the guards need to know about this slot now."""
    missing: tuple[str, ...] = ()
    if rule.depends_on:
        scope = rule_flag_scope(rule, values=slot_values(rule, slot))
        present = set(
            ReadinessFlag.objects.filter(name__in=rule.depends_on, scope=scope).values_list("name", flat=True)
        )
        missing = tuple(n for n in rule.depends_on if n not in present)
    active = 0
    buffered = False
    if rule.overlap != TriggerRule.Overlap.ALLOW:
        # Served by run_rule_recent_idx (rule first).
        active = TaskRun.objects.filter(rule=rule, state__in=ACTIVE_STATES, is_trial=False).count()
        buffered = SlotHold.objects.filter(rule=rule, reason=SlotHold.Reason.OVERLAP).exclude(slot=slot).exists()
    return evaluation.Facts(
        missing=missing, active_runs=active, buffered=buffered, held_as=hold.reason if hold else None
    )


def slot_handle(
    rule: TriggerRule,
    slot: datetime,
    *,
    source: str,
    now: datetime,
    result: ClaimTally,
    run_after: datetime | None = None,
    approval: bool = False,
    hold: SlotHold | None = None,
    batch: ClaimBatch | None = None,
) -> str:
    """Evaluate the slot and act; returns the verdict's action. Call inside a transaction.

    `run_after` is the earliest start the caller wants (catch-up pacing); `approval` makes the run
    wait for an operator (catch-up above the rule's threshold); `hold` is the slot's own hold row
    when the tick re-checks it; `batch` the tick's claim batch, which plain claims and decisions join.
    """
    try:
        guards = rule_guards(rule)
        facts = slot_facts(rule, slot, hold=hold)
        spread_used, offset = slot_spread(rule, slot, draw=random.random())
    except (evaluation.GuardError, keys.KeyTemplateError, KeyError, ValueError) as exc:
        # A rule saved around full_clean (shell, fixture): say so for this slot, never drop it or stop the tick.
        _release(hold)
        _invalid_rule(rule, slot, exc, now=now, result=result, batch=batch)
        return evaluation.DECIDE
    verdict = evaluation.evaluate_slot(guards, slot, now=now, facts=facts, spread=offset)
    details = {**verdict.details, "source": source}
    if verdict.action == evaluation.HOLD:
        _hold(rule, slot, verdict, source=source, now=now, hold=hold)
        return verdict.action
    _release(hold)
    if hold is not None:
        details["held_since"] = hold.created_at.isoformat()
        details["checks"] = hold.checks + 1
    if verdict.action == evaluation.RUN:
        if hold is not None and source == TaskRun.Source.CATCHUP and run_after is None:
            # A held catch-up slot that became ready is paced like the tick's catch-up runs.
            spacing = timedelta(seconds=rule.catchup_spacing_seconds)
            last = catchup_last_start(rule, now=now, spacing=spacing)
            run_after = catchup.pace([slot], now=now, spacing=spacing, last=last)[slot]
        start = max(verdict.run_after or now, run_after or now)
        # A day the calendar has no data for is recorded on the run; an uncertain one may wait for approval.
        calendar = verdict.details.get("calendar")
        held = explained.held_gates(approval=approval, calendar=calendar)
        slot_claim(
            rule,
            slot,
            source=source,
            now=now,
            result=result,
            run_after=start,
            state=TaskRun.State.AWAITING_APPROVAL if held else None,
            batch=batch,
            spread_used=spread_used,
            calendar=calendar,
            held=held,
        )
    elif verdict.action == evaluation.FAIL:
        _fail_slot(rule, slot, source=source, details=details, now=now, result=result, batch=batch)
    else:
        slot_decide(rule, slot, reason=verdict.reason, details=details, now=now, result=result, batch=batch)
        if verdict.reason == evaluation.NOT_READY_EXPIRED:
            # Recorded in the decision's transaction (an outbox row); logged and sent after commit.
            alert_slot_expired(rule_name=rule.name, slot=slot, missing=verdict.details.get("missing", []), now=now)
    return verdict.action


def catchup_last_start(rule: TriggerRule, *, now: datetime, spacing: timedelta) -> datetime | None:
    """The latest start scheduled for a catch-up run of this rule, so pacing continues after it
    across ticks (catchup.pace). Runs gated for approval or cancelled do not count (approval paces
    them again); one that started at least `spacing` ago cannot hold the next one back."""
    if not spacing:
        return None
    # Served by run_rule_recent_idx (rule first).
    last: datetime | None = (
        TaskRun.objects.filter(rule=rule, source=TaskRun.Source.CATCHUP, run_after__gt=now - spacing)
        .exclude(state__in=(TaskRun.State.AWAITING_APPROVAL, TaskRun.State.CANCELLED))
        .aggregate(last=Max("run_after"))["last"]
    )
    return last


def _hold(
    rule: TriggerRule, slot: datetime, verdict: evaluation.Verdict, *, source: str, now: datetime, hold: SlotHold | None
) -> None:
    recheck_at = verdict.recheck_at
    if recheck_at is None:  # evaluation gives every HOLD verdict its re-check instant
        raise ValueError(f"a hold ({verdict.reason}) without a re-check instant")
    if hold is not None:
        store().hold_recheck(hold.pk, recheck_at=recheck_at, checks=hold.checks + 1, details=verdict.details)
        return
    # False: another tick holds this slot already; it will be re-checked once.
    store().hold_record(
        SlotHold(
            rule=rule,
            slot=slot,
            reason=verdict.reason,
            source=source,
            recheck_at=recheck_at,
            deadline=verdict.deadline,
            details=verdict.details,
            created_at=now,
        )
    )


def _release(hold: SlotHold | None) -> None:
    if hold is not None:
        store().hold_release(hold.pk)


def _fail_slot(
    rule: TriggerRule,
    slot: datetime,
    *,
    source: str,
    details: dict[str, Any],
    now: datetime,
    result: ClaimTally,
    batch: ClaimBatch | None,
) -> None:
    """Readiness policy "fail": the slot becomes a failed run with a dead-letter ticket, so it is
    visible on the desk and replayable (with the same biz_key) once the data is there."""
    claimed = slot_claim(rule, slot, source=source, now=now, result=result, dispatch=False, batch=batch)
    if claimed.outcome != ClaimOutcome.CREATED:
        return
    run = claimed.run
    assert run is not None  # created: a run was inserted
    message = "dependencies not ready at fire time: " + ", ".join(details.get("missing", []))
    error = ClassifiedError(kind=ErrorKind.STATE_PRECONDITION, message=message, digest="not-ready")
    # Not yet committed, so no worker can have taken it: it fails from pending, never started.
    run_fail(run, error=error, reason="readiness policy is fail", now=now, from_states=(TaskRun.State.PENDING,))


def holds_process(*, now: datetime, result: ClaimTally) -> int:
    """Re-check every hold that is due. Holds are taken with SKIP LOCKED so concurrent ticks split them."""
    done = 0
    while True:
        with transaction.atomic():
            # hold_list_due: served by hold_due_idx. The join locks the rule row too, so a hold is never
            # re-checked while another tick evaluates the same rule (overlap counts stay exact).
            holds = list(
                SlotHold.objects.select_for_update(skip_locked=True)
                .filter(recheck_at__lte=now)
                .select_related("rule")
                .order_by("recheck_at")[:HOLD_BATCH]
            )
            for hold in holds:
                _recheck(hold, now=now, result=result)
        done += len(holds)
        if len(holds) < HOLD_BATCH:
            return done


def _recheck(hold: SlotHold, *, now: datetime, result: ClaimTally) -> None:
    rule = hold.rule
    if not rule.enabled:
        _release(hold)
        slot_decide(
            rule,
            hold.slot,
            reason=Decision.Reason.PAUSED,
            details={"why": "rule paused while the slot was held", "held_as": hold.reason},
            now=now,
            result=result,
        )
        return
    slot_handle(rule, hold.slot, source=hold.source, now=now, result=result, hold=hold)


# At most this many "paused" decisions per resume; a longer pause is summarised on the last one.
MAX_PAUSED_DECISIONS = 1000


def record_paused_slots(
    rule: TriggerRule, *, since: datetime, until: datetime, due_from: datetime | None = None
) -> int:
    """One "paused" decision per slot the rule skipped while switched off (bounded): on resume, the
    slots after `since` (the pause) up to `until` (the resume); on pause, with `due_from` (the next
    fire the rule had, already due), the slots from it up to the pause that no tick had claimed yet."""
    if rule.kind in (TriggerRule.Kind.HEARTBEAT, "event"):
        return 0
    try:
        after = since if due_from is None else due_from
        slots = schedule.slots_between(rule.schedule_spec(), after, until, limit=MAX_PAUSED_DECISIONS + 1)
    except (schedule.ScheduleError, ValueError):
        return 0
    details: dict[str, object]
    if due_from is None:
        details = {"paused_at": since.isoformat(), "resumed_at": until.isoformat()}
    else:
        slots = [due_from, *slots][: MAX_PAUSED_DECISIONS + 1]
        details = {"paused_at": since.isoformat(), "due_when_paused": True}
    rows = [
        Decision(rule=rule, slot=s, reason=Decision.Reason.PAUSED, details=details, created_at=until)
        for s in slots[:MAX_PAUSED_DECISIONS]
    ]
    if len(slots) > MAX_PAUSED_DECISIONS:
        rows[-1].details = {**details, "truncated": f"only the first {MAX_PAUSED_DECISIONS} paused slots are recorded"}
    # A slot that already has a decision (a held slot resolved as paused) keeps it.
    store().decisions_insert(rows)
    return len(rows)


@dataclass(frozen=True)
class SlotClaimed:
    """What slot_claim did with a slot; `run` is the run it created (None otherwise)."""

    outcome: ClaimOutcome
    run: TaskRun | None = None


# Every slot is a trigger of its own: a new trace, whichever tick (or catch-up, heartbeat, held slot) claims it.
@tracing.traced(
    "trigger.slot",
    new_trace=True,
    attributes=lambda rule, slot, *, source, **_: {
        "harness.rule": rule.name,
        "harness.slot": slot.isoformat(),
        "harness.source": source,
    },
)
def slot_claim(
    rule: TriggerRule,
    slot: datetime,
    *,
    source: str,
    now: datetime,
    result: ClaimTally,
    run_after: datetime | None = None,
    state: str | None = None,
    dispatch: bool = True,
    batch: ClaimBatch | None = None,
    spread_used: Spread | None = None,
    calendar: dict[str, Any] | None = None,
    held: list[str] | None = None,
) -> SlotClaimed:
    """Claim the slot's run and say what became of it: created (with the run), a dedupe hit, shed
    by backpressure (run_claim records a "shed" decision), joined to `batch` (which writes and
    counts it), or decided (a rule whose key cannot be rendered: an invalid_rule decision).
    `calendar`: what the business calendar said of a day it has no data for, kept in the payload;
    `held`: the gates holding the run for approval (tasks.rules.explain.held_gates), kept too."""
    try:
        work = work_for_slot(rule, slot, source=source, run_after=run_after, spread_used=spread_used)
        if calendar:
            work.payload["calendar"] = calendar
        if held:
            work.payload["held"] = held
    except (keys.KeyTemplateError, KeyError, ValueError) as exc:
        # Never drop a slot silently: the rule cannot be evaluated, so say so for this slot.
        log.error("rule %s slot %s: cannot render business key: %s", rule.name, slot, exc)
        _invalid_rule(rule, slot, exc, now=now, result=result, batch=batch)
        return SlotClaimed(ClaimOutcome.DECIDED)
    if batch is not None and batch.claim(work, dispatch=dispatch, state=state):
        return SlotClaimed(ClaimOutcome.BATCHED)
    claim = run_claim(work, now=now, dispatch=dispatch, state=state)
    outcome = claim.outcome
    if outcome == ClaimOutcome.SHED:  # the slot's decision says so (invariant 3)
        result.decisions += 1
    elif outcome == ClaimOutcome.DEDUPE_HIT:
        result.dedupe_hits += 1
    else:
        result.claimed += 1
    return SlotClaimed(outcome, claim.run if claim.created else None)


def _invalid_rule(
    rule: TriggerRule, slot: datetime, exc: Exception, *, now: datetime, result: ClaimTally, batch: ClaimBatch | None
) -> None:
    details = {"error": error_text(exc)}
    slot_decide(rule, slot, reason=Decision.Reason.INVALID_RULE, details=details, now=now, result=result, batch=batch)


def slot_decide(
    rule: TriggerRule,
    slot: datetime,
    *,
    reason: str,
    details: dict[str, Any],
    now: datetime,
    result: ClaimTally,
    batch: ClaimBatch | None = None,
) -> None:
    """Record why the slot did not run (invariant 3): one decision per (rule, slot). With the
    tick's claim batch it is written with the batch's decisions, which count it."""
    decision = Decision(rule=rule, slot=slot, reason=reason, details=details, created_at=now)
    if batch is not None:
        batch.decide(decision)
        return
    with transaction.atomic():
        if not store().decisions_insert([decision]):
            return  # another tick recorded this slot's decision already
        # An outbox row, with the decision written now; none for a slot inside a scheduler outage.
        alert_decisions(incident_unfolded([decision]), now=now)
    result.decisions += 1
