"""What the run for a rule will be: one assembly of a Work value for every trigger kind.

The tick (and catch-up, heartbeats, held slots), the operator's buttons (run now, trial, backfill)
and event intake (webhook, queue, file, Python) all build their Work here, so every run of a rule
carries the rule's executing identity, its object key and its snapshot, whoever triggered it
(invariant 8), and is serialized per object the same way.
"""

from datetime import datetime, timedelta

from runs.engine.claims import Work
from runs.models import TaskRun
from tasks.models import TriggerRule, TriggerSource
from tasks.rules import business_days, events, keys, schedule, spread

SCHEDULER_IDENTITY = "scheduler"


def rule_identity(rule: TriggerRule) -> str:
    """The executing identity a run records (and the executor re-checks); "" for an unrestricted rule."""
    return rule.identity.name if rule.identity is not None else ""


def slot_values(rule: TriggerRule, slot: datetime) -> dict:
    """The built-in placeholders of a rule's templates for one slot."""
    spec = rule.schedule_spec()
    return {
        "rule": rule.name,
        "slot": schedule.slot_label(spec, slot),
        **business_days.business_dates(rule.business_days, schedule.business_date(spec, slot)),
    }


def rule_render_key(rule: TriggerRule, slot: datetime, *, kind: str = keys.SLOT) -> str:
    """The slot's biz_key: the rule's namespace for `kind`, then its dedupe-key template with escaped values."""
    rendered = keys.render(rule.dedupe_key_template, params=_params(rule), escaped=True, **slot_values(rule, slot))
    return keys.scoped(rule.pk, kind, rendered)


def rule_object_key(rule: TriggerRule, *, values: dict) -> str:
    """The rendered object key ("" when the rule names none); same placeholders as the dedupe key."""
    if not rule.object_key_template:
        return ""
    return keys.render(rule.object_key_template, params=_params(rule), **values)


def rule_flag_scope(rule: TriggerRule, *, values: dict) -> str:
    """The scope a rule's readiness flags are looked up in for one slot."""
    return keys.render(rule.depends_scope or "{business_date}", params=_params(rule), **values)


def rule_snapshot(rule: TriggerRule) -> dict:
    """The declared snapshot fields, copied from the rule's params at trigger time."""
    params = _params(rule)
    return {name: params.get(name) for name in (rule.snapshot_fields or []) if isinstance(name, str)}


def rule_payload(rule: TriggerRule, slot: datetime | None) -> dict:
    """What the run keeps from the rule at trigger time, so later edits do not change it."""
    payload = {
        "params": rule.params,
        "rule_version": rule.version,
        "snapshot": rule_snapshot(rule),
    }
    if slot is not None:
        payload["slot_local"] = schedule.slot_label(rule.schedule_spec(), slot)
    if rule.agent_id is not None:  # the output contract as it was when triggered (the agent: run.agent)
        payload["output_schema"] = rule.output_schema
    return payload


def slot_spread(rule: TriggerRule, slot: datetime, *, draw: float | None = None) -> tuple[spread.Spread, timedelta]:
    """The rule's spread and this slot's start offset (tasks.rules.spread), bounded by the rule's
    next slot. Cron and interval rules only: a heartbeat's or a one-time rule's start is its alarm.
    `draw` is the random part, for a rule that asks for one (None: the hash alone)."""
    if rule.kind not in (TriggerRule.Kind.CRON, TriggerRule.Kind.INTERVAL):
        return spread.Spread(), spread.ZERO
    chosen = rule.start_spread()
    if not chosen:
        return chosen, spread.ZERO
    following = schedule.next_slot(rule.schedule_spec(), slot)
    width = timedelta(seconds=chosen.seconds)
    return chosen, spread.offset(rule.name, slot, width, next_slot=following, draw=draw if chosen.random else None)


def work_for_slot(
    rule: TriggerRule,
    slot: datetime,
    *,
    source: str,
    run_after: datetime | None = None,
    spread_used: spread.Spread | None = None,
) -> Work:
    """A scheduled slot's work (tick, catch-up, heartbeat, a held slot that became ready).
    `spread_used` is recorded in the payload, so explain can say why the start moved.

    Raises keys.KeyTemplateError (or KeyError/ValueError) when the rule's templates cannot be rendered.
    """
    start_by = slot + timedelta(seconds=rule.start_window_seconds) if rule.start_window_seconds is not None else None
    work = _work(
        rule,
        biz_key=rule_render_key(rule, slot),
        slot=slot,
        values=slot_values(rule, slot),
        source=source,
        triggered_by=SCHEDULER_IDENTITY,
        run_after=run_after,
        start_by=start_by,
    )
    if spread_used:
        work.payload["spread"] = {"seconds": spread_used.seconds, "pool": spread_used.pool}
    return work


def work_for_operator(
    rule: TriggerRule,
    *,
    actor: str,
    now: datetime,
    slot: datetime | None = None,
    biz_key: str | None = None,
    trial: bool = False,
    source: str = TaskRun.Source.MANUAL,
    run_after: datetime | None = None,
) -> Work:
    """An operator's run of a rule (run now, trial run, backfill): the same unit of work as the slot.

    Without a slot, the slot is `now` cut to the minute, so a double-click within a minute is one
    run. Run now and trials have their own key namespaces (keys.MANUAL, keys.TRIAL), so a button
    never takes, nor is taken by, the scheduler's run of that minute; a backfill is the scheduler's
    slot (keys.SLOT), so backfilling a slot that ran is a dedupe hit. `biz_key` names one business
    unit instead of the slot: it is escaped into the rule's MANUAL_KEY (or TRIAL_KEY) namespace, so
    it can never name another rule's run.
    """
    if slot is None:
        slot = now.replace(second=0, microsecond=0)
    if slot.tzinfo is None:
        raise ValueError("slot must be timezone-aware")
    schedule.validate_spec(rule.schedule_spec())
    if biz_key:
        key = keys.scoped(rule.pk, keys.TRIAL_KEY if trial else keys.MANUAL_KEY, keys.escape(biz_key))
    else:
        kind = keys.TRIAL if trial else keys.SLOT if source == TaskRun.Source.BACKFILL else keys.MANUAL
        key = rule_render_key(rule, slot, kind=kind)
    return _work(
        rule,
        biz_key=key,
        slot=slot,
        values=slot_values(rule, slot),
        source=source,
        triggered_by=actor,
        run_after=run_after,
        trial=trial,
        intake=False,
    )


def work_for_once(
    rule: TriggerRule, *, key: str, actor: str, run_after: datetime, params: dict, source: str = TaskRun.Source.API
) -> Work:
    """A delayed one-time run of a rule (tasks.triggers.once): its idempotency `key` is escaped into
    the rule's ONCE_KEY namespace, so it can never meet a slot's, an event's or an operator's key.
    No slot (it is not one of the schedule's), one-time input (never shed or coalesced); `params`
    are laid over the rule's for this run only."""
    zone = schedule.validate_timezone(rule.timezone)
    values = {"rule": rule.name, "slot": "", "business_date": run_after.astimezone(zone).date().isoformat()}
    work = _work(
        rule,
        biz_key=keys.scoped(rule.pk, keys.ONCE_KEY, keys.escape(key)),
        slot=None,
        values=values,
        source=source,
        triggered_by=actor,
        run_after=run_after,
        intake=False,
    )
    work.payload["params"] = {**_params(rule), **params}
    return work


def work_for_event(
    rule: TriggerRule,
    source: TriggerSource,
    mapped: events.MappedEvent,
    *,
    channel: str,
    delivery_id: str | None,
    now: datetime,
) -> Work:
    """An accepted event's work: keyed by the event's criteria, triggered by the source's identity,
    executed as the rule's identity. Raises events.Refused when the key cannot be rendered."""
    try:
        dates = business_days.business_dates(
            rule.business_days, now.astimezone(schedule.validate_timezone(rule.timezone)).date()
        )
    except ValueError as exc:  # a calendar with no business day within a year
        raise events.Refused("invalid_key", f"cannot render the business key: {exc}", status=422) from None
    business_date = dates.pop("business_date")
    params = {**_params(rule), "source": source.name, **mapped.criteria}
    biz_key = events.render_key(
        rule.dedupe_key_template,
        rule_id=rule.pk,
        rule=rule.name,
        source=source.name,
        criteria=mapped.criteria,
        business_date=business_date,
        params=_params(rule),
        neighbours=dates,
    )
    try:
        object_key = (
            keys.render(
                rule.object_key_template,
                rule=rule.name,
                slot="",
                business_date=business_date,
                params=params,
                previous_business_date=dates["previous_business_date"],
                next_business_date=dates["next_business_date"],
            )
            if rule.object_key_template
            else ""
        )
    except (keys.KeyTemplateError, KeyError, ValueError) as exc:
        raise events.Refused("invalid_key", f"cannot render the object key: {exc}", status=422) from None
    work = _work(
        rule,
        biz_key=biz_key,
        slot=None,
        values=None,
        source=TaskRun.Source.EVENT,
        triggered_by=source.identity,
        object_key=object_key,
    )
    work.payload["event"] = {
        "source": source.name,
        "channel": channel,
        "delivery_id": delivery_id,
        "received_at": now.isoformat(),
        "criteria": mapped.criteria,
        "snapshot": mapped.snapshot,
        "refs": mapped.refs,
    }
    return work


def _work(
    rule: TriggerRule,
    *,
    biz_key: str,
    slot: datetime | None,
    values: dict | None,
    source: str,
    triggered_by: str,
    run_after: datetime | None = None,
    start_by: datetime | None = None,
    trial: bool = False,
    object_key: str | None = None,
    intake: bool = True,
) -> Work:
    """`intake`: a trigger of the system (schedule, heartbeat, event) that backpressure may shed or
    coalesce by the rule's class; an operator's run is one-time input and never coalesced."""
    payload = rule_payload(rule, slot)
    if trial:
        payload["trial"] = True  # skills see it too, e.g. to write to a sandbox
    return Work(
        rule=rule,
        biz_key=biz_key,
        skill=rule.skill,
        source=source,
        triggered_by=triggered_by,
        payload=payload,
        policy=rule.run_policy(),
        identity=rule_identity(rule),
        object_key=object_key if object_key is not None else rule_object_key(rule, values=values or {}),
        slot=slot,
        run_after=run_after,
        start_by=start_by,
        is_trial=trial,
        **(_flow_control(rule) if intake else {}),
    )


def _flow_control(rule: TriggerRule) -> dict:
    """The Work fields backpressure and coalescing read, from the rule's recoverability class."""
    coalesce = rule.recoverability == TriggerRule.Recoverability.COALESCE
    return {
        "recoverability": rule.recoverability,
        "coalesce_window": timedelta(seconds=rule.coalesce_window_seconds or 0) if coalesce else None,
    }


def _params(rule: TriggerRule) -> dict:
    return rule.params if isinstance(rule.params, dict) else {}


# An example event for the admin's key preview: the `:` shows how sender values are escaped.
EXAMPLE_CRITERIA = {"object_id": "order:7", "action": "shipped", "version": "2"}


def rule_key_examples(rule: TriggerRule, *, now: datetime) -> list[tuple[str, str]]:
    """(what, biz_key) pairs the admin shows beside the template: the keys this saved rule's next
    slot (or an example event), run now and a trial would claim. Raises what rendering raises."""
    if rule.kind == TriggerRule.Kind.EVENT:
        business_date = now.astimezone(schedule.validate_timezone(rule.timezone)).date().isoformat()
        key = events.render_key(
            rule.dedupe_key_template,
            rule_id=rule.pk,
            rule=rule.name,
            source="<source>",
            criteria=EXAMPLE_CRITERIA,
            business_date=business_date,
            params=_params(rule),
        )
        return [("event", key)]
    slot = schedule.next_slot(rule.schedule_spec(), now) or now.replace(second=0, microsecond=0)
    return [(kind, rule_render_key(rule, slot, kind=kind)) for kind in (keys.SLOT, keys.MANUAL, keys.TRIAL)]
