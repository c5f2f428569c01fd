"""Selectors that answer operators: "why did or didn't it run at that slot?" and "when will it fire?"."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from django.utils.dateparse import parse_datetime

from runs.models import Decision, SlotHold, TaskRun
from runs.selectors import run_coalesced_into, run_wait_explain
from tasks.models import TriggerRule
from tasks.rules import evaluation, keys, schedule
from tasks.rules.guards import rule_guards

# How far around the asked instant explain looks for the nearest real slots.
NEAR = timedelta(days=2)


class SlotParseError(ValueError):
    pass


def parse_slot(text: str, *, rule: TriggerRule) -> datetime:
    """An ISO 8601 instant; without an offset it is read on the rule zone's wall clock (first
    occurrence in a repeated hour)."""
    try:
        value = parse_datetime(text.strip()) if isinstance(text, str) else None
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=ZoneInfo(rule.timezone))
        value = value.astimezone(ZoneInfo("UTC")) if value is not None else None
    except (ValueError, OverflowError):  # e.g. 2026-02-30, or year 1 moved past datetime's range
        value = None
    if value is None:
        raise SlotParseError(
            f"{text!r} is not a date-time; write e.g. 2026-12-01T08:00 (read in {rule.timezone}) "
            "or 2026-12-01T08:00:00+01:00"
        )
    return value


def slot_explain(*, rule: TriggerRule, slot: datetime, now: datetime) -> dict:
    """What happened to one slot: {"outcome", "reason", "summary", "details", ...}.

    outcome is one of run | decision | waiting | not_due | not_a_slot | no_record. A paused rule's
    slot after it was switched off has reason "paused": expected not to run (ahead), or not run and
    recorded as a "paused" decision only on resume (past).
    """
    spec = rule.schedule_spec()
    local = schedule.slot_label(spec, slot)
    base = {"rule": rule.name, "slot_utc": slot.isoformat(), "slot_local": local}
    run = TaskRun.objects.filter(rule=rule, slot=slot, is_trial=False).order_by("id").first()
    if run is not None and run.state == TaskRun.State.COALESCED:
        return {**base, **trigger_explain(rule=rule, biz_key=run.biz_key, now=now)}
    if run is not None:
        summary = f"ran: run {run.id} ({run.get_state_display()}), source {run.source}, biz_key {run.biz_key}"
        if run.state == TaskRun.State.AWAITING_APPROVAL:
            summary = f"waiting for operator approval: run {run.id} (catch-up above the approval threshold)"
        elif run.state in (TaskRun.State.CANCELLED, TaskRun.State.FAILED) and run.last_error:
            summary += f"; {run.last_error}"
        elif run.state == TaskRun.State.PENDING and run.run_after > now:
            summary += f"; starts at {run.run_after.isoformat()} (deferred or paced)"
        waiting = run_wait_explain(run, now=now)  # not started: which pool it waits for, and why
        if waiting is not None:
            summary = f"run {run.id} not started yet, {waiting['summary']}"
        return {
            **base,
            "outcome": "run",
            "reason": run.state,
            "summary": summary,
            "details": {
                "run_id": run.id,
                "biz_key": run.biz_key,
                "source": run.source,
                "triggered_by": run.triggered_by,
                "identity": run.identity,
                "rule_version": run.rule_version,
                "run_after": run.run_after.isoformat(),
                **({"waiting_for": waiting["details"]} if waiting else {}),
            },
        }
    decision = Decision.objects.filter(rule=rule, slot=slot).first()
    if decision is not None:
        why = decision.details.get("why") if isinstance(decision.details, dict) else None
        if decision.reason == Decision.Reason.SHED:
            why = _shed_why(decision.details)
        summary = f"did not run: {decision.get_reason_display()}" + (f" ({why})" if why else "")
        return {
            **base,
            "outcome": "decision",
            "reason": decision.reason,
            "summary": summary,
            "details": decision.details,
            "decided_at": decision.created_at.isoformat(),
        }
    hold = SlotHold.objects.filter(rule=rule, slot=slot).first()
    if hold is not None:
        summary = f"not yet: {hold.get_reason_display()}; next check {hold.recheck_at.isoformat()}"
        if hold.deadline:
            summary += f", expires {hold.deadline.isoformat()}"
        return {**base, "outcome": "waiting", "reason": hold.reason, "summary": summary, "details": hold.details}
    if rule.kind != TriggerRule.Kind.HEARTBEAT and not _is_slot(rule, slot):
        before, after = _nearest(rule, slot)
        summary = (
            "not a slot of this rule"
            + (f"; nearest before {before.isoformat()}" if before else "")
            + (f"; nearest after {after.isoformat()}" if after else "")
        )
        return {**base, "outcome": "not_a_slot", "reason": "", "summary": summary, "details": {}}
    paused = _paused_text(rule)
    if slot > now or (rule.next_fire_at is not None and slot >= rule.next_fire_at):
        if paused:
            # Switched off: nothing is scheduled, whatever the guards would say; on resume the
            # schedule is read again from then, so this slot runs only if it is still ahead.
            return {
                **base,
                "outcome": "not_due",
                "reason": "paused",
                "summary": f"not due yet; expected: {paused}",
                "details": _paused_details(rule),
            }
        verdict = evaluation.describe_slot(rule_guards(rule), slot)
        return {
            **base,
            "outcome": "not_due",
            "reason": "",
            "summary": f"not due yet; expected: {verdict}",
            "details": {"next_fire_at": rule.next_fire_at.isoformat() if rule.next_fire_at else None},
        }
    if paused and rule.paused_at is not None and slot >= rule.paused_at:
        return {
            **base,
            "outcome": "no_record",
            "reason": "paused",
            "summary": "did not run: the rule is paused since "
            f"{rule.paused_at.isoformat()} ({rule.pause_reason or 'no reason recorded'}); "
            'resuming records this slot as a "paused" decision, it is not caught up',
            "details": _paused_details(rule),
        }
    return {
        **base,
        "outcome": "no_record",
        "reason": "",
        "summary": "no record: the slot is before the rule's schedule was last set (created, edited or "
        "resumed), or its decision is older than the retention period",
        "details": {"rule_updated_at": rule.updated_at.isoformat() if rule.updated_at else None},
    }


def trigger_explain(*, rule: TriggerRule, biz_key: str, now: datetime) -> dict:
    """What happened to one trigger, by its biz_key (events have no slot): {"outcome", "reason",
    "summary", "details", ...}. outcome is one of run | coalesced | shed | no_record."""
    # The stored key, or the rendered part an operator reads in a payload (any of the rule's namespaces).
    stored = (
        [biz_key]
        if biz_key.startswith(keys.NAMESPACE_ROOT + "/")
        else [keys.namespace(rule.pk, kind) + biz_key for kind in keys.KINDS]
    )
    run = TaskRun.objects.filter(rule=rule, biz_key__in=stored).order_by("id").first()
    decision = Decision.objects.filter(rule=rule, slot=None, biz_key__in=stored).order_by("id").first()
    biz_key = run.biz_key if run else decision.biz_key if decision else biz_key
    base = {"rule": rule.name, "biz_key": biz_key}
    if run is not None and run.state == TaskRun.State.COALESCED:
        survivor = run_coalesced_into(run)
        details = {
            **(decision.details if decision else {}),
            "run_id": run.id,
            "carried_by_run_id": survivor.id if survivor else None,
        }
        where = f"run {survivor.id} ({survivor.biz_key}, {survivor.get_state_display()})" if survivor else "a newer run"
        summary = (
            f"coalesced: run {run.id} was replaced before it started by a newer trigger of object "
            f"{run.object_key}; {where} carries the work with the newest payload"
        )
        return {
            **base,
            "outcome": "coalesced",
            "reason": Decision.Reason.COALESCED,
            "summary": summary,
            "details": details,
        }
    if run is not None:
        summary = f"ran: run {run.id} ({run.get_state_display()}), source {run.source}, triggered by {run.triggered_by}"
        if run.dedupe_hits:
            summary += f"; {run.dedupe_hits} later trigger(s) were dedupe hits on it"
        details = {"run_id": run.id, "source": run.source, "run_after": run.run_after.isoformat()}
        return {**base, "outcome": "run", "reason": run.state, "summary": summary, "details": details}
    if decision is not None:
        why = _shed_why(decision.details) if decision.reason == Decision.Reason.SHED else ""
        summary = f"did not run: {decision.get_reason_display()}" + (f" ({why})" if why else "")
        if decision.hits > 1:
            summary += f"; {decision.hits} trigger(s) with this key were answered so"
        return {
            **base,
            "outcome": decision.reason,
            "reason": decision.reason,
            "summary": summary,
            "details": decision.details,
            "decided_at": decision.created_at.isoformat(),
        }
    return {
        **base,
        "outcome": "no_record",
        "reason": "",
        "summary": "no record: no trigger with this business key reached this rule, or its record is older than "
        "the retention period (a refused event is in the event refusals)",
        "details": {},
    }


def _shed_why(details: dict) -> str:
    if not isinstance(details, dict):
        return ""
    return (
        f"{details.get('pending')} pending runs in {details.get('pool')} at or above the high watermark "
        f"{details.get('high_watermark')}, shedding until {details.get('low_watermark')}; "
        f"the rule is {details.get('recoverability')}"
    )


def _paused_text(rule: TriggerRule) -> str:
    """What a switched-off rule does at a slot ahead: "" for an enabled rule."""
    if rule.enabled:
        return ""
    why = f": {rule.pause_reason}" if rule.pause_reason else ""
    return f"paused (will not run while the rule is paused{why}; resuming reads the schedule again from then)"


def _paused_details(rule: TriggerRule) -> dict:
    return {
        "expected": "paused",
        "paused_at": rule.paused_at.isoformat() if rule.paused_at else None,
        "pause_reason": rule.pause_reason,
    }


def rule_preview(*, rule: TriggerRule, now: datetime, count: int = 10) -> list[dict]:
    """The next `count` fires with DST notes and what the windows and calendar do to each (for a
    paused rule: that it will not run while paused)."""
    paused = _paused_text(rule)
    guards = rule_guards(rule)
    zone = ZoneInfo(rule.timezone)
    if rule.kind == TriggerRule.Kind.HEARTBEAT:
        fire = rule.next_fire_at
        return (
            [
                {
                    "utc": fire,
                    "local": fire.astimezone(zone),
                    "note": "if no ping arrives before",
                    "guards": paused or evaluation.describe_slot(guards, fire),
                }
            ]
            if fire
            else []
        )
    rows = schedule.preview(rule.schedule_spec(), now, count)
    return [{**row, "guards": paused or evaluation.describe_slot(guards, row["utc"])} for row in rows]


def _is_slot(rule: TriggerRule, slot: datetime) -> bool:
    return slot in schedule.slots_between(rule.schedule_spec(), slot - timedelta(microseconds=1), slot)


def _nearest(rule: TriggerRule, slot: datetime) -> tuple[datetime | None, datetime | None]:
    spec = rule.schedule_spec()
    earlier = schedule.slots_between(spec, slot - NEAR, slot)
    return (earlier[-1] if earlier else None), schedule.next_slot(spec, slot)
