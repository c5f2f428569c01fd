"""The scheduler tick: due rules → slots → runs or decisions (invariants 1, 3, 7)."""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from runs.engine.claims import ClaimBatch, ClaimCounts, claim_batch
from runs.engine.incidents import incident_close, incident_scheduler_gap
from runs.engine.outages import scheduler_tick_record, slot_grace
from runs.engine.store import store
from runs.models import Decision, TaskRun
from tasks.models import TriggerRule
from tasks.rules import catchup, schedule
from tasks.triggers import heartbeat
from tasks.triggers import slot as slot_service

log = logging.getLogger("harness.scheduler")

RULE_BATCH = 100
SCHEDULER_SOURCE = "scheduler"


@dataclass
class TickResult:
    rules: int = 0
    claimed: int = 0
    dedupe_hits: int = 0
    decisions: int = 0

    def add(self, counts: ClaimCounts) -> None:
        self.claimed += counts.claimed
        self.dedupe_hits += counts.dedupe_hits
        self.decisions += counts.decisions


def scheduler_tick(*, now: datetime, max_slots: int | None = None) -> TickResult:
    """Claim every due slot of every due rule. Safe to run from many beats at once.

    Rules are taken with SKIP LOCKED so concurrent ticks split them; a slot claimed twice anyway
    (a tick that read the rule just before another advanced it) is a counted dedupe hit.
    """
    max_slots = max_slots or settings.HARNESS["MAX_SLOTS_PER_TICK"]
    result = TickResult()
    # After a gap longer than the stall period this tick ends an outage: the slots it finds missed are
    # written inside the incident (paged once, by it), which is closed once they are.
    outage = incident_scheduler_gap(now=now, name=SCHEDULER_SOURCE)
    # Held slots first (readiness waits, overlap buffers): a slot that became ready runs this tick.
    slot_service.holds_process(now=now, result=result)
    while True:
        with transaction.atomic():
            # rule_list_due: served by rule_due_idx; O(due rules), not O(rules).
            rules = list(
                TriggerRule.objects.select_for_update(skip_locked=True)
                .filter(enabled=True, next_fire_at__lte=now)
                .order_by("next_fire_at")
                .prefetch_related("pools")[:RULE_BATCH]  # each slot's spread may be its pools' default
            )
            advanced: list[TriggerRule] = []
            # Plain claims of the whole batch are written together (one INSERT, one dispatch).
            with claim_batch(now=now) as batch:
                for rule in rules:
                    _tick_rule(rule, now=now, max_slots=max_slots, result=result, advanced=advanced, batch=batch)
            result.add(batch.counts)
            # One UPDATE for the batch's next_fire_at; before commit, so the next batch skips them.
            store().rules_advance(advanced)
            result.rules += len(rules)
        if len(rules) < RULE_BATCH:
            break
    # The last tick, and an outage row when no tick ran for longer than the grace before this one.
    scheduler_tick_record(now=now, claimed=result.claimed, dedupe_hits=result.dedupe_hits, name=SCHEDULER_SOURCE)
    if outage is not None:
        incident_close(outage, ended_at=now, now=now)
    return result


# A tick looks this far past its wake-up for the next due slot (at most one second, and less than the
# beat interval, so the next wake-up is not held back): it sleeps to that instant and ticks again.
MAX_LOOKAHEAD = timedelta(seconds=1)
MAX_INSTANT_TICKS = 100  # distinct instants within one lookahead: a bound, never reached by a sane schedule


def scheduler_tick_until_next_wakeup(*, clock, sleep, max_slots: int | None = None) -> TickResult:
    """Tick now; then, for each slot due before the next beat wake-up, sleep to its exact instant
    and tick again. Without it a slot waits for the beat's arbitrary phase against the second
    (up to a whole tick interval late); with it a 1 s tick starts slots on their instant.

    `clock` returns the current time, `sleep` takes seconds (tests pass fakes). Each tick is the
    ordinary idempotent scheduler_tick, so a sleeping tick and another beat's tick dedupe.
    """
    started = clock()
    lookahead = min(MAX_LOOKAHEAD, timedelta(seconds=settings.HARNESS["TICK_SECONDS"]) * 0.9)
    total = scheduler_tick(now=started, max_slots=max_slots)
    for _ in range(MAX_INSTANT_TICKS):
        now = clock()
        # rule_list_due's index (rule_due_idx): the earliest next_fire_at, one row.
        upcoming = (
            TriggerRule.objects.filter(enabled=True, next_fire_at__isnull=False)
            .order_by("next_fire_at")
            .values_list("next_fire_at", flat=True)
            .first()
        )
        if upcoming is None or upcoming > started + lookahead:
            return total
        if upcoming > now:
            sleep((upcoming - now).total_seconds())
        result = scheduler_tick(now=max(clock(), upcoming), max_slots=max_slots)
        for name in ("rules", "claimed", "dedupe_hits", "decisions"):
            setattr(total, name, getattr(total, name) + getattr(result, name))
        if not result.rules:  # taken by another beat's tick meanwhile (or paused): nothing left here
            return total
    return total


def _tick_rule(
    rule: TriggerRule,
    *,
    now: datetime,
    max_slots: int,
    result: TickResult,
    advanced: list[TriggerRule],
    batch: ClaimBatch,
) -> None:
    if rule.kind == TriggerRule.Kind.HEARTBEAT:
        heartbeat.heartbeat_tick(rule, now=now, result=result, batch=batch)
        return
    spec = rule.schedule_spec()
    first = rule.next_fire_at
    assert first is not None and first <= now
    later = schedule.slots_between(spec, first, now, limit=max_slots)
    slots = [first, *later][:max_slots]
    complete = len(later) < max_slots
    plans = catchup.plan_due_slots(
        slots,
        now=now,
        catchup=rule.catchup,
        max_delay=timedelta(seconds=rule.catchup_max_delay_seconds),
        grace=slot_grace(),
        complete=complete,
        max_count=rule.catchup_max_count,
        later=None if complete else _late_after(rule, spec, slots[-1], now=now),
    )
    # Catch-up runs are paced (run_after spaced, continuing after the ones earlier ticks scheduled)
    # and, above the threshold, wait for approval.
    late = sum(1 for p in plans if p.action != catchup.RUN)
    chosen = [p.slot for p in plans if p.action == catchup.CATCHUP]
    spacing = timedelta(seconds=rule.catchup_spacing_seconds)
    paced = catchup.pace(
        chosen,
        now=now,
        spacing=spacing,
        last=slot_service.catchup_last_start(rule, now=now, spacing=spacing) if chosen else None,
    )
    approval = catchup.needs_approval(late, threshold=rule.catchup_approval_threshold)
    for plan in plans:
        if plan.action in (catchup.RUN, catchup.CATCHUP):
            source = TaskRun.Source.SCHEDULER if plan.action == catchup.RUN else TaskRun.Source.CATCHUP
            # Guards (calendar, hours, window, readiness, overlap) may still turn it into a hold or a decision.
            slot_service.slot_handle(
                rule,
                plan.slot,
                source=source,
                now=now,
                result=result,
                run_after=paced.get(plan.slot),
                approval=approval and plan.action == catchup.CATCHUP,
                batch=batch,
            )
        else:
            reason = {
                catchup.MISSED: Decision.Reason.MISSED,
                catchup.SUPERSEDED: Decision.Reason.SUPERSEDED,
                catchup.CAPPED: Decision.Reason.CATCHUP_CAPPED,
            }[plan.action]
            details = {
                "late_seconds": round((now - plan.slot).total_seconds(), 3),
                "catchup": rule.catchup,
                "max_delay_seconds": rule.catchup_max_delay_seconds,
                "max_count": rule.catchup_max_count,
            }
            slot_service.slot_decide(
                rule, plan.slot, reason=reason, details=details, now=now, result=result, batch=batch
            )
    # Catch-up "all" under a cap may plan only a prefix (catchup._plan_all): the rest is the next tick's.
    last = plans[-1].slot
    rule.last_slot_at, rule.next_fire_at = last, schedule.next_slot(spec, last)
    advanced.append(rule)


def _late_after(rule: TriggerRule, spec, after: datetime, *, now: datetime) -> int | None:
    """For catch-up "all" under a cap: how many late slots follow a cut batch up to now, counted up
    to the cap (the planner needs no more), so the cap counts the whole outage, not each batch."""
    if rule.catchup != TriggerRule.CatchUp.ALL or not rule.catchup_max_count:
        return None
    # Late means older than the grace: slot < now - grace; instants have microsecond resolution.
    until = now - slot_grace() - timedelta(microseconds=1)
    return len(schedule.slots_between(spec, after, until, limit=rule.catchup_max_count))
