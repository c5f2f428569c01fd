"""What pages and the API read of the objective pass's rows: a rule's objective status now (its
worst open slot, else its last closed one), its last days as met/missed counts, the dashboard's
counts and the rule list's filter. Reads only; the pass that writes the rows, and the stored cause
in words (cause_text), are the engine's (runs/engine/objectives.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from django.db.models import F, QuerySet, Window
from django.db.models.functions import RowNumber

from runs.engine.objectives import cause_text
from runs.models import SlotObjective
from tasks.models import TriggerRule
from tasks.rules import objectives as obj


@dataclass(frozen=True)
class RuleObjective:
    """A rule's objective status now: its worst open slot, else its last closed one."""

    status: str  # a SlotObjective.Status value, "" when no slot was evaluated yet
    label: str
    cause: str
    slot: datetime | None = None
    deadline: datetime | None = None
    expected_finish: datetime | None = None
    acknowledged: bool = False
    checked_at: datetime | None = None  # when the objective pass last looked


_WORST = {obj.BREACHED: 0, obj.AT_RISK: 1, obj.ON_TRACK: 2, obj.MET: 3, obj.EXCUSED: 4}


def objective_status_for_rules(rule_ids: list[int]) -> dict[int, RuleObjective]:
    """For each rule id: its objective status and cause, as of the last pass. Two queries, whatever
    the number of rules: the open slots, and each rule's latest closed slot. A rule with no
    evaluated slot is missing from the answer."""
    if not rule_ids:
        return {}
    found: dict[int, SlotObjective] = {}
    for row in SlotObjective.objects.filter(rule_id__in=rule_ids, closed=False):
        best = found.get(row.rule_id)
        if best is None or (_WORST[row.status], -row.slot.timestamp()) < (_WORST[best.status], -best.slot.timestamp()):
            found[row.rule_id] = row
    missing = [rule_id for rule_id in rule_ids if rule_id not in found]
    if missing:
        latest = (
            SlotObjective.objects.filter(rule_id__in=missing, closed=True)
            .exclude(status=obj.EXCUSED)
            .annotate(n=Window(RowNumber(), partition_by=[F("rule_id")], order_by=F("slot").desc()))
            .filter(n=1)
        )
        for row in latest:
            found[row.rule_id] = row
    return {rule_id: _rule_objective(row) for rule_id, row in found.items()}


def _rule_objective(row: SlotObjective) -> RuleObjective:
    return RuleObjective(
        status=row.status,
        label=str(SlotObjective.Status(row.status).label),
        cause=cause_text(row.cause),
        slot=row.slot,
        deadline=row.deadline,
        expected_finish=row.expected_finish,
        acknowledged=row.acknowledged_at is not None,
        checked_at=row.checked_at,
    )


def objective_history(rule: TriggerRule, *, now: datetime, days: int = 30) -> list[obj.Day]:
    """The rule's last `days` local days as met/missed counts of its closed slots (one query)."""
    today = now.astimezone(ZoneInfo(rule.timezone)).date()
    start = now - timedelta(days=days + 1)
    outcomes = SlotObjective.objects.filter(rule=rule, slot__gte=start, closed=True).values_list("slot", "status")
    return obj.history_days(list(outcomes), timezone=rule.timezone, today=today, days=days)


def objective_counts(*, rule_ids: list[int] | None = None) -> dict[str, int]:
    """Open slots by status now (at risk, breached and on track), for the dashboard."""
    qs = SlotObjective.objects.filter(closed=False)
    if rule_ids is not None:
        qs = qs.filter(rule_id__in=rule_ids)
    counts: dict[str, int] = defaultdict(int)
    for status in qs.values_list("status", flat=True):
        counts[status] += 1
    return dict(counts)


def objective_filter_rules(queryset: QuerySet[TriggerRule], status: str) -> QuerySet[TriggerRule]:
    """Rules whose current objective status (objective_status_for_rules) is `status`: for the rule
    list's filter. Reads the open rows, then each rule's last closed row, like the selector."""
    ids = list(queryset.exclude(objective="").values_list("id", flat=True))
    statuses = objective_status_for_rules(ids)
    return queryset.filter(id__in=[rule_id for rule_id, s in statuses.items() if s.status == status])


__all__ = [
    "RuleObjective",
    "objective_counts",
    "objective_filter_rules",
    "objective_history",
    "objective_status_for_rules",
]
