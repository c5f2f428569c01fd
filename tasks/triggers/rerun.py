"""Re-run slots an operator picked where they found them: missed slots chosen by their decisions
(the decision list, reached from the status board) or a rule's slots chosen by instant (the API,
`harness backfill --slots`). Exactly those slots, each claimed as a backfill would claim it
(rule_fire: the slot's own biz_key, its dedupe, its approval), paced like a backfill, audited.

A slot that already has a run is refused with the run: one run per key, so a *failed* slot is not
run again here; its run is replayed (retry now, on the run page or its ticket), which keeps the key.

Plan first (creates nothing), then `slots_rerun` makes the plan again from the same choice and
claims it only if it still says the same: what the operator confirmed is what runs."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from harness_site.audit.models import AuditEntry
from harness_site.audit.services import actor_name, audit_record
from runs.models import Decision, TaskRun
from tasks.models import TriggerRule
from tasks.rules import schedule
from tasks.triggers.operator import DEFAULT_BACKFILL_SPACING, MAX_BACKFILL_RUNS, RuleActionError, rule_fire
from tasks.triggers.work import rule_render_key

# Why a chosen slot is not re-run (codes; the admin words them).
HAS_RUN = "has_run"  # its biz_key already has a run: replay that run instead
SAME_KEY = "same_key"  # another chosen slot has its biz_key (a template without {slot})
NO_SLOT = "no_slot"  # a trigger's decision (shed, coalesced), not a scheduled slot
NO_RULE = "no_rule"  # its rule was deleted
NOT_A_SLOT = "not_a_slot"  # an instant the rule's schedule has no slot at
NOT_DUE = "not_due"  # not yet due: the scheduler will handle it

# Kinds whose slots are instants of a schedule, so they can be chosen by instant.
SLOTTED_KINDS = (TriggerRule.Kind.CRON, TriggerRule.Kind.INTERVAL, TriggerRule.Kind.ONCE)


@dataclass(frozen=True)
class RerunItem:
    decision_id: int | None  # None: chosen by instant, and no decision was recorded for it
    rule_id: int | None
    rule_name: str
    slot: datetime | None
    reason: str  # the decision's reason ("" when there is none)
    biz_key: str = ""
    refused: str = ""  # "" (it will run) or one of the codes above
    run_id: int | None = None  # the run that has its key (HAS_RUN)
    run_state: str = ""  # that run's state: a failed one is replayed on its run, not re-run here


@dataclass(frozen=True)
class RerunPlan:
    items: list[RerunItem]
    spacing: timedelta
    planned_at: datetime
    rules: dict[int, TriggerRule] = field(default_factory=dict)

    @property
    def to_run(self) -> list[RerunItem]:
        return [i for i in self.items if not i.refused]

    @property
    def signature(self) -> list[str]:
        """What a confirmation holds the plan to: the keys that will be claimed, in order."""
        return [i.biz_key for i in self.to_run]


def slots_rerun_plan(
    *, decision_ids: list[int], now: datetime, spacing: timedelta = DEFAULT_BACKFILL_SPACING
) -> RerunPlan:
    """What re-running the chosen decisions' slots would do: each slot's biz_key (the rule's own
    template, as the tick and a backfill render it) and whether it runs or why not. Ordered by slot.
    Three queries: the decisions with their rules, and the runs that already have those keys."""
    _check_count(len(decision_ids))
    decisions = list(
        Decision.objects.filter(id__in=decision_ids).select_related("rule").order_by("slot", "rule_id", "id")
    )
    chosen: list[tuple[Decision, str]] = []
    items: list[RerunItem] = []
    for d in decisions:
        base = _base(d.id, d.rule, d.slot, d.reason, rule_id=d.rule_id)
        if d.rule is None:
            items.append(RerunItem(**base, refused=NO_RULE))
        elif d.slot is None:
            items.append(RerunItem(**base, biz_key=d.biz_key, refused=NO_SLOT))
        else:
            chosen.append((d, rule_render_key(d.rule, d.slot)))
    items += _claimable([(d.id, d.rule, d.slot, d.reason, key) for d, key in chosen], now=now)
    return _plan(items, spacing=spacing, now=now, rules={d.rule_id: d.rule for d, _ in chosen})


def rule_slots_rerun_plan(
    *, rule: TriggerRule, slots: list[datetime], now: datetime, spacing: timedelta = DEFAULT_BACKFILL_SPACING
) -> RerunPlan:
    """The same plan for a rule's slots chosen by instant (API, command line). An instant the rule
    has no slot at, or one not yet due (the scheduler's to handle), is refused; a slot's decision,
    if any, gives its reason. Two queries: the slots' decisions and the runs that have their keys."""
    if rule.kind not in SLOTTED_KINDS:
        raise RuleActionError(f"A {rule.kind} rule has no scheduled slots to re-run.", field="slots")
    unique = sorted(set(slots))
    _check_count(len(unique))
    spec = rule.schedule_spec()
    try:
        schedule.validate_spec(spec)
    except schedule.ScheduleError as exc:
        raise RuleActionError("The rule's schedule is invalid; fix the rule first.") from exc
    decided = {
        slot: (decision_id, reason)
        for slot, decision_id, reason in Decision.objects.filter(rule=rule, slot__in=unique).values_list(
            "slot", "id", "reason"
        )
    }
    items: list[RerunItem] = []
    chosen = []
    for slot in unique:
        decision_id, reason = decided.get(slot, (None, ""))
        base = _base(decision_id, rule, slot, reason, rule_id=rule.id)
        if slot not in schedule.slots_between(spec, slot - timedelta(microseconds=1), slot):
            items.append(RerunItem(**base, refused=NOT_A_SLOT))
        elif slot > now or (rule.next_fire_at is not None and slot >= rule.next_fire_at):
            items.append(RerunItem(**base, refused=NOT_DUE))
        else:
            chosen.append((decision_id, rule, slot, base["reason"], rule_render_key(rule, slot)))
    items += _claimable(chosen, now=now)
    return _plan(items, spacing=spacing, now=now, rules={rule.id: rule} if chosen else {})


def _check_count(n: int) -> None:
    if n > MAX_BACKFILL_RUNS:  # the same cap as a backfill
        raise RuleActionError(f"Choose at most {MAX_BACKFILL_RUNS} slots at once.", field="slots")


def _base(
    decision_id: int | None, rule: TriggerRule | None, slot: datetime | None, reason: str, *, rule_id: int | None
) -> dict[str, Any]:
    return {
        "decision_id": decision_id,
        "rule_id": rule_id,
        "rule_name": rule.name if rule else "",
        "slot": slot,
        "reason": reason,
    }


def _claimable(chosen: list[tuple], *, now: datetime) -> list[RerunItem]:
    """(decision id, rule, slot, reason, biz_key) → items: runs, or refused because its key has a
    run or an earlier chosen slot has its key. One query."""
    keys = [key for *_, key in chosen]
    found = TaskRun.objects.filter(biz_key__in=keys).values_list("biz_key", "id", "state") if keys else []
    runs = {key: (run_id, state) for key, run_id, state in found}
    seen: set[str] = set()
    items = []
    for decision_id, rule, slot, reason, key in chosen:
        base = {**_base(decision_id, rule, slot, reason, rule_id=rule.id), "biz_key": key}
        if key in runs:
            items.append(RerunItem(**base, refused=HAS_RUN, run_id=runs[key][0], run_state=runs[key][1]))
        elif key in seen:
            items.append(RerunItem(**base, refused=SAME_KEY))
        else:
            seen.add(key)
            items.append(RerunItem(**base))
    return items


def _plan(items: list[RerunItem], *, spacing: timedelta, now: datetime, rules: dict) -> RerunPlan:
    items.sort(key=lambda i: (i.slot is None, i.slot or now, i.rule_name, i.decision_id or 0))
    return RerunPlan(items=items, spacing=spacing, planned_at=now, rules=rules)


class RerunStale(RuleActionError):
    """The plan made again differs from the one confirmed (a slot ran meanwhile): nothing was created."""


def slots_rerun(
    *,
    decision_ids: list[int] | None = None,
    rule: TriggerRule | None = None,
    slots: list[datetime] | None = None,
    confirmed: list[str],
    spacing: timedelta,
    actor,
    now: datetime,
    reason: str = "",
) -> dict:
    """Claim exactly the confirmed plan: make it again from the same choice (decision ids, or a rule
    and its slots) and claim it only if it would claim the same keys (`confirmed`,
    RerunPlan.signature), else raise RerunStale and create nothing. The i-th run becomes due at
    now + i x spacing. One audit entry per rule, naming its slots.
    Returns {"created", "dedupe_hits", "runs": [run ids]}."""
    with transaction.atomic():
        if rule is not None:
            plan = rule_slots_rerun_plan(rule=rule, slots=slots or [], now=now, spacing=spacing)
        else:
            plan = slots_rerun_plan(decision_ids=decision_ids or [], now=now, spacing=spacing)
        if plan.signature != confirmed:
            raise RerunStale(
                f"The plan changed since it was shown: it would now run {len(plan.to_run)} slot(s), "
                f"not {len(confirmed)}; nothing was created."
            )
        created = hits = 0
        run_ids: list[int] = []
        by_rule: dict[int, list[str]] = {}
        for item in plan.to_run:
            assert item.rule_id is not None and item.slot is not None  # refused otherwise
            claim = rule_fire(
                rule=plan.rules[item.rule_id],
                actor=actor_name(actor),
                now=now,
                slot=item.slot,
                source=TaskRun.Source.BACKFILL,
                run_after=now + spacing * created,
            )
            created += claim.created
            hits += not claim.created
            if claim.run is not None:
                run_ids.append(claim.run.id)
            by_rule.setdefault(item.rule_id, []).append(item.slot.isoformat())
        for rule_id, instants in by_rule.items():
            audit_record(
                actor=actor,
                action=AuditEntry.Action.RULE_BACKFILL,
                target=plan.rules[rule_id],
                now=now,
                reason=reason,
                details={"chosen_slots": instants, "spacing_seconds": spacing.total_seconds()},
            )
    return {"created": created, "dedupe_hits": hits, "runs": run_ids}
