"""The scheduler tick: due rules → slots → runs or decisions (invariants 1, 3, 7)."""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction

from runs.claims import run_claim
from runs.models import Decision, SchedulerTick, TaskRun
from tasks.models import TriggerRule
from tasks.rules import catchup, keys, schedule
from tasks.rules.guards import rule_object_key, rule_snapshot
from tasks.triggers.slot import key_values

log = logging.getLogger("harness.scheduler")

RULE_BATCH = 100
# A slot claimed within this long of its instant is on time; later ones follow the catch-up policy.
ON_TIME_GRACE = timedelta(seconds=10)
SCHEDULER_SOURCE = "scheduler"


@dataclass
class TickResult:
    rules: int = 0
    claimed: int = 0
    dedupe_hits: int = 0
    decisions: int = 0


def scheduler_tick(*, now: datetime, max_slots: int | None = None) -> TickResult:
    """Claim every due slot of every due rule. Safe to run from many beats at once.

    Rules are taken with SKIP LOCKED so concurrent ticks split them; a slot claimed twice anyway
    (a tick that read the rule just before another advanced it) is a counted dedupe hit.
    """
    max_slots = max_slots or settings.HARNESS["MAX_SLOTS_PER_TICK"]
    result = TickResult()
    from tasks.triggers.slot import holds_process

    # Held slots first (readiness waits, overlap buffers): a slot that became ready runs this tick.
    holds_process(now=now, result=result)
    while True:
        with transaction.atomic():
            # rule_list_due: served by rule_due_idx; O(due rules), not O(rules).
            rules = list(
                TriggerRule.objects.select_for_update(skip_locked=True)
                .filter(enabled=True, next_fire_at__lte=now)
                .order_by("next_fire_at")[:RULE_BATCH]
            )
            for rule in rules:
                _tick_rule(rule, now=now, max_slots=max_slots, result=result)
            result.rules += len(rules)
        if len(rules) < RULE_BATCH:
            break
    SchedulerTick.objects.update_or_create(
        name=SCHEDULER_SOURCE,
        defaults={"last_tick_at": now, "last_claimed": result.claimed, "last_dedupe_hits": result.dedupe_hits},
    )
    return result


def _tick_rule(rule: TriggerRule, *, now: datetime, max_slots: int, result: TickResult) -> None:
    from tasks.triggers import slot as slot_service

    if rule.kind == TriggerRule.Kind.HEARTBEAT:
        slot_service.heartbeat_tick(rule, now=now, result=result)
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
        grace=ON_TIME_GRACE,
        complete=complete,
        max_count=rule.catchup_max_count,
    )
    # Catch-up runs are paced (run_after spaced) and, above the threshold, wait for approval.
    late = sum(1 for p in plans if p.action != catchup.RUN)
    paced = catchup.pace(
        [p.slot for p in plans if p.action == catchup.CATCHUP],
        now=now,
        spacing=timedelta(seconds=rule.catchup_spacing_seconds),
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
            _record_decision(rule, plan.slot, reason=reason, details=details, now=now, result=result)
    last = slots[-1]
    TriggerRule.objects.filter(pk=rule.pk).update(last_slot_at=last, next_fire_at=schedule.next_slot(spec, last))


def rule_identity(rule: TriggerRule) -> str:
    """The executing identity a run records (and the executor re-checks); "" for an unrestricted rule."""
    return rule.identity.name if rule.identity_id else ""


def rule_render_key(rule: TriggerRule, slot: datetime) -> str:
    spec = rule.schedule_spec()
    return keys.render(
        rule.dedupe_key_template,
        rule=rule.name,
        slot=schedule.slot_label(spec, slot),
        business_date=schedule.business_date(spec, slot).isoformat(),
        params=rule.params,
    )


def rule_payload(rule: TriggerRule, slot: datetime | None) -> dict:
    """What the run keeps from the rule at trigger time, so later edits do not change it."""
    payload = {
        "params": rule.params,
        "policy": rule.retry_policy(),
        "rule_version": rule.version,
        "snapshot": rule_snapshot(rule),
    }
    if slot is not None:
        payload["slot_local"] = schedule.slot_label(rule.schedule_spec(), slot)
    if rule.agent_id is not None:  # the model binding and output contract, as they were when triggered
        payload["agent"] = rule.agent.name
        payload["output_schema"] = rule.output_schema
    return payload


def _claim_slot(
    rule, slot, *, source, triggered_by, now, result: TickResult, run_after=None, state=None, dispatch=True
):
    """Claim the slot's run; returns the run when this call created it, else None."""
    try:
        biz_key = rule_render_key(rule, slot)
        object_key = rule_object_key(rule, values=key_values(rule, slot))
    except (keys.KeyTemplateError, KeyError, ValueError) as exc:
        # Never drop a slot silently: the rule cannot be evaluated, so say so for this slot.
        log.error("rule %s slot %s: cannot render business key: %s", rule.name, slot, exc)
        _record_decision(
            rule, slot, reason=Decision.Reason.INVALID_RULE, details={"error": str(exc)}, now=now, result=result
        )
        return
    claim = run_claim(
        biz_key=biz_key,
        rule=rule,
        skill=rule.skill,
        source=source,
        triggered_by=triggered_by,
        slot=slot,
        now=now,
        payload=_with_start_by(rule_payload(rule, slot), rule, slot),
        run_after=run_after,
        dispatch=dispatch,
        identity=rule_identity(rule),
        object_key=object_key,
        state=state,
    )
    if claim.created:
        result.claimed += 1
        return claim.run
    result.dedupe_hits += 1
    return None


def _with_start_by(payload: dict, rule: TriggerRule, slot: datetime) -> dict:
    """Scheduled runs carry their start window, so the executor can refuse to start them too late."""
    if rule.start_window_seconds is not None:
        payload["start_by"] = (slot + timedelta(seconds=rule.start_window_seconds)).isoformat()
    return payload


def _record_decision(rule, slot, *, reason, details, now, result: TickResult) -> None:
    try:
        with transaction.atomic():
            Decision.objects.create(rule=rule, slot=slot, reason=reason, details=details, created_at=now)
            if reason == Decision.Reason.MISSED:
                from deadletters.alerts import alert_slot_missed

                alert_slot_missed(rule_name=rule.name, slot=slot, details=details, now=now)
        result.decisions += 1
    except IntegrityError:
        pass  # another tick recorded this slot's decision already
