"""Every slot is accounted for (invariant 3): the slots a rule owes an answer for, and the one answer
each got, so a test can assert that the two match."""

from datetime import datetime

from runs.models import Decision, TaskRun
from tasks.models import TriggerRule
from tasks.rules import schedule


def due_slots(rule: TriggerRule, now: datetime) -> list[datetime]:
    """Every slot from the rule's next_fire_at up to now: what the scheduler owes an answer for."""
    first = rule.next_fire_at
    return [first, *schedule.slots_between(rule.schedule_spec(), first, now)]


def outcomes(rule: TriggerRule) -> dict[datetime, str]:
    """slot → "run:<source>" or "decision:<reason>"; fails if any slot has more than one."""
    runs = list(TaskRun.objects.filter(rule=rule).values_list("slot", "source"))
    decisions = list(Decision.objects.filter(rule=rule).values_list("slot", "reason"))
    result = {slot: f"run:{source}" for slot, source in runs}
    result.update({slot: f"decision:{reason}" for slot, reason in decisions})
    assert len(result) == len(runs) + len(decisions), "a slot has both a run and a decision, or two of one"
    return result
