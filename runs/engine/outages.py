"""When was the scheduler down? Its own history of ticks, kept compact: a SchedulerTick row holds the
last tick, and a SchedulerOutage row is written only when a tick finds that no tick ran for longer
than the slot grace before it (the slots in between were first seen late, by this tick). A change
plan replays slots against these spans (tasks/triggers/plan.py); an incident is built on them.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from runs.models import SchedulerOutage, SchedulerTick

SCHEDULER = "scheduler"  # the beat tick's SchedulerTick name (tasks/triggers/scheduler.py)

# A scheduler that has not ticked for this many tick periods is considered stalled.
STALL_FACTOR = 10
MIN_STALL = timedelta(seconds=30)


def slot_grace() -> timedelta:
    """How late a slot may be claimed and still count as on time (HARNESS_SLOT_GRACE_SECONDS)."""
    return timedelta(seconds=settings.HARNESS["SLOT_GRACE_SECONDS"])


def scheduler_stall_after() -> timedelta:
    """How long without a tick before the scheduler counts as stalled (the stall alert, /healthz and the
    objective pass agree on it)."""
    return max(timedelta(seconds=settings.HARNESS["TICK_SECONDS"] * STALL_FACTOR), MIN_STALL)


@dataclass(frozen=True)
class Outage:
    started_at: datetime  # the last tick before
    ended_at: datetime | None  # the first tick after (None: still down, as of `now`)


@dataclass(frozen=True)
class TickHistory:
    last_tick: datetime | None
    since: datetime | None  # outages are recorded from here on (None: no history yet)
    outages: tuple[Outage, ...]


def scheduler_tick_record(*, now: datetime, claimed: int, dedupe_hits: int, name: str = SCHEDULER) -> None:
    """Record a tick at `now`: the last tick moves on (never back, for a slower beat's tick), and a
    gap longer than the slot grace since the last tick becomes one outage row. O(1): one row read
    under lock, one update, an insert only after an outage."""
    with transaction.atomic():
        # Locked, so two beats ticking at once record one outage, not two.
        row = SchedulerTick.objects.select_for_update().filter(name=name).first()
        if row is None:  # the first tick ever (two at once: get_or_create keeps one row)
            SchedulerTick.objects.get_or_create(
                name=name,
                defaults={
                    "last_tick_at": now,
                    "last_claimed": claimed,
                    "last_dedupe_hits": dedupe_hits,
                    "history_since": now,
                },
            )
            return
        previous = row.last_tick_at
        if now - previous > slot_grace():
            SchedulerOutage.objects.create(name=name, started_at=previous, ended_at=now)
        SchedulerTick.objects.filter(pk=row.pk).update(
            last_tick_at=max(previous, now),
            last_claimed=claimed,
            last_dedupe_hits=dedupe_hits,
            # A row written by an earlier release has no history: it begins at its last tick.
            history_since=row.history_since or previous,
        )


def outages_between(since: datetime, until: datetime, *, now: datetime, name: str = SCHEDULER) -> TickHistory:
    """The scheduler's outages that overlap (since, until], by start, with the last tick and the
    instant the history begins. An outage still going on at `now` (no tick for longer than the slot
    grace) ends in None."""
    tick = SchedulerTick.objects.filter(name=name).values_list("last_tick_at", "history_since").first()
    last_tick, history_since = tick if tick else (None, None)
    # outage_name_ended_idx: the outages that ended after `since`, few.
    rows = (
        SchedulerOutage.objects.filter(name=name, ended_at__gt=since, started_at__lt=until)
        .order_by("started_at")
        .values_list("started_at", "ended_at")
    )
    found = [Outage(start, end) for start, end in rows]
    if last_tick is not None and now - last_tick > slot_grace() and last_tick < until:
        found.append(Outage(last_tick, None))
    return TickHistory(last_tick=last_tick, since=history_since, outages=tuple(found))


def outage_sweep(*, now: datetime, days: int | None = None, name: str = SCHEDULER) -> int:
    """Delete outages that ended more than `days` (default: the decisions' retention) before `now`,
    and move the history's start past them, so a pruned span reads as unknown, not as ticking."""
    days = settings.HARNESS["DECISION_RETENTION_DAYS"] if days is None else days
    cutoff = now - timedelta(days=days)
    deleted, _by_model = SchedulerOutage.objects.filter(name=name, ended_at__lt=cutoff).delete()
    SchedulerTick.objects.filter(name=name, history_since__lt=cutoff).update(history_since=cutoff)
    return deleted
