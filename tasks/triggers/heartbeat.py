"""Heartbeat rules (dead-man's switch): a rule that fires when its ping does not arrive in time."""

from datetime import datetime, timedelta

from runs.engine.claims import ClaimBatch, ClaimTally
from runs.models import TaskRun
from tasks.models import TriggerRule
from tasks.triggers.slot import slot_handle


def heartbeat_tick(rule: TriggerRule, *, now: datetime, result: ClaimTally, batch: ClaimBatch | None = None) -> None:
    """A heartbeat rule is due: no ping arrived within period + grace. Fire it once, then again every
    period while the silence lasts; a ping moves next_fire_at forward (rule_ping)."""
    slot = rule.next_fire_at
    if slot is None:  # not scheduled (paused meanwhile): nothing is due
        return
    slot_handle(rule, slot, source=TaskRun.Source.HEARTBEAT, now=now, result=result, batch=batch)
    every = timedelta(seconds=rule.heartbeat_every_seconds or 60)
    following = slot + every
    while following <= now:  # a long outage of the scheduler itself: fire once, not once per period
        following += every
    TriggerRule.objects.filter(pk=rule.pk).update(last_slot_at=slot, next_fire_at=following)


def rule_ping(*, rule: TriggerRule, now: datetime) -> datetime:
    """Record a heartbeat ping: the rule now fires only if the next ping is later than period + grace.
    Returns the new deadline; raises ValueError for a rule that is not a heartbeat rule."""
    if rule.kind != TriggerRule.Kind.HEARTBEAT:
        raise ValueError(f"rule {rule.name!r} is a {rule.kind} rule, not a heartbeat rule")
    deadline = now + rule.heartbeat_deadline()
    TriggerRule.objects.filter(pk=rule.pk).update(last_ping_at=now, next_fire_at=deadline if rule.enabled else None)
    return deadline
