"""Business-hours openings and readiness deadlines on DST days (invariant 4), pure.

One behaviour (docs/evaluation.md, "Local times on DST days"): a local time of day (an opening,
a deadline) is read on the wall clock of the rule's zone. It happens at every instant whose wall
time it is, so twice in a repeated hour; a slot waits for the first occurrence at or after
itself. A local time inside a gap never happens: it falls at the gap's end, the first instant
after the jump.

Each rule is checked against a brute-force model that walks the zone's wall clock minute by minute.
"""

from bisect import bisect_left
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

from tasks.rules.evaluation import (
    DECIDE,
    HOLD,
    NOT_READY_EXPIRED,
    RUN,
    Facts,
    Guards,
    evaluate_slot,
    in_hours,
    next_opening,
    ready_deadline_at,
)

MINUTE = timedelta(minutes=1)

# 2026 transitions. gap: a wall time that does not exist on gap_day and the instant the gap ends;
# repeat: a wall time that happens twice on repeat_day (first and second pass).
ZONES = {
    "America/New_York": {
        "gap_day": date(2026, 3, 8),
        "gap_wall": time(2, 30),  # 02:00-02:59 does not exist
        "gap_end": datetime(2026, 3, 8, 7, 0, tzinfo=UTC),  # 03:00 EDT
        "repeat_day": date(2026, 11, 1),
        "repeat_wall": time(1, 40),  # 01:00-01:59 happens twice (EDT, then EST)
    },
    "Europe/Berlin": {
        "gap_day": date(2026, 3, 29),
        "gap_wall": time(2, 30),
        "gap_end": datetime(2026, 3, 29, 1, 0, tzinfo=UTC),  # 03:00 CEST
        "repeat_day": date(2026, 10, 25),
        "repeat_wall": time(2, 40),  # 02:00-02:59 happens twice (CEST, then CET)
    },
    "Australia/Lord_Howe": {  # a 30-minute shift
        "gap_day": date(2026, 10, 4),
        "gap_wall": time(2, 15),  # 02:00-02:29 does not exist
        "gap_end": datetime(2026, 10, 3, 15, 30, tzinfo=UTC),  # 02:30 +11:00
        "repeat_day": date(2026, 4, 5),
        "repeat_wall": time(1, 50),  # 01:30-01:59 happens twice (+11:00, then +10:30)
    },
}
ZONE_NAMES = list(ZONES)


def at(zone: str, day: date, wall: time, fold: int = 0) -> datetime:
    """The UTC instant of a wall time that exists (fold=1: the second pass of a repeated hour)."""
    local = datetime.combine(day, wall, tzinfo=ZoneInfo(zone)).replace(fold=fold)
    instant = local.astimezone(UTC)
    assert instant.astimezone(ZoneInfo(zone)).replace(tzinfo=None) == local.replace(tzinfo=None), "wall time in a gap"
    return instant


def minus(wall: time, minutes: int) -> time:
    return (datetime.combine(date(2000, 1, 1), wall) - timedelta(minutes=minutes)).time()


# --- the brute-force model: the zone's wall clock, minute by minute -------------------------------


@cache
def wall_clock(zone: str, day: date) -> tuple[tuple[datetime, datetime], ...]:
    """(UTC minute, local wall time) for every minute from two days before `day` to three after."""
    tz = ZoneInfo(zone)
    start = datetime.combine(day - timedelta(days=2), time(0), tzinfo=UTC)
    return tuple((m, m.astimezone(tz).replace(tzinfo=None)) for m in (start + MINUTE * i for i in range(6 * 24 * 60)))


@cache
def occurrences(zone: str, day: date, wall: time) -> list[datetime]:
    """Every instant at which a local time of day `wall` happens: whenever the wall clock reads
    it, or, on a day it is jumped over, the first instant after the jump."""
    clock = wall_clock(zone, day)
    out = []
    for (_, before), (instant, now) in pairwise(clock):
        if now.time() == wall:
            out.append(instant)
        elif before.date() == now.date() and before.time() < wall < now.time():
            out.append(instant)  # jumped over: the gap's end
    return out


def first_at_or_after(zone: str, day: date, wall: time, slot: datetime) -> datetime:
    found = occurrences(zone, day, wall)
    return found[bisect_left(found, slot)]


def slots_around(zone: str, day: date, step_minutes: int = 10) -> list[datetime]:
    """Slots every `step_minutes` over the local day before, of and after `day`."""
    start = at(zone, day, time(0)) - timedelta(days=1)
    return [start + timedelta(minutes=step_minutes * i) for i in range(3 * 24 * 60 // step_minutes)]


def walls_around(wall: time) -> list[time]:
    """Local times of day every 10 minutes from 2 h before to 2 h after `wall`, on the same day."""
    base = datetime.combine(date(2000, 1, 1), wall)
    around = (base + timedelta(minutes=10 * i) for i in range(-12, 13))
    return [t.time() for t in around if t.date() == base.date()]


# --- business-hours openings ----------------------------------------------------------------------


@pytest.mark.parametrize("zone", ZONE_NAMES)
def test_an_opening_inside_a_dst_gap_opens_at_the_gap_end(zone):
    z = ZONES[zone]
    g = Guards(timezone=zone, outside_hours="defer", hours_start=z["gap_wall"], hours_end=time(17, 0))
    slot = at(zone, z["gap_day"], time(0, 30))  # before the gap, before hours
    v = evaluate_slot(g, slot, now=slot, facts=Facts())
    assert (v.action, v.run_after) == (RUN, z["gap_end"])
    assert next_opening(g, slot.astimezone(ZoneInfo(zone))) == z["gap_end"]


def test_new_york_hours_from_0230_open_at_0300_edt_on_spring_forward_day():
    g = Guards(timezone="America/New_York", outside_hours="defer", hours_start=time(2, 30), hours_end=time(17, 0))
    slot = datetime(2026, 3, 8, 6, 0, tzinfo=UTC)  # 01:00 EST
    v = evaluate_slot(g, slot, now=slot, facts=Facts())
    assert v.run_after == datetime(2026, 3, 8, 7, 0, tzinfo=UTC)  # 03:00 EDT, not 03:30 EDT
    assert v.details["deferred_to"] == "2026-03-08T07:00:00+00:00"


@pytest.mark.parametrize("zone", ZONE_NAMES)
def test_a_slot_in_the_second_pass_of_a_repeated_hour_opens_at_the_second_pass_the_same_day(zone):
    z = ZONES[zone]
    opening = z["repeat_wall"]
    g = Guards(timezone=zone, outside_hours="defer", hours_start=opening, hours_end=time(17, 0))
    slot = at(zone, z["repeat_day"], minus(opening, 20), fold=1)  # 20 min before the opening, second pass
    assert not in_hours(g, slot.astimezone(ZoneInfo(zone)))
    v = evaluate_slot(g, slot, now=slot, facts=Facts())
    assert (v.action, v.run_after) == (RUN, at(zone, z["repeat_day"], opening, fold=1))
    assert v.run_after - slot == timedelta(minutes=20)


@pytest.mark.parametrize("zone", ZONE_NAMES)
def test_a_slot_after_short_hours_in_the_first_pass_opens_again_in_the_second_pass(zone):
    # Hours of 10 minutes inside the repeated hour happen twice on the wall clock; a slot just after
    # the first pass closed waits for the second pass, not for the next day.
    z = ZONES[zone]
    opening = minus(z["repeat_wall"], 10)
    g = Guards(timezone=zone, outside_hours="defer", hours_start=opening, hours_end=z["repeat_wall"])
    slot = at(zone, z["repeat_day"], z["repeat_wall"], fold=0)  # the first pass's closing instant
    v = evaluate_slot(g, slot, now=slot, facts=Facts())
    assert v.run_after == at(zone, z["repeat_day"], opening, fold=1)


def test_new_york_a_0120_est_slot_with_hours_from_0140_opens_at_0140_est():
    g = Guards(timezone="America/New_York", outside_hours="defer", hours_start=time(1, 40), hours_end=time(17, 0))
    slot = datetime(2026, 11, 1, 6, 20, tzinfo=UTC)  # 01:20 EST, the second 01:20 of the day
    v = evaluate_slot(g, slot, now=slot, facts=Facts())
    assert v.run_after == datetime(2026, 11, 1, 6, 40, tzinfo=UTC)  # 01:40 EST, not 01:40 EST the next day


@pytest.mark.parametrize("zone", ZONE_NAMES)
@pytest.mark.parametrize("kind", ["gap_day", "repeat_day"])
def test_business_hours_deferral_matches_the_wall_clock_model(zone, kind):
    z = ZONES[zone]
    day = z[kind]
    wall = z["gap_wall"] if kind == "gap_day" else z["repeat_wall"]
    tz = ZoneInfo(zone)
    checked = 0
    for start in walls_around(wall):
        g = Guards(timezone=zone, outside_hours="defer", hours_start=start, hours_end=time(23, 59))
        for slot in slots_around(zone, day):
            v = evaluate_slot(g, slot, now=slot, facts=Facts())
            if in_hours(g, slot.astimezone(tz)):
                expected = slot
            else:
                expected = first_at_or_after(zone, day, start, slot)
                assert next_opening(g, slot.astimezone(tz)) == expected, (start, slot)
            assert v.run_after == expected, (start, slot)
            checked += 1
    assert checked > 5_000


# --- readiness deadlines -------------------------------------------------------------------------

DEPENDS = ("pipeline.raw_data.ready",)


@pytest.mark.parametrize("zone", ZONE_NAMES)
def test_a_waiting_slot_in_the_second_pass_expires_at_the_next_occurrence_of_the_deadline(zone):
    z = ZONES[zone]
    deadline = z["repeat_wall"]
    g = Guards(timezone=zone, depends_on=DEPENDS, ready_deadline=deadline)
    slot = at(zone, z["repeat_day"], minus(deadline, 20), fold=1)
    expected = at(zone, z["repeat_day"], deadline, fold=1)
    assert ready_deadline_at(g, slot) == expected
    assert expected - slot == timedelta(minutes=20)
    held = evaluate_slot(g, slot, now=slot, facts=Facts(missing=DEPENDS))
    assert (held.action, held.deadline) == (HOLD, expected)
    expired = evaluate_slot(g, slot, now=expected, facts=Facts(missing=DEPENDS))
    assert (expired.action, expired.reason) == (DECIDE, NOT_READY_EXPIRED)


def test_new_york_a_0110_est_slot_with_a_0130_deadline_expires_at_0130_est():
    g = Guards(timezone="America/New_York", depends_on=DEPENDS, ready_deadline=time(1, 30))
    slot = datetime(2026, 11, 1, 6, 10, tzinfo=UTC)  # 01:10 EST, the second pass
    assert ready_deadline_at(g, slot) == datetime(2026, 11, 1, 6, 30, tzinfo=UTC)  # 01:30 EST, same day


@pytest.mark.parametrize("zone", ZONE_NAMES)
def test_a_slot_in_the_first_pass_expires_at_the_first_occurrence_of_the_deadline(zone):
    z = ZONES[zone]
    deadline = z["repeat_wall"]
    g = Guards(timezone=zone, depends_on=DEPENDS, ready_deadline=deadline)
    slot = at(zone, z["repeat_day"], minus(deadline, 20), fold=0)
    assert ready_deadline_at(g, slot) == at(zone, z["repeat_day"], deadline, fold=0)


@pytest.mark.parametrize("zone", ZONE_NAMES)
def test_a_deadline_inside_a_dst_gap_is_the_gap_end(zone):
    z = ZONES[zone]
    g = Guards(timezone=zone, depends_on=DEPENDS, ready_deadline=z["gap_wall"])
    slot = at(zone, z["gap_day"], time(0, 30))
    assert ready_deadline_at(g, slot) == z["gap_end"]
    expired = evaluate_slot(g, slot, now=z["gap_end"], facts=Facts(missing=DEPENDS))
    assert (expired.action, expired.reason) == (DECIDE, NOT_READY_EXPIRED)
    held = evaluate_slot(g, slot, now=z["gap_end"] - timedelta(seconds=1), facts=Facts(missing=DEPENDS))
    assert held.action == HOLD


@pytest.mark.parametrize("zone", ZONE_NAMES)
@pytest.mark.parametrize("kind", ["gap_day", "repeat_day"])
def test_ready_deadline_matches_the_wall_clock_model(zone, kind):
    z = ZONES[zone]
    day = z[kind]
    wall = z["gap_wall"] if kind == "gap_day" else z["repeat_wall"]
    checked = 0
    for deadline in walls_around(wall):
        g = Guards(timezone=zone, depends_on=DEPENDS, ready_deadline=deadline)
        for slot in slots_around(zone, day):
            assert ready_deadline_at(g, slot) == first_at_or_after(zone, day, deadline, slot), (deadline, slot)
            checked += 1
    assert checked > 5_000
