"""Catch-up "all" across many ticks, pure (invariant 3): the cap and the pacing hold for the whole
outage, however many bounded ticks it takes.

`simulate` calls the pure planner exactly as tasks/triggers/scheduler.py `_tick_rule` does: each
tick takes at most `max_slots` due slots from the rule's pointer, tells the planner whether the
list is complete and how many late slots follow it (counted up to the cap), advances the pointer
past the slots the planner planned, and paces the chosen ones after the rule's last scheduled
catch-up run.
"""

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

from tasks.rules import schedule
from tasks.rules.catchup import CAPPED, CATCHUP, MISSED, RUN, pace, plan_due_slots

GRACE = timedelta(seconds=10)
MINUTE = timedelta(minutes=1)
T0 = datetime(2026, 3, 1, 0, 0, tzinfo=UTC)
ZONE_NIGHTS = {  # a per-minute cron across the zone's fall-back night (a repeated hour, or half hour)
    "America/New_York": datetime(2026, 11, 1, 3, 0, tzinfo=UTC),
    "Europe/Berlin": datetime(2026, 10, 24, 22, 0, tzinfo=UTC),
    "Australia/Lord_Howe": datetime(2026, 4, 4, 12, 0, tzinfo=UTC),
}


@dataclass
class Outcome:
    actions: dict[datetime, str] = field(default_factory=dict)
    run_after: dict[datetime, datetime] = field(default_factory=dict)
    planned_at: dict[datetime, datetime] = field(default_factory=dict)  # slot -> the tick that planned it
    ticks: int = 0
    complete_at: int | None = None  # index of the first tick that saw the whole backlog


def simulate(
    slots: list[datetime],
    ticks: list[datetime],
    *,
    max_slots: int,
    max_count: int | None,
    max_delay: timedelta = timedelta(days=2),
    spacing: timedelta = timedelta(0),
) -> Outcome:
    out = Outcome()
    last_run_after = None
    pointer = 0
    for number, now in enumerate(ticks):
        end = bisect_right(slots, now)  # slots[pointer:end] are due
        if end <= pointer:
            continue
        batch = slots[pointer : min(end, pointer + max_slots)]
        rest = end - pointer - len(batch)
        later = None
        if max_count is not None and rest:
            late_end = bisect_left(slots, now - GRACE)  # slots before it are late: now - slot > GRACE
            later = min(max_count, max(0, late_end - pointer - len(batch)))
        plans = plan_due_slots(
            batch,
            now=now,
            catchup="all",
            max_delay=max_delay,
            grace=GRACE,
            complete=not rest,
            max_count=max_count,
            later=later,
        )
        # A non-empty prefix of the batch, in order: the rest is left for the next tick.
        assert plans and [p.slot for p in plans] == batch[: len(plans)]
        for p in plans:
            assert p.slot not in out.actions, "a slot planned twice"
            out.actions[p.slot] = p.action
            out.planned_at[p.slot] = now
        paced = pace([p.slot for p in plans if p.action == CATCHUP], now=now, spacing=spacing, last=last_run_after)
        out.run_after.update(paced)
        if paced:
            last_run_after = max(paced.values())
        pointer += len(plans)
        out.ticks += 1
        if out.complete_at is None and not rest and len(plans) == len(batch):
            out.complete_at = number
    return out


def expected_all(slots: list[datetime], now: datetime, *, max_count: int, max_delay: timedelta) -> dict:
    """One tick that sees the whole outage: the max_count most recent late slots within the max
    delay run, the older ones within it are capped, beyond it missed, on-time ones run."""
    within = [s for s in slots if GRACE < now - s <= max_delay]
    chosen = set(within[max(0, len(within) - max_count) :]) if max_count else set()
    return {
        s: RUN if now - s <= GRACE else CATCHUP if s in chosen else CAPPED if s in within else MISSED for s in slots
    }


# --- the cap of catch-up "all" holds for the whole outage ----------------------------------------


def test_1003_missed_minutes_capped_at_5_run_the_5_most_recent_over_two_ticks():
    slots = [T0 + MINUTE * m for m in range(1003)]
    now = slots[-1] + timedelta(seconds=30)
    out = simulate(slots, [now] * 5, max_slots=1000, max_count=5)
    assert [s for s in slots if out.actions[s] == CATCHUP] == slots[-5:]
    assert [out.actions[s] for s in slots[:-5]] == [CAPPED] * 998
    assert out.ticks == 2


@pytest.mark.parametrize("minutes", [1, 3, 5, 6, 20, 999, 1000, 1001, 1003, 1004, 2003, 2500])
@pytest.mark.parametrize("max_slots", [1000, 7, 5, 4, 1])
@pytest.mark.parametrize("max_count", [0, 1, 3, 5])
def test_the_cap_applies_to_the_whole_outage_however_many_ticks_it_takes(minutes, max_slots, max_count):
    slots = [T0 + MINUTE * m for m in range(minutes)]
    now = slots[-1] + timedelta(seconds=30)
    max_delay = timedelta(minutes=1500)  # longer outages also have slots beyond it
    out = simulate(slots, [now] * (minutes + 1), max_slots=max_slots, max_count=max_count, max_delay=max_delay)
    assert out.actions == expected_all(slots, now, max_count=max_count, max_delay=max_delay)


@pytest.mark.parametrize("zone", list(ZONE_NIGHTS))
@pytest.mark.parametrize("max_slots", [1000, 37])
def test_the_cap_holds_for_an_outage_across_a_dst_night(zone, max_slots):
    # The cap counts slots (instants): both passes of a repeated hour are slots of the outage.
    spec = schedule.ScheduleSpec(kind="cron", timezone=zone, cron="*/3 * * * *")
    start = ZONE_NIGHTS[zone]
    slots = schedule.slots_between(spec, start, start + timedelta(hours=6))
    local = [s.astimezone(ZoneInfo(zone)) for s in slots]
    assert len({(t.hour, t.minute) for t in local}) < len(local), "the outage spans a repeated wall time"
    now = slots[-1] + timedelta(seconds=40)
    out = simulate(slots, [now] * len(slots), max_slots=max_slots, max_count=5)
    assert out.actions == expected_all(slots, now, max_count=5, max_delay=timedelta(days=2))


@pytest.mark.parametrize(
    ("interval", "max_slots"),
    [
        (timedelta(seconds=1), 1000),
        (MINUTE, 1000),
        (timedelta(minutes=10), 1000),
        (timedelta(seconds=1), 7),
        (MINUTE, 7),
    ],
)
@pytest.mark.parametrize("minutes", [20, 1003, 2003])
@pytest.mark.parametrize("max_count", [1, 5])
def test_the_cap_holds_while_new_slots_fall_due_between_ticks(interval, max_slots, minutes, max_count):
    # The scheduler comes back at `back` and ticks every `interval`; a per-minute rule keeps firing.
    # Every slot is late when handled (the ticks are 30 s after the minute), so the outage is every
    # slot handled until the first tick that sees the whole backlog.
    slots = [T0 + MINUTE * m for m in range(2 * minutes + 200)]
    back = T0 + MINUTE * (minutes - 1) + timedelta(seconds=30)
    ticks = [back + interval * k for k in range(3000)]
    ticks = [t for t in ticks if t <= slots[-1]]
    out = simulate(slots, ticks, max_slots=max_slots, max_count=max_count)
    assert out.complete_at is not None
    outage_end = ticks[out.complete_at]
    outage = [s for s in slots if s <= outage_end]
    chosen = [s for s in outage if out.actions[s] == CATCHUP]
    late = [s for s in outage if out.actions[s] != RUN]
    assert chosen == late[-max_count:]
    assert {out.actions[s] for s in late if s not in chosen} <= {CAPPED}


# --- pacing continues from the last scheduled catch-up run ----------------------------------------


def test_pace_continues_after_the_last_scheduled_catch_up_run():
    now = T0 + timedelta(hours=12)
    slots = [T0 + MINUTE * m for m in range(3)]
    spacing = timedelta(seconds=60)
    assert pace(slots, now=now, spacing=spacing, last=now + timedelta(seconds=120)) == {
        slots[0]: now + timedelta(seconds=180),
        slots[1]: now + timedelta(seconds=240),
        slots[2]: now + timedelta(seconds=300),
    }
    # A last run long enough ago does not delay the next one.
    assert pace(slots[:1], now=now, spacing=spacing, last=now - timedelta(seconds=60)) == {slots[0]: now}
    assert pace(slots[:1], now=now, spacing=spacing, last=now - timedelta(seconds=30)) == {
        slots[0]: now + timedelta(seconds=30)
    }
    assert pace(slots, now=now, spacing=spacing, last=None) == {s: now + spacing * i for i, s in enumerate(slots)}


@pytest.mark.parametrize("max_count", [None, 5, 12])
@pytest.mark.parametrize("max_slots", [1, 2, 3, 1000])
@pytest.mark.parametrize("tick_every", [timedelta(seconds=1), timedelta(seconds=20), timedelta(seconds=61)])
def test_catch_up_runs_are_never_closer_than_the_spacing_across_ticks(max_count, max_slots, tick_every):
    slots = [T0 + MINUTE * m for m in range(12)]
    back = slots[-1] + timedelta(seconds=30)
    spacing = timedelta(seconds=60)
    ticks = [back + tick_every * k for k in range(40)]
    out = simulate(slots, ticks, max_slots=max_slots, max_count=max_count, spacing=spacing)
    starts = sorted(out.run_after.values())
    assert len(starts) == min(max_count or len(slots), len(slots))
    first = min(out.run_after)
    assert out.run_after[first] == out.planned_at[first]  # the first catch-up run starts at once
    gaps = [b - a for a, b in pairwise(starts)]
    assert all(gap >= spacing for gap in gaps), gaps
    # In slot order: an older missed slot never starts after a newer one.
    assert [out.run_after[s] for s in sorted(out.run_after)] == starts


def test_an_incomplete_batch_leaves_the_slots_that_may_be_the_most_recent_for_the_next_tick():
    slots = [T0 + MINUTE * m for m in range(1000)]
    now = slots[-1] + timedelta(minutes=3, seconds=30)  # 3 more late slots follow the batch
    plans = plan_due_slots(
        slots, now=now, catchup="all", max_delay=timedelta(days=1), grace=GRACE, complete=False, max_count=5, later=3
    )
    # The last 2 of the batch may be among the 5 most recent: the next tick decides them.
    assert [p.slot for p in plans] == slots[:998]
    assert {p.action for p in plans} == {CAPPED}
    # With 5 or more late slots after it, the whole batch is capped, as before.
    plans = plan_due_slots(
        slots, now=now, catchup="all", max_delay=timedelta(days=1), grace=GRACE, complete=False, max_count=5, later=5
    )
    assert len(plans) == 1000 and {p.action for p in plans} == {CAPPED}
