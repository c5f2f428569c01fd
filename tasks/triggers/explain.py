"""Selectors that answer operators: "why did or didn't it run at that slot?" and for a trigger.

The answer is data ({"outcome", "reason", "details", ...}) and a summary: Reasons (tasks/rules/
explain.py) worded by the one catalogue (tasks/sentences.py). The API and the CLI get the dict
with the summary in the active language; the admin words the same Reasons with links
(`slot_explanation` / `trigger_explanation`). The schedule preview is tasks/rules/preview.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from django.utils.dateparse import parse_datetime

from runs.desk.selectors import run_coalesced_into, run_wait_explain
from runs.models import Decision, SlotHold, TaskRun
from tasks import sentences
from tasks.models import TriggerRule
from tasks.rules import evaluation, keys, schedule, spread
from tasks.rules import explain as words
from tasks.rules.explain import DecisionRef, RunRef, SlotRef
from tasks.rules.guards import rule_guards
from tasks.rules.reasons import Reason


class SlotParseError(ValueError):
    """The slot asked about is not a date-time; str() says so in the active language."""

    def __init__(self, reason: Reason):
        self.reason = reason
        super().__init__(sentences.say(reason))


@dataclass(frozen=True)
class Explanation:
    """An answer: its record-level data (`result`, JSON-ready) and its summary as Reasons."""

    result: dict
    said: list[Reason]

    def as_dict(self) -> dict:
        return {**self.result, "summary": sentences.say_all(self.said)}


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
        raise SlotParseError(Reason.of(words.NOT_A_DATETIME, text=repr(text), zone=rule.timezone))
    return value


def slot_explain(*, rule: TriggerRule, slot: datetime, now: datetime) -> dict:
    """What happened to one slot: {"outcome", "reason", "summary", "details", ...}.

    outcome is one of run | decision | waiting | not_due | not_a_slot | no_record. A paused rule's
    slot after it was switched off has reason "paused": expected not to run (ahead), or not run and
    recorded as a "paused" decision only on resume (past).
    """
    return slot_explanation(rule=rule, slot=slot, now=now).as_dict()


def trigger_explain(*, rule: TriggerRule, biz_key: str, now: datetime) -> dict:
    """What happened to one trigger, by its biz_key (events have no slot): {"outcome", "reason",
    "summary", "details", ...}. outcome is one of run | coalesced | shed | no_record."""
    return trigger_explanation(rule=rule, biz_key=biz_key, now=now).as_dict()


def slot_explanation(*, rule: TriggerRule, slot: datetime, now: datetime) -> Explanation:
    spec = rule.schedule_spec()
    base = {"rule": rule.name, "slot_utc": slot.isoformat(), "slot_local": schedule.slot_label(spec, slot)}
    run = TaskRun.objects.filter(rule=rule, slot=slot, is_trial=False).order_by("id").first()
    if run is not None and run.state == TaskRun.State.COALESCED:
        found = trigger_explanation(rule=rule, biz_key=run.biz_key, now=now)
        return Explanation({**base, **found.result}, found.said)
    if run is not None:
        return _slot_ran(base, run, now)
    decision = Decision.objects.filter(rule=rule, slot=slot).first()
    if decision is not None:
        result = {
            **base,
            "outcome": "decision",
            "reason": decision.reason,
            "details": decision.details,
            "decided_at": decision.created_at.isoformat(),
        }
        return Explanation(result, [_did_not_run(decision), *_paused_now(rule)])
    hold = SlotHold.objects.filter(rule=rule, slot=slot).first()
    if hold is not None:
        label = hold.get_reason_display()
        reason = (
            Reason.of(words.WAITING_UNTIL, hold=label, recheck=hold.recheck_at, deadline=hold.deadline)
            if hold.deadline
            else Reason.of(words.WAITING, hold=label, recheck=hold.recheck_at)
        )
        return Explanation({**base, "outcome": "waiting", "reason": hold.reason, "details": hold.details}, [reason])
    if rule.kind != TriggerRule.Kind.HEARTBEAT and not _is_slot(spec, slot):
        before, after = _nearest(spec, slot)
        details = {
            "nearest_before": before.isoformat() if before else None,
            "nearest_after": after.isoformat() if after else None,
        }
        said = [Reason.of(words.NOT_A_SLOT)]
        said += [Reason.of(words.NEAREST_BEFORE, slot=SlotRef(before))] if before else []
        said += [Reason.of(words.NEAREST_AFTER, slot=SlotRef(after))] if after else []
        return Explanation({**base, "outcome": "not_a_slot", "reason": "", "details": details}, said)
    if slot > now or (rule.next_fire_at is not None and slot >= rule.next_fire_at):
        if not rule.enabled:
            # Switched off: nothing is scheduled, whatever the guards would say; on resume the
            # schedule is read again from then, so this slot runs only if it is still ahead.
            reason = (
                Reason.of(words.NOT_DUE_PAUSED_WHY, why=rule.pause_reason)
                if rule.pause_reason
                else Reason.of(words.NOT_DUE_PAUSED)
            )
            result = {**base, "outcome": "not_due", "reason": "paused", "details": _paused_details(rule)}
            return Explanation(result, [reason])
        verdict = evaluation.describe_slot(rule_guards(rule), slot)
        details = {"next_fire_at": rule.next_fire_at.isoformat() if rule.next_fire_at else None}
        result = {**base, "outcome": "not_due", "reason": "", "details": details}
        return Explanation(result, [Reason.of(words.NOT_DUE, expected=verdict)])
    if not rule.enabled and rule.paused_at is not None and slot >= rule.paused_at:
        reason = (
            Reason.of(words.PAUSED_SINCE_WHY, since=rule.paused_at, why=rule.pause_reason)
            if rule.pause_reason
            else Reason.of(words.PAUSED_SINCE, since=rule.paused_at)
        )
        result = {**base, "outcome": "no_record", "reason": "paused", "details": _paused_details(rule)}
        return Explanation(result, [reason])
    details = {"rule_updated_at": rule.updated_at.isoformat() if rule.updated_at else None}
    return Explanation(
        {**base, "outcome": "no_record", "reason": "", "details": details}, [Reason.of(words.NO_RECORD_SLOT)]
    )


def _slot_ran(base: dict, run: TaskRun, now: datetime) -> Explanation:
    said = [
        Reason.of(words.RAN, run=RunRef(run.id), state=run.get_state_display(), source=run.source, biz_key=run.biz_key)
    ]
    if run.state == TaskRun.State.AWAITING_APPROVAL:
        held = words.held_for(source=run.source, attempts=run.attempts, payload=run.payload or {})
        said = [Reason.of(words.AWAITING_APPROVAL_FOR, run=RunRef(run.id), why=why) for why in held] or [
            Reason.of(words.AWAITING_APPROVAL, run=RunRef(run.id))
        ]
    elif run.state in (TaskRun.State.CANCELLED, TaskRun.State.FAILED) and run.last_error:
        said.append(Reason.of(words.LAST_ERROR, error=run.last_error))
    elif spread_said := _spread_said(base, run, now):
        said.append(spread_said)
    elif run.state == TaskRun.State.PENDING and run.run_after > now:
        said.append(Reason.of(words.STARTS_AT, at=run.run_after))
    waiting = run_wait_explain(run, now=now)  # not started: which pool it waits for, and why
    if waiting is not None:
        said = [Reason.of(words.NOT_STARTED, run=RunRef(run.id), waiting=waiting["summary"])]
    calendar = (run.payload or {}).get("calendar")
    if isinstance(calendar, dict):  # the calendar had no data for the run's day: say so
        said.append(evaluation.calendar_run_reason(calendar))
    details = {
        "run_id": run.id,
        "biz_key": run.biz_key,
        "source": run.source,
        "triggered_by": run.triggered_by,
        "identity": run.identity,
        "rule_version": run.rule_version,
        "run_after": run.run_after.isoformat(),
        **({"waiting_for": waiting["details"]} if waiting else {}),
        **({"calendar": calendar} if isinstance(calendar, dict) else {}),
    }
    return Explanation({**base, "outcome": "run", "reason": run.state, "details": details}, said)


def _spread_said(base: dict, run: TaskRun, now: datetime) -> Reason | None:
    """A spread run: "due 09:00, started 09:02:17 (spread 300 s)", both on the rule zone's clock."""
    used = run.payload.get("spread") if isinstance(run.payload, dict) else None
    if not isinstance(used, dict) or run.slot is None or not used.get("seconds"):
        return None
    zone = ZoneInfo(run.rule.timezone) if run.rule is not None else UTC
    width = spread.words(spread.Spread(int(used["seconds"]), str(used.get("pool") or "")))
    slot = run.slot.astimezone(zone)

    def same_day(at: datetime) -> datetime | str:  # the start is read beside the slot: its clock time is enough
        local = at.astimezone(zone)
        return f"{local:%H:%M:%S}" if local.date() == slot.date() else local

    if run.start_at is not None:
        return Reason.of(spread.DUE_STARTED, slot=slot, started=same_day(run.start_at), spread=width)
    if run.state == TaskRun.State.PENDING and run.run_after > now:
        return Reason.of(spread.DUE_STARTS, slot=slot, start=same_day(run.run_after), spread=width)
    return None


def trigger_explanation(*, rule: TriggerRule, biz_key: str, now: datetime) -> Explanation:
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
        reason = (
            Reason.of(
                words.COALESCED,
                run=RunRef(run.id),
                object=run.object_key,
                survivor=RunRef(survivor.id),
                survivor_key=survivor.biz_key,
                state=survivor.get_state_display(),
            )
            if survivor
            else Reason.of(words.COALESCED_AWAY, run=RunRef(run.id), object=run.object_key)
        )
        result = {**base, "outcome": "coalesced", "reason": Decision.Reason.COALESCED, "details": details}
        return Explanation(result, [reason])
    if run is not None:
        said = [
            Reason.of(
                words.TRIGGER_RAN,
                run=RunRef(run.id),
                state=run.get_state_display(),
                source=run.source,
                triggered_by=run.triggered_by,
            )
        ]
        if run.dedupe_hits:
            said.append(Reason.of(words.DEDUPE_HITS, n=run.dedupe_hits))
        details = {"run_id": run.id, "source": run.source, "run_after": run.run_after.isoformat()}
        return Explanation({**base, "outcome": "run", "reason": run.state, "details": details}, said)
    if decision is not None:
        said = [_did_not_run(decision)]
        if decision.hits > 1:
            said.append(Reason.of(words.ANSWERED_SO, n=decision.hits))
        result = {
            **base,
            "outcome": decision.reason,
            "reason": decision.reason,
            "details": decision.details,
            "decided_at": decision.created_at.isoformat(),
        }
        return Explanation(result, said)
    return Explanation(
        {**base, "outcome": "no_record", "reason": "", "details": {}}, [Reason.of(words.NO_RECORD_TRIGGER)]
    )


def _did_not_run(decision: Decision) -> Reason:
    ref = DecisionRef(decision.pk, decision.get_reason_display())
    details = decision.details if isinstance(decision.details, dict) else {}
    if decision.reason == Decision.Reason.SHED:
        shed = Reason.of(
            words.SHED,
            pending=details.get("pending"),
            pool=details.get("pool"),
            high=details.get("high_watermark"),
            low=details.get("low_watermark"),
            recoverability=details.get("recoverability"),
        )
        return Reason.of(words.DID_NOT_RUN_WHY, decision=ref, why=shed)
    causes = words.missed_causes(reason=decision.reason, details=details, decided_at=decision.created_at)
    if causes:
        return Reason.of(words.DID_NOT_RUN_WHY, decision=ref, why=causes)
    why = details.get("why")
    if why == evaluation.WHY_NOT_BUSINESS_DAY:
        # Worded again from its details, so the holiday's name reads in the user's language.
        return Reason.of(words.DID_NOT_RUN_WHY, decision=ref, why=evaluation.calendar_reason(details))
    if why:
        return Reason.of(words.DID_NOT_RUN_WHY, decision=ref, why=why)
    return Reason.of(words.DID_NOT_RUN, decision=ref)


def _paused_now(rule: TriggerRule) -> list[Reason]:
    """The pause, when the rule is paused now: a cause the operator should know of beside any decision."""
    if rule.enabled or rule.paused_at is None:
        return []
    if rule.pause_reason:
        return [Reason.of(words.PAUSED_NOW_WHY, since=rule.paused_at, why=rule.pause_reason)]
    return [Reason.of(words.PAUSED_NOW, since=rule.paused_at)]


def _paused_details(rule: TriggerRule) -> dict:
    return {
        "expected": "paused",
        "paused_at": rule.paused_at.isoformat() if rule.paused_at else None,
        "pause_reason": rule.pause_reason,
    }


def _is_slot(spec: schedule.ScheduleSpec, slot: datetime) -> bool:
    return slot in schedule.slots_between(spec, slot - timedelta(microseconds=1), slot)


def _nearest(spec: schedule.ScheduleSpec, slot: datetime) -> tuple[datetime | None, datetime | None]:
    try:
        return words.nearest_slots(spec, slot)
    except OverflowError:  # an instant within a week of year 1
        return None, schedule.next_slot(spec, slot)
