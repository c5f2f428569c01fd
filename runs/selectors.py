"""Read-only queries for the admin, the commands and /healthz."""

from datetime import datetime, timedelta

from django.conf import settings
from django.utils.translation import gettext as _

from deadletters.models import DeadLetter
from harness_site.audit.models import AuditEntry
from runs.models import Decision, SchedulerTick, TaskRun
from tasks.models import TriggerRule

# A scheduler that has not ticked for this many tick periods is considered stalled.
STALL_FACTOR = 10
MIN_STALL = timedelta(seconds=30)


def slot_grace() -> timedelta:
    """How late a slot may be claimed and still count as on time (HARNESS_SLOT_GRACE_SECONDS)."""
    return timedelta(seconds=settings.HARNESS["SLOT_GRACE_SECONDS"])


def scheduler_health(*, now: datetime) -> dict:
    """The scheduler's health for /healthz and the stall alert.

    Not ok when no tick ran for the stall period, or as soon as a due slot has waited longer than
    the slot grace (from then on slots are lost to the catch-up policy); `reason` says which.
    """
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
    slot_age = (now - slot["at"]).total_seconds() if slot else None
    grace = slot_grace().total_seconds()
    reason = ""
    if age is None or age > stall_after.total_seconds():
        reason = "no scheduler tick yet" if age is None else f"no scheduler tick for {age:.0f}s"
    elif slot_age is not None and slot_age > grace:
        reason = f"a slot of rule {slot['rule']} is {slot_age:.0f}s overdue (grace {grace:.0f}s)"
    return {
        "ok": not reason,
        "reason": reason,
        "last_tick_at": tick.last_tick_at if tick else None,
        "last_tick_age_seconds": age,
        "stall_after_seconds": stall_after.total_seconds(),
        "slot_grace_seconds": grace,
        "oldest_pending_run_age_seconds": (now - oldest_due).total_seconds() if oldest_due else None,
        # A due slot no tick has turned into a run or a decision yet: grows when the scheduler stops.
        "oldest_unclaimed_slot_age_seconds": slot_age,
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


def run_timeline(run: TaskRun) -> dict:
    """Everything the run page shows, in reading order (a handful of queries)."""
    attempts = list(run.attempt_set.order_by("number"))
    decisions = list(Decision.objects.filter(rule_id=run.rule_id, slot=run.slot)) if run.rule_id and run.slot else []
    audit = list(AuditEntry.objects.filter(target_type="run", target_id=str(run.id)).order_by("at"))
    tickets = list(DeadLetter.objects.filter(run=run).order_by("created_at"))
    return {
        "steps": [
            (
                _("triggered"),
                run.trigger_at,
                _("%(source)s by %(who)s") % {"source": run.get_source_display(), "who": run.triggered_by or "-"},
            ),
            (
                _("started"),
                run.start_at,
                _("first attempt on %(worker)s") % {"worker": attempts[0].worker} if attempts else _("not yet"),
            ),
            (_("finished"), run.finish_at, run.get_state_display()),
        ],
        "queue_delay": duration_text(run.start_at - run.trigger_at) if run.start_at else "-",
        "execution_time": duration_text(run.finish_at - run.start_at) if run.finish_at and run.start_at else "-",
        "attempts": [
            {"a": a, "duration": duration_text(a.finished_at - a.started_at) if a.finished_at else _("running")}
            for a in attempts
        ],
        "decisions": decisions,
        "audit": audit,
        "tickets": tickets,
        "payload": run.payload,
        "is_trial": run.is_trial,
        "state": run.get_state_display(),
    }


def duration_text(delta) -> str:
    """A duration for reading: 1.234s, 2.5 min, 3.0 h, 2.0 days."""
    if delta is None:
        return "-"
    s = delta.total_seconds()
    if abs(s) < 60:
        return f"{s:.3f}s"
    if abs(s) < 3600:
        return _("%(n).1f min") % {"n": s / 60}
    return _("%(n).1f h") % {"n": s / 3600} if abs(s) < 86400 else _("%(n).1f days") % {"n": s / 86400}
