"""The plan of a rule change: read what the harness recorded about the rule (a fixed number of
queries, whatever the number of slots) and hand it to the pure plan (tasks/rules/plan.py).

One service behind every place a rule is edited: the admin's "Review change" step, `harness rules
plan` and `rules import`, and the API's POST /api/v1/rules/{name}/plan. `plan_json` is the plan as
data in the active language, worded by the one catalogue (tasks/sentences.py).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from itertools import islice

from django.db.models import DateTimeField, ExpressionWrapper, F, Q

from runs.engine.outages import outages_between, slot_grace
from runs.models import Decision, SlotHold, TaskRun
from tasks import sentences
from tasks.models import ReadinessFlag, TriggerRule
from tasks.rules import evaluation, schedule, spread
from tasks.rules import plan as planned
from tasks.rules.guards import rule_guards
from tasks.rules.reasons import Reason
from tasks.triggers.work import rule_flag_scope, rule_render_key, slot_values

# The rule's fields a plan compares (its editable columns; relations by name, pools as a list).
_SKIP = {"version", "next_fire_at", "last_slot_at", "paused_at", "pause_reason", "last_ping_at"}
# How many of the edited rule's next slots are checked for a change of key shape.
KEY_SAMPLE = 50


def rule_values(rule: TriggerRule, *, pools: list[str] | None = None) -> dict:
    """The rule's settings as a plan compares them: relations by name, times as text."""
    values: dict = {}
    for f in rule._meta.concrete_fields:
        if not f.editable or f.primary_key or f.name in _SKIP:
            continue
        if f.is_relation:
            related = getattr(rule, f.name) if getattr(rule, f.attname) is not None else None
            values[f.name] = getattr(related, "name", None)
        else:
            value = getattr(rule, f.name)
            if isinstance(value, datetime):  # the form reads it on the rule's clock, the database in UTC
                value = value.astimezone(UTC)
            values[f.name] = value.isoformat() if hasattr(value, "isoformat") else value
    if pools is not None:
        values["pools"] = sorted(pools)
    elif rule.pk is not None:
        values["pools"] = sorted(p.name for p in rule.pools.all())
    return values


def rule_side(rule: TriggerRule | None) -> planned.RuleSide:
    """One side of a plan; None (a rule not created yet) has no slots."""
    if rule is None or rule.kind in (TriggerRule.Kind.EVENT, TriggerRule.Kind.HEARTBEAT):
        kind = rule.kind if rule is not None else ""
        guards = rule_guards(rule) if rule is not None else evaluation.Guards()
        return planned.RuleSide(None, guards, kind=kind)
    return planned.RuleSide(
        rule.schedule_spec(),
        rule_guards(rule),
        catchup=rule.catchup,
        catchup_max_delay=timedelta(seconds=rule.catchup_max_delay_seconds),
        catchup_max_count=rule.catchup_max_count,
        kind=rule.kind,
        flag_scope=lambda slot: rule_flag_scope(rule, values=slot_values(rule, slot)),
        biz_key=lambda slot: rule_render_key(rule, slot),
    )


def rule_history_read(rule: TriggerRule | None, *, since: datetime, now: datetime, flags: set[str]) -> planned.History:
    """What was recorded about the rule's slots in (since, now]: ten queries, however many slots.

    The records begin at the later of `since` and the rule's schedule last being set. An edit of
    the schedule is a hard start: records before it belong to the schedule then in force (the rule's
    history says which), not to the rule as it is. A rule whose schedule was set only at its creation
    is read from its oldest record when that is older (a record proves the slots were read then).
    The scheduler's own outages come from its tick history (runs/engine/outages.py).
    """
    grace = slot_grace()
    ticks = outages_between(since, now, now=now)
    tick = ticks.last_tick
    outages = tuple((o.started_at, o.ended_at) for o in ticks.outages if o.ended_at is not None)
    flag_rows = ReadinessFlag.objects.filter(name__in=sorted(flags)).values_list("name", "scope", "set_at")
    flag_facts = {(name, scope): at for name, scope, at in flag_rows} if flags else {}
    if rule is None or rule.pk is None:
        return planned.History(since=now, last_tick=tick, flags=flag_facts, grace=grace, ticks_since=ticks.since)
    records: dict[datetime, planned.Recorded] = {}
    resumed: dict[str, datetime] = {}
    # decision_one_per_slot's index: (rule, slot). Most decisions were made on time and carry nothing
    # the replay reads: for those the slot and reason are enough (the instant of an on-time record
    # is taken as its slot). The instant and the details are read only for a decision made late (an
    # outage's proof) or one whose details the replay reads (the missing flags, a pause's end):
    # decoding every decision's details and instant was most of a plan's time.
    decisions = Decision.objects.filter(rule=rule, slot__gt=since, slot__lte=now)
    with_details = Q(reason__in=(Decision.Reason.NOT_READY, Decision.Reason.NOT_READY_EXPIRED, Decision.Reason.PAUSED))
    late = Q(created_at__gt=ExpressionWrapper(F("slot") + grace, output_field=DateTimeField()))
    for pk, slot, reason in decisions.exclude(with_details | late).values_list("id", "slot", "reason"):
        if slot is None:  # slot__gt above: a decision without a slot is not among them
            continue
        records[slot] = planned.Recorded(reason, slot, decision_id=pk)
    for pk, slot, reason, at, details in decisions.filter(with_details | late).values_list(
        "id", "slot", "reason", "created_at", "details"
    ):
        if slot is None:
            continue
        details = details if isinstance(details, dict) else {}
        missing = tuple(details.get("missing") or ()) if reason in ("not_ready", "not_ready_expired") else ()
        records[slot] = planned.Recorded(reason, at, decision_id=pk, missing=missing)
        if reason == Decision.Reason.PAUSED and details.get("paused_at") and details.get("resumed_at"):
            resumed[details["paused_at"]] = datetime.fromisoformat(details["resumed_at"])
    for slot, at in SlotHold.objects.filter(rule=rule, slot__gt=since, slot__lte=now).values_list("slot", "created_at"):
        records.setdefault(slot, planned.Recorded(planned.WAITING, at))
    # run_rule_recent_idx (rule first); one row per slot, the first claimed.
    runs = (
        TaskRun.objects.filter(
            rule=rule,
            slot__gt=since,
            slot__lte=now,
            is_trial=False,
            source__in=(TaskRun.Source.SCHEDULER, TaskRun.Source.CATCHUP),
        )
        .order_by("-id")
        .values_list("id", "slot", "source", "state", "trigger_at", "biz_key")
    )
    for pk, slot, source, state, at, key in runs:
        if slot is None:  # slot__gt above
            continue
        outcome = planned.CATCHUP if source == TaskRun.Source.CATCHUP else planned.RUN
        records[slot] = planned.Recorded(outcome, at, run_id=pk, state=state, biz_key=key)

    history = rule.history.filter(history_date__gt=since).order_by("history_date")
    rows = list(history.values("history_date", "history_type", "enabled", "paused_at", *TriggerRule.SCHEDULE_FIELDS))
    before = (
        rule.history.filter(history_date__lte=since)
        .order_by("-history_date")
        .values("history_date", "history_type", "enabled", "paused_at", *TriggerRule.SCHEDULE_FIELDS)
        .first()
    )
    start = since
    edited = False  # the schedule in force was set by an edit, not at the rule's creation
    pauses: list[tuple[datetime, datetime | None]] = []
    previous = before
    for row in rows:
        if previous is None or any(row[f] != previous[f] for f in TriggerRule.SCHEDULE_FIELDS if f != "enabled"):
            start = max(start, row["history_date"])  # the schedule was (re)set: read again from then
            edited = previous is not None
        previous = row
    off = before["paused_at"] if before and not before["enabled"] else None
    for row in rows:
        if not row["enabled"] and off is None:
            off = row["paused_at"] or row["history_date"]
        elif row["enabled"] and off is not None:
            pauses.append((off, resumed.get(off.isoformat(), row["history_date"])))
            off = None
    if off is not None:
        pauses.append((off, None))
    if records and not edited:
        start = min(start, min(records) - timedelta(microseconds=1))
    return planned.History(
        since=start,
        last_tick=tick,
        records=records,
        pauses=tuple(pauses),
        flags=flag_facts,
        grace=grace,
        outages=outages,
        ticks_since=ticks.since,
        schedule_set=edited,
    )


def rule_plan(
    old: TriggerRule | None,
    new: TriggerRule,
    *,
    now: datetime,
    days: int = planned.DEFAULT_DAYS,
    new_pools: list[str] | None = None,
) -> planned.Plan:
    """The plan of changing `old` (None: creating) into `new` (an unsaved instance) at `now`.

    ScheduleError, GuardError and KeyTemplateError escape for an edited rule the form or the import
    would refuse; callers plan only what passed their checks.
    """
    old_side, new_side = rule_side(old), rule_side(new)
    flags = set(old_side.guards.depends_on) | set(new_side.guards.depends_on)
    history = rule_history_read(old, since=now - timedelta(days=days), now=now, flags=flags)
    # A new rule has no past to replay: nothing was recorded for it.
    past = planned.past(old_side, new_side, history, now=now, days=days) if old is not None else []
    future, first = planned.future(old_side, new_side, now=now, days=days)
    before = rule_values(old) if old is not None else {}
    after = rule_values(new, pools=new_pools)
    diff = planned.changes(before, after)

    consequences: list[planned.Consequence] = []
    if old is not None:
        consequences += _burst(old, new, old_side, new_side, now=now, grace=history.grace, days=days)
        if new_side.spec is not None and old_side.spec is not None:
            ahead = [f.utc for f in future if f.new_guards is not None][:KEY_SAMPLE]
            today = _day(new, now)
            old_ahead = [f.utc for f in future if f.old_guards is not None and f.local.date() <= today]
            ran: dict[date, set[str]] = {}
            old_spec = old.schedule_spec()
            for slot, rec in history.records.items():
                if rec.biz_key:
                    ran.setdefault(schedule.business_date(old_spec, slot), set()).add(rec.biz_key)
            consequences += planned.key_consequences(
                old_side, new_side, slots=ahead, old_slots=old_ahead, ran=ran, day_of=lambda s: _day(new, s)
            )
        if (old.spread_seconds, old.spread_random) != (new.spread_seconds, new.spread_random):
            # Only starts move within their slots: keys, business dates and outcomes stay, so not dangerous.
            moved = Reason.of(spread.MOVED_STARTS, old=old.spread_seconds, new=new.spread_seconds)
            consequences.append(planned.Consequence(moved, False))
        if old.identity_id != new.identity_id:
            names = (
                old.identity.name if old.identity is not None else "-",
                new.identity.name if new.identity is not None else "-",
            )
            consequences.append(planned.Consequence(Reason.of(planned.IDENTITY, old=names[0], new=names[1]), True))
        if old.agent_id != new.agent_id:
            names = (old.agent.name if old.agent is not None else "-", new.agent.name if new.agent is not None else "-")
            consequences.append(planned.Consequence(Reason.of(planned.AGENT, old=names[0], new=names[1]), True))

    remarks: list[Reason] = []
    if not diff:
        remarks.append(Reason.of(planned.NO_CHANGE))
    if new_side.spec is None:
        remarks.append(Reason.of(planned.NOT_SCHEDULED, kind=new.get_kind_display()))
    if new_side.guards.overlap != "allow":
        remarks.append(Reason.of(planned.OVERLAP_NOT_REPLAYED))
    if len(past) >= planned.MAX_SLOTS:
        remarks.append(Reason.of(planned.TRUNCATED, n=planned.MAX_SLOTS))
    return planned.Plan(diff, past, future, first, consequences, remarks, days)


def _day(rule: TriggerRule, slot: datetime) -> date:
    return schedule.business_date(rule.schedule_spec(), slot)


def _burst(old, new, old_side, new_side, *, now: datetime, grace: timedelta, days: int) -> list[planned.Consequence]:
    """Slots that would newly fall due at once: the due slots the next tick has not handled yet, as
    the edited catch-up policy would run them. A changed schedule (or a rule switched back on) is
    read again from now (TriggerRule.save), so only an unchanged schedule can burst."""
    schedule_changed = any(getattr(old, f) != getattr(new, f) for f in TriggerRule.SCHEDULE_FIELDS)
    first = old.next_fire_at
    if schedule_changed or not new.enabled or new_side.spec is None or first is None or first > now:
        return []
    due = planned.due_slots(new_side.spec, first, now, days=days)
    would = planned.burst(new_side, due=due, now=now, grace=grace)
    already = set(planned.burst(old_side, due=due, now=now, grace=grace))
    found = planned.burst_consequence([s for s in would if s not in already])
    return [found] if found is not None else []


def outcome_label(outcome: str) -> str:
    """An outcome in words: a decision reason as the desk names it, anything else from the catalogue."""
    if outcome in Decision.Reason.values:
        return str(Decision.Reason(outcome).label)
    return sentences.say(Reason.of(planned.OUTCOME_WORDS.get(outcome, planned.OUTCOME_UNKNOWN)))


def plan_json(plan: planned.Plan, *, zone: str, rows: int | None = None) -> dict:
    """The plan as JSON-ready data in the active language. `rows` caps the past and future rows
    listed (the differing ones; None: all); the counts always cover every slot. Local times are
    read in `zone` (the edited rule's)."""
    tz = schedule.validate_timezone(zone)
    differing = plan.past_differences
    # Only the listed fires are told: what the guards do to a fire is worked out when asked.
    future_diff = list(islice((f for f in plan.future if f.differs), rows))
    return {
        "days": plan.days,
        "changes": [{"field": f, "old": o, "new": n} for f, o, n in plan.changes],
        "dangerous": plan.dangerous,
        "consequences": [{"summary": sentences.say(c.said), "dangerous": c.dangerous} for c in plan.consequences],
        "remarks": [sentences.say(r) for r in plan.remarks],
        "past": {
            "slots": len(plan.past),
            "differing": len(differing),
            "summary": sentences.say(past_summary(plan)),
            "rows": [_past_row(r, tz) for r in (differing if rows is None else differing[:rows])],
        },
        "future": {
            "fires_old": sum(1 for f in plan.future if f.old_guards is not None),
            "fires_new": sum(1 for f in plan.future if f.new_guards is not None),
            "first_difference": plan.first_difference.isoformat() if plan.first_difference else None,
            # The first fire that goes otherwise, on the edited rule's clock.
            "first_difference_at": future_diff[0].local.isoformat() if future_diff else None,
            "summary": sentences.say(future_summary(plan)),
            "rows": [_future_row(f) for f in future_diff],
        },
    }


def past_summary(plan: planned.Plan) -> Reason:
    n = len(plan.past_differences)
    if n:
        return Reason.of(planned.PAST_DIFFERS, n=n, total=len(plan.past))
    return Reason.of(planned.PAST_SAME, total=len(plan.past))


def future_summary(plan: planned.Plan) -> Reason:
    if plan.first_difference is None:
        return Reason.of(planned.SAME_FUTURE, days=plan.days)
    return Reason.of(planned.FIRST_DIFFERENCE, day=plan.first_difference.isoformat())


def _past_row(r: planned.Replayed, tz) -> dict:
    rec = r.recorded
    local = r.slot.astimezone(tz)
    return {
        "slot": r.slot.isoformat(),
        "slot_local": local.isoformat(),
        "local_text": sentences.local_text(local),
        "edited": r.new,
        "edited_label": outcome_label(r.new),
        "why": sentences.say(r.why),
        "current": r.current,
        "current_label": outcome_label(r.current),
        "happened": rec.state if rec and rec.state else (rec.outcome if rec else ""),
        "happened_label": _happened(rec),
        "run_id": rec.run_id if rec else None,
        "decision_id": rec.decision_id if rec else None,
    }


def _happened(rec: planned.Recorded | None) -> str:
    """What became of a recorded slot: its run's state, or its decision, as the desk names them."""
    if rec is None:
        return ""
    if rec.state in TaskRun.State.values:
        return str(TaskRun.State(rec.state).label)
    return outcome_label(rec.outcome)


def _future_row(f: planned.FutureFire) -> dict:
    return {
        "utc": f.utc.isoformat(),
        "local": f.local.isoformat(),
        "local_text": sentences.local_text(f.local),
        "current": sentences.say(f.old) if f.old else "",
        "edited": sentences.say(f.new) if f.new else "",
        "note": sentences.say(f.note),
    }
