"""Re-run slots an operator picked where they found them (the decision list): exactly those slots,
each claimed as a backfill would claim it (rule_fire: the slot's own biz_key, its dedupe, its
approval), paced like a backfill, audited. A slot that already has a run is refused with the run.

Plan first (creates nothing), then `slots_rerun` makes the plan again from the same decisions and
claims it only if it still says the same: what the operator confirmed is what runs."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from harness_site.audit.models import AuditEntry
from harness_site.audit.services import audit_record
from runs.models import Decision, TaskRun
from tasks.models import TriggerRule
from tasks.triggers.operator import DEFAULT_BACKFILL_SPACING, MAX_BACKFILL_RUNS, RuleActionError, _name, rule_fire
from tasks.triggers.work import rule_render_key

# Why a chosen slot is not re-run (codes; the admin words them).
HAS_RUN = "has_run"  # its biz_key already has a run: replay that run instead
SAME_KEY = "same_key"  # another chosen slot has its biz_key (a template without {slot})
NO_SLOT = "no_slot"  # a trigger's decision (shed, coalesced), not a scheduled slot
NO_RULE = "no_rule"  # its rule was deleted


@dataclass(frozen=True)
class RerunItem:
    decision_id: int
    rule_id: int | None
    rule_name: str
    slot: datetime | None
    reason: str  # the decision's reason
    biz_key: str = ""
    refused: str = ""  # "" (it will run), HAS_RUN, SAME_KEY, NO_SLOT or NO_RULE
    run_id: int | None = None  # the run that has its key (HAS_RUN)


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
    if len(decision_ids) > MAX_BACKFILL_RUNS:
        raise RuleActionError(f"Choose at most {MAX_BACKFILL_RUNS} slots at once.")
    decisions = list(
        Decision.objects.filter(id__in=decision_ids).select_related("rule").order_by("slot", "rule_id", "id")
    )
    rendered: list[tuple[Decision, str]] = []
    items: list[RerunItem] = []
    for d in decisions:
        base: dict[str, Any] = {
            "decision_id": d.id,
            "rule_id": d.rule_id,
            "rule_name": d.rule.name if d.rule else "",
            "slot": d.slot,
            "reason": d.reason,
        }
        if d.rule is None:
            items.append(RerunItem(**base, refused=NO_RULE))
        elif d.slot is None:
            items.append(RerunItem(**base, biz_key=d.biz_key, refused=NO_SLOT))
        else:
            rendered.append((d, rule_render_key(d.rule, d.slot)))
    keys = [key for _, key in rendered]
    runs = dict(TaskRun.objects.filter(biz_key__in=keys).values_list("biz_key", "id")) if keys else {}
    seen: set[str] = set()
    rules: dict[int, TriggerRule] = {}
    for d, key in rendered:
        base = {
            "decision_id": d.id,
            "rule_id": d.rule_id,
            "rule_name": d.rule.name,
            "slot": d.slot,
            "reason": d.reason,
            "biz_key": key,
        }
        if key in runs:
            items.append(RerunItem(**base, refused=HAS_RUN, run_id=runs[key]))
        elif key in seen:
            items.append(RerunItem(**base, refused=SAME_KEY))
        else:
            seen.add(key)
            rules[d.rule_id] = d.rule
            items.append(RerunItem(**base))
    items.sort(key=lambda i: (i.slot is None, i.slot or now, i.rule_name, i.decision_id))
    return RerunPlan(items=items, spacing=spacing, planned_at=now, rules=rules)


class RerunStale(RuleActionError):
    """The plan made again differs from the one confirmed (a slot ran meanwhile): nothing was created."""


def slots_rerun(
    *, decision_ids: list[int], confirmed: list[str], spacing: timedelta, actor, now: datetime, reason: str = ""
) -> dict:
    """Claim exactly the confirmed plan: make it again from the same decisions and claim it only if
    it would claim the same keys (`confirmed`, RerunPlan.signature), else raise RerunStale and create
    nothing. The i-th run becomes due at now + i x spacing. One audit entry per rule, naming its slots.
    Returns {"created", "dedupe_hits", "runs": [run ids]}."""
    with transaction.atomic():
        plan = slots_rerun_plan(decision_ids=decision_ids, now=now, spacing=spacing)
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
                actor=_name(actor),
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
        for rule_id, slots in by_rule.items():
            audit_record(
                actor=actor,
                action=AuditEntry.Action.RULE_BACKFILL,
                target=plan.rules[rule_id],
                now=now,
                reason=reason,
                details={"chosen_slots": slots, "spacing_seconds": spacing.total_seconds()},
            )
    return {"created": created, "dedupe_hits": hits, "runs": run_ids}
