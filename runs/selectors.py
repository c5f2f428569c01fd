"""Read-only queries for the admin, the commands and /healthz."""

from datetime import datetime, timedelta

from django.conf import settings

from runs.models import SchedulerTick, TaskRun
from tasks.models import TriggerRule

# A scheduler that has not ticked for this many tick periods is considered stalled.
STALL_FACTOR = 10
MIN_STALL = timedelta(seconds=30)


def scheduler_health(*, now: datetime) -> dict:
    tick = SchedulerTick.objects.filter(name="scheduler").first()
    age = (now - tick.last_tick_at).total_seconds() if tick else None
    stall_after = max(timedelta(seconds=settings.HARNESS["TICK_SECONDS"] * STALL_FACTOR), MIN_STALL)
    oldest_due = (
        TaskRun.objects.filter(state=TaskRun.State.PENDING, run_after__lte=now)
        .order_by("run_after")
        .values_list("run_after", flat=True)
        .first()
    )
    slot = oldest_unclaimed_slot(now=now)
    return {
        "ok": age is not None and age <= stall_after.total_seconds(),
        "last_tick_at": tick.last_tick_at if tick else None,
        "last_tick_age_seconds": age,
        "stall_after_seconds": stall_after.total_seconds(),
        "oldest_pending_run_age_seconds": (now - oldest_due).total_seconds() if oldest_due else None,
        # A due slot no tick has turned into a run or a decision yet: grows when the scheduler stops.
        "oldest_unclaimed_slot_age_seconds": (now - slot["at"]).total_seconds() if slot else None,
        "oldest_unclaimed_slot_rule": slot["rule"] if slot else None,
    }


def oldest_unclaimed_slot(*, now: datetime) -> dict | None:
    """The oldest due slot of an enabled rule not yet claimed (rule_due_idx), or None."""
    row = (
        TriggerRule.objects.filter(enabled=True, next_fire_at__lte=now)
        .order_by("next_fire_at")
        .values_list("name", "next_fire_at")
        .first()
    )
    return {"rule": row[0], "at": row[1]} if row else None


def run_list_recent(*, limit: int = 50, rule_name: str | None = None):
    qs = TaskRun.objects.order_by("-trigger_at", "-id")
    if rule_name:
        qs = qs.filter(rule_name=rule_name)
    return qs[:limit]
