"""Pure tests of tasks.rules.schedule: slots in UTC, DST gaps and repeats, validation.

Expected instants are written out in UTC so that a wrong conversion cannot agree
with itself. No database, no Django settings.
"""

import os
import time
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim

from tasks import sentences
from tasks.rules import schedule
from tasks.rules.schedule import (
    DST_GAP_POLICIES,
    DST_REPEAT_POLICIES,
    KINDS,
    ScheduleError,
    ScheduleSpec,
    business_date,
    local_slot,
    next_slot,
    preview,
    slot_label,
    slots_between,
    validate_cron,
    validate_spec,
    validate_timezone,
)
from tests.support.dst_cases import BERLIN, GAP_CASES, LORD_HOWE, NY, REPEAT_CASES, SHANGHAI, u


def cron(expr: str, tz: str = "UTC", **policies: str) -> ScheduleSpec:
    return ScheduleSpec(kind="cron", timezone=tz, cron=expr, **policies)


def local_day(tz: str, day: date) -> tuple[datetime, datetime]:
    """(after, until) covering exactly the local calendar day `day` in `tz`."""
    zone = ZoneInfo(tz)
    start = datetime(day.year, day.month, day.day, tzinfo=zone)
    # Midnight exists on every day used here, so wall-clock +1 day is the next midnight.
    end = start + timedelta(days=1)
    tick = timedelta(microseconds=1)
    return start.astimezone(UTC) - tick, end.astimezone(UTC) - tick


def on_day(spec: ScheduleSpec, day: date) -> list[datetime]:
    return slots_between(spec, *local_day(spec.timezone, day))


# --- the tz data the tests rely on -------------------------------------------


@pytest.mark.parametrize(
    ("tz", "wall", "kind"),
    [
        (NY, (2026, 3, 8, 2, 30), "gap"),
        (NY, (2026, 11, 1, 1, 30), "repeat"),
        (BERLIN, (2026, 3, 29, 2, 30), "gap"),
        (BERLIN, (2026, 10, 25, 2, 30), "repeat"),
        (LORD_HOWE, (2026, 10, 4, 2, 15), "gap"),
        (LORD_HOWE, (2026, 4, 5, 1, 45), "repeat"),
        (LORD_HOWE, (2026, 4, 5, 1, 15), "normal"),
        (LORD_HOWE, (2026, 10, 4, 2, 30), "normal"),
        (SHANGHAI, (2026, 3, 8, 2, 30), "normal"),
    ],
)
def test_it_relies_on_these_tzdata_transitions(tz, wall, kind):
    zone = ZoneInfo(tz)
    first = datetime(*wall, tzinfo=zone, fold=0)
    second = datetime(*wall, tzinfo=zone, fold=1)
    exists = first.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == first.replace(tzinfo=None)
    twice = exists and first.astimezone(UTC) != second.astimezone(UTC)
    assert (not exists, twice) == (kind == "gap", kind == "repeat")


# --- DST gap (spring forward) --------------------------------------------------


@pytest.mark.parametrize("repeat", DST_REPEAT_POLICIES)
@pytest.mark.parametrize("gap", DST_GAP_POLICIES)
@pytest.mark.parametrize(("tz", "day", "expr", "expected"), GAP_CASES)
def test_it_handles_the_spring_forward_gap_per_policy(tz, day, expr, expected, gap, repeat):
    spec = cron(expr, tz, dst_gap=gap, dst_repeat=repeat)
    assert on_day(spec, day) == expected[gap]


# --- DST repeat (fall back) ----------------------------------------------------


@pytest.mark.parametrize("gap", DST_GAP_POLICIES)
@pytest.mark.parametrize("repeat", DST_REPEAT_POLICIES)
@pytest.mark.parametrize(("tz", "day", "expr", "expected"), REPEAT_CASES)
def test_it_handles_the_fall_back_repeat_per_policy(tz, day, expr, expected, repeat, gap):
    spec = cron(expr, tz, dst_gap=gap, dst_repeat=repeat)
    assert on_day(spec, day) == expected[repeat]


# --- hour "*": elapsed time, whatever the policy ----------------------------------

ALL_POLICIES = [(g, r) for g in DST_GAP_POLICIES for r in DST_REPEAT_POLICIES]


@pytest.mark.parametrize(("gap", "repeat"), ALL_POLICIES)
@pytest.mark.parametrize(
    ("tz", "day", "expr", "count"),
    [
        (NY, date(2026, 11, 1), "0 * * * *", 25),
        (NY, date(2026, 3, 8), "0 * * * *", 23),
        (BERLIN, date(2026, 10, 25), "0 * * * *", 25),
        (BERLIN, date(2026, 3, 29), "0 * * * *", 23),
        (NY, date(2026, 11, 1), "30 * * * *", 25),
        (NY, date(2026, 3, 8), "30 * * * *", 23),
        (BERLIN, date(2026, 3, 29), "*/15 * * * *", 92),
        (BERLIN, date(2026, 10, 25), "*/15 * * * *", 100),
        (NY, date(2026, 11, 1), "0 0-23 * * *", 25),
        (NY, date(2026, 11, 1), "0 */1 * * *", 25),
        (LORD_HOWE, date(2026, 4, 5), "*/30 * * * *", 49),
        (LORD_HOWE, date(2026, 10, 4), "*/30 * * * *", 47),
        (SHANGHAI, date(2026, 3, 8), "0 * * * *", 24),
    ],
)
def test_it_runs_hour_star_jobs_by_elapsed_time(tz, day, expr, count, gap, repeat):
    slots = on_day(cron(expr, tz, dst_gap=gap, dst_repeat=repeat), day)
    assert len(slots) == count
    assert len(set(slots)) == count


@pytest.mark.parametrize(("gap", "repeat"), ALL_POLICIES)
@pytest.mark.parametrize(
    ("tz", "day", "expr", "step"),
    [
        (NY, date(2026, 11, 1), "30 * * * *", timedelta(hours=1)),
        (NY, date(2026, 3, 8), "30 * * * *", timedelta(hours=1)),
        (BERLIN, date(2026, 10, 25), "*/15 * * * *", timedelta(minutes=15)),
        (BERLIN, date(2026, 3, 29), "*/15 * * * *", timedelta(minutes=15)),
        (LORD_HOWE, date(2026, 4, 5), "*/30 * * * *", timedelta(minutes=30)),
        (LORD_HOWE, date(2026, 10, 4), "*/30 * * * *", timedelta(minutes=30)),
    ],
)
def test_it_spaces_hour_star_jobs_evenly_across_transitions(tz, day, expr, step, gap, repeat):
    slots = on_day(cron(expr, tz, dst_gap=gap, dst_repeat=repeat), day)
    assert {b - a for a, b in pairwise(slots)} == {step}


def test_it_gives_hour_star_jobs_no_extra_run_at_the_gap_end():
    # "shift" would move 02:30 to 03:00 EDT (07:00Z); an elapsed-time job must not.
    slots = on_day(cron("30 * * * *", NY, dst_gap="shift"), date(2026, 3, 8))
    assert u(2026, 3, 8, 7) not in slots
    assert u(2026, 3, 8, 6, 30) in slots
    assert u(2026, 3, 8, 7, 30) in slots


# --- next_slot -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "after", "expected"),
    [
        (cron("0 9 * * *", SHANGHAI), u(2026, 12, 1), u(2026, 12, 1, 1)),
        (cron("0 9 * * *", SHANGHAI), u(2026, 12, 1, 1), u(2026, 12, 2, 1)),  # strictly after
        (cron("0 9 * * *", SHANGHAI), u(2026, 7, 1, 0, 59, 59, 999999), u(2026, 7, 1, 1)),
        (cron("0 0 29 2 *"), u(2026, 3, 1), u(2028, 2, 29)),
        (cron("0 0 29 2 *", BERLIN), u(2026, 3, 1), u(2028, 2, 28, 23)),
        (cron("0 0 29 2 *"), u(2096, 3, 1), u(2104, 2, 29)),  # 2100 is not a leap year
        (cron("30 2 * * *", NY), u(2026, 3, 8, 6, 59), u(2026, 3, 8, 7)),
        (cron("30 2 * * *", NY), u(2026, 3, 8, 7), u(2026, 3, 9, 6, 30)),
        (cron("30 2 * * *", NY, dst_gap="skip"), u(2026, 3, 8, 6), u(2026, 3, 9, 6, 30)),
        # after = first 01:30: "both" still finds the second one an hour later.
        (cron("30 1 * * *", NY, dst_repeat="both"), u(2026, 11, 1, 5, 30), u(2026, 11, 1, 6, 30)),
        (cron("30 1 * * *", NY, dst_repeat="first"), u(2026, 11, 1, 5, 30), u(2026, 11, 2, 6, 30)),
        # after = 01:45 EDT, past the first 01:30 on the wall clock.
        (cron("30 1 * * *", NY, dst_repeat="last"), u(2026, 11, 1, 5, 45), u(2026, 11, 1, 6, 30)),
        (cron("30 1 * * *", NY, dst_repeat="last"), u(2026, 11, 1, 6, 30), u(2026, 11, 2, 6, 30)),
        (cron("30 2 * * *", BERLIN, dst_repeat="last"), u(2026, 10, 25, 0, 45), u(2026, 10, 25, 1, 30)),
        (cron("45 1 * * *", LORD_HOWE, dst_repeat="last"), u(2026, 4, 4, 14, 50), u(2026, 4, 4, 15, 15)),
        # Second Sunday of March 02:30 never exists in New York: shift, or never.
        (cron("30 2 * 3 0#2", NY), u(2026, 3, 9), u(2027, 3, 14, 7)),
        (cron("30 2 * 3 0#2", NY, dst_gap="skip"), u(2026, 3, 9), None),
    ],
)
def test_it_finds_the_next_slot(spec, after, expected):
    assert next_slot(spec, after) == expected


@pytest.mark.parametrize("tz", [NY, BERLIN, SHANGHAI, "Pacific/Chatham"])
def test_it_returns_utc_whatever_zone_after_is_given_in(tz):
    spec = cron("0 9 * * *", BERLIN)
    after_utc = u(2026, 6, 1, 12)
    slot = next_slot(spec, after_utc.astimezone(ZoneInfo(tz)))
    assert slot == next_slot(spec, after_utc) == u(2026, 6, 2, 7)
    assert slot.tzinfo is UTC


def test_dom_and_dow_combine_with_or():
    slots = slots_between(cron("0 0 13 * 5"), u(2025, 12, 31), u(2026, 12, 31))
    days = [date(2026, 1, 1) + timedelta(days=i) for i in range(365)]
    assert [s.date() for s in slots] == [d for d in days if d.day == 13 or d.weekday() == 4]
    assert u(2026, 2, 13) in slots  # a Friday the 13th counts once
    assert len(slots) == len(set(slots))


def test_a_star_prefixed_day_field_makes_dom_and_dow_combine_with_and():
    # Vixie cron: "*/2" counts as unrestricted, so only Mondays on odd days match.
    slots = slots_between(cron("0 0 */2 * 1"), u(2025, 12, 31), u(2026, 12, 31))
    days = [date(2026, 1, 1) + timedelta(days=i) for i in range(365)]
    assert [s.date() for s in slots] == [d for d in days if d.day % 2 and d.weekday() == 0]


@pytest.mark.parametrize("tz", ["UTC", NY, LORD_HOWE])
@pytest.mark.parametrize("rest", ["0 9 * *", "30 1 * 11", "0 0 * 1-3", "*/20 2 * *", "0 0 13 *"])
def test_sunday_is_0_7_and_sun(tz, rest):
    after, until = u(2026, 1, 1), u(2027, 1, 1)
    found = [slots_between(cron(f"{rest} {d}", tz), after, until) for d in ("0", "7", "SUN")]
    assert found[0] == found[1] == found[2]
    assert found[0]
    local = [s.astimezone(ZoneInfo(tz)) for s in found[0]]
    on_13th = rest == "0 0 13 *"  # OR with day-of-month: Sundays and every 13th
    assert all(d.weekday() == 6 or (on_13th and d.day == 13) for d in local)
    assert any(d.weekday() != 6 for d in local) == on_13th


@pytest.mark.parametrize(
    "expr", ["0 9 * * 1-5", "*/7 */5 * * *", "0 0 L * *", "0 0 * * 5L", "0 12 * * MON#2", "15 3 1,15 * *"]
)
def test_it_agrees_with_cronsim_where_there_is_no_dst(expr):
    after, until = u(2026, 1, 1), u(2026, 4, 1)
    it = CronSim(expr, after)
    expected = []
    while (s := next(it)) <= until:
        expected.append(s)
    assert slots_between(cron(expr), after, until) == expected


SWEEP_SPECS = [
    (cron("30 1 * * *", NY, dst_repeat="both"), u(2026, 10, 31), u(2026, 11, 3)),
    (cron("*/15 1 * * *", NY, dst_repeat="last"), u(2026, 10, 31), u(2026, 11, 3)),
    (cron("*/10 2 * * *", BERLIN, dst_repeat="both"), u(2026, 10, 24), u(2026, 10, 27)),
    (cron("*/10 2 * * *", BERLIN), u(2026, 3, 28), u(2026, 3, 31)),
    (cron("*/5 1,2 * * *", LORD_HOWE, dst_repeat="both"), u(2026, 4, 3), u(2026, 4, 6)),
    (cron("*/5 2 * * *", LORD_HOWE), u(2026, 10, 2), u(2026, 10, 5)),
    (cron("*/20 * * * *", NY), u(2026, 11, 1), u(2026, 11, 2)),
]


@pytest.mark.parametrize(("spec", "after", "until"), SWEEP_SPECS)
def test_chaining_next_slot_equals_slots_between(spec, after, until):
    chained, cursor = [], after
    while (cursor := next_slot(spec, cursor)) <= until:
        chained.append(cursor)
    assert chained == slots_between(spec, after, until)
    assert chained == sorted(set(chained))


@pytest.mark.parametrize(("spec", "after", "until"), SWEEP_SPECS)
def test_any_after_gives_the_first_later_slot(spec, after, until):
    every = slots_between(spec, after, until)
    for minute in range(0, int((until - after).total_seconds() // 60) - 1440, 7):
        point = after + timedelta(minutes=minute, seconds=13)
        assert next_slot(spec, point) == next(s for s in every if s > point)


# --- interval and once -----------------------------------------------------------------


def interval(seconds: int, tz: str = "UTC") -> ScheduleSpec:
    return ScheduleSpec(kind="interval", timezone=tz, interval_seconds=seconds)


@pytest.mark.parametrize(
    ("seconds", "after", "expected"),
    [
        (3600, u(2026, 1, 1, 0, 30), u(2026, 1, 1, 1)),
        (900, u(2026, 1, 1, 10), u(2026, 1, 1, 10, 15)),
        (7, u(1970, 1, 1, 0, 1, 40), u(1970, 1, 1, 0, 1, 45)),
        (60, u(1969, 12, 31, 23, 59, 30), u(1970, 1, 1)),
        (86400, u(2026, 6, 1, 5), u(2026, 6, 2)),
        (1, u(2026, 6, 1, 5, 0, 0, 500000), u(2026, 6, 1, 5, 0, 1)),
    ],
)
@pytest.mark.parametrize("tz", ["UTC", SHANGHAI, NY])
def test_interval_slots_are_epoch_aligned_in_utc(seconds, after, expected, tz):
    assert next_slot(interval(seconds, tz), after) == expected


@pytest.mark.parametrize("seconds", [7, 60, 3600, 86400, 90061])
def test_every_interval_slot_is_a_multiple_of_the_interval_since_epoch(seconds):
    after = u(2026, 3, 1)
    slots = slots_between(interval(seconds, NY), after, after + timedelta(seconds=seconds * 60), limit=50)
    assert len(slots) == 50
    assert all(s.timestamp() % seconds == 0 for s in slots)
    assert {b - a for a, b in pairwise(slots)} == {timedelta(seconds=seconds)}


@pytest.mark.parametrize(
    ("tz", "day", "count"), [(NY, date(2026, 3, 8), 23), (NY, date(2026, 11, 1), 25), (BERLIN, date(2026, 10, 25), 25)]
)
def test_intervals_ignore_dst(tz, day, count):
    assert len(on_day(interval(3600, tz), day)) == count


def once(run_at: datetime) -> ScheduleSpec:
    return ScheduleSpec(kind="once", timezone=BERLIN, run_at=run_at)


@pytest.mark.parametrize(
    ("run_at", "after", "expected"),
    [
        (datetime(2026, 5, 1, 9, tzinfo=ZoneInfo(BERLIN)), u(2026, 1, 1), u(2026, 5, 1, 7)),
        (u(2026, 5, 1, 7), u(2026, 5, 1, 7), None),
        (u(2026, 5, 1, 7), u(2026, 5, 1, 6, 59, 59), u(2026, 5, 1, 7)),
        (u(2020, 1, 1), u(2026, 1, 1), None),
    ],
)
def test_once_fires_once_strictly_after(run_at, after, expected):
    slot = next_slot(once(run_at), after)
    assert slot == expected
    assert slot is None or slot.tzinfo is UTC


@pytest.mark.parametrize(
    ("after", "until", "expected"),
    [
        (u(2026, 1, 1), u(2026, 5, 1, 7), [u(2026, 5, 1, 7)]),  # until inclusive
        (u(2026, 5, 1, 7), u(2027, 1, 1), []),  # after exclusive
        (u(2026, 1, 1), u(2026, 5, 1, 6), []),
    ],
)
def test_once_in_slots_between(after, until, expected):
    assert slots_between(once(u(2026, 5, 1, 7)), after, until) == expected


# --- slots_between bounds ----------------------------------------------------------------

HOURLY = cron("0 * * * *")


@pytest.mark.parametrize(
    ("after", "until", "limit", "expected"),
    [
        (u(2026, 1, 1, 10), u(2026, 1, 1, 13), None, [u(2026, 1, 1, h) for h in (11, 12, 13)]),
        (u(2026, 1, 1, 10), u(2026, 1, 1, 13), 2, [u(2026, 1, 1, 11), u(2026, 1, 1, 12)]),
        (u(2026, 1, 1, 10), u(2026, 1, 1, 13), 3, [u(2026, 1, 1, h) for h in (11, 12, 13)]),
        (u(2026, 1, 1, 10), u(2026, 1, 1, 13), 99, [u(2026, 1, 1, h) for h in (11, 12, 13)]),
        (u(2026, 1, 1, 10), u(2026, 1, 1, 13), 0, []),
        (u(2026, 1, 1, 10), u(2026, 1, 1, 10), None, []),
        (u(2026, 1, 1, 13), u(2026, 1, 1, 10), None, []),
        (u(2026, 1, 1, 10, 0, 1), u(2026, 1, 1, 12, 59, 59), None, [u(2026, 1, 1, 11), u(2026, 1, 1, 12)]),
    ],
)
def test_slots_between_bounds_and_limit(after, until, limit, expected):
    assert slots_between(HOURLY, after, until, limit=limit) == expected


def test_slots_between_rejects_a_negative_limit():
    with pytest.raises(ValueError, match="limit"):
        slots_between(HOURLY, u(2026, 1, 1), u(2026, 1, 2), limit=-1)


def test_slots_between_limit_keeps_the_first_of_a_repeat():
    spec = cron("*/30 1 * * *", NY, dst_repeat="both")
    assert slots_between(spec, u(2026, 11, 1), u(2026, 11, 2), limit=3) == [
        u(2026, 11, 1, 5),
        u(2026, 11, 1, 5, 30),
        u(2026, 11, 1, 6),
    ]


# --- aware inputs only; the host zone never matters -----------------------------------------

NAIVE = datetime(2026, 1, 1, 9)  # noqa: DTZ001 - the point of these tests


@pytest.mark.parametrize(
    "call",
    [
        lambda: next_slot(HOURLY, NAIVE),
        lambda: slots_between(HOURLY, NAIVE, u(2026, 1, 2)),
        lambda: slots_between(HOURLY, u(2026, 1, 1), NAIVE),
        lambda: preview(HOURLY, NAIVE, 3),
        lambda: local_slot(HOURLY, NAIVE),
        lambda: slot_label(HOURLY, NAIVE),
        lambda: business_date(HOURLY, NAIVE),
        lambda: next_slot(interval(60), NAIVE),
        lambda: next_slot(once(u(2027, 1, 1)), NAIVE),
    ],
    ids=["next", "between-after", "between-until", "preview", "local", "label", "date", "interval", "once"],
)
def test_it_rejects_naive_datetimes(call):
    with pytest.raises(ValueError, match="aware"):
        call()


@pytest.fixture(params=[("America/New_York", "-0500"), ("Asia/Kolkata", "+0530"), ("Pacific/Chatham", "+1245")])
def host_tz(request):
    name, epoch_offset = request.param
    old = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    assert time.strftime("%z", time.localtime(0)) == epoch_offset  # the host zone really changed
    yield name
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


@pytest.mark.parametrize(
    ("spec", "after", "expected"),
    [
        (cron("0 9 * * *", SHANGHAI), u(2026, 12, 1), [u(2026, 12, 1, 1), u(2026, 12, 2, 1)]),
        (cron("30 2 * * *", NY), u(2026, 3, 7, 12), [u(2026, 3, 8, 7), u(2026, 3, 9, 6, 30)]),
        (cron("30 1 * * *", NY, dst_repeat="both"), u(2026, 11, 1), [u(2026, 11, 1, 5, 30), u(2026, 11, 1, 6, 30)]),
        (cron("0 0 * * *"), u(2026, 3, 8, 1), [u(2026, 3, 9), u(2026, 3, 10)]),
        (interval(86400, SHANGHAI), u(2026, 3, 8, 1), [u(2026, 3, 9), u(2026, 3, 10)]),
    ],
)
def test_the_host_timezone_does_not_matter(host_tz, spec, after, expected):
    assert slots_between(spec, after, after + timedelta(days=3), limit=2) == expected
    assert next_slot(spec, after) == expected[0]
    assert business_date(spec, expected[0]) == expected[0].astimezone(ZoneInfo(spec.timezone)).date()


# --- labels, local time, business date ----------------------------------------------------


@pytest.mark.parametrize(
    ("tz", "expr", "day", "labels"),
    [
        (NY, "30 1 * * *", date(2026, 11, 1), ["2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00"]),
        (BERLIN, "30 2 * * *", date(2026, 10, 25), ["2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+01:00"]),
        (LORD_HOWE, "45 1 * * *", date(2026, 4, 5), ["2026-04-05T01:45:00+11:00", "2026-04-05T01:45:00+10:30"]),
    ],
)
def test_slot_labels_differ_for_the_two_occurrences(tz, expr, day, labels):
    spec = cron(expr, tz, dst_repeat="both")
    slots = on_day(spec, day)
    assert [slot_label(spec, s) for s in slots] == labels
    assert [business_date(spec, s) for s in slots] == [day, day]
    assert [local_slot(spec, s).fold for s in slots] == [0, 1]


@pytest.mark.parametrize(
    ("spec", "slot", "label", "day"),
    [
        (cron("30 2 * * *", NY), u(2026, 3, 8, 7), "2026-03-08T03:00:00-04:00", date(2026, 3, 8)),
        (cron("0 9 * * *", SHANGHAI), u(2026, 12, 1, 1), "2026-12-01T09:00:00+08:00", date(2026, 12, 1)),
        (cron("30 0 * * *", SHANGHAI), u(2026, 11, 30, 16, 30), "2026-12-01T00:30:00+08:00", date(2026, 12, 1)),
        (cron("0 23 * * *", NY), u(2026, 7, 2, 3), "2026-07-01T23:00:00-04:00", date(2026, 7, 1)),
        (cron("0 2 * * *", LORD_HOWE), u(2026, 10, 3, 15, 30), "2026-10-04T02:30:00+11:00", date(2026, 10, 4)),
        (interval(3600, SHANGHAI), u(2026, 12, 1, 16), "2026-12-02T00:00:00+08:00", date(2026, 12, 2)),
    ],
)
def test_label_and_business_date_use_the_rule_zone(spec, slot, label, day):
    assert slot_label(spec, slot) == label
    assert business_date(spec, slot) == day
    assert local_slot(spec, slot).astimezone(UTC) == slot
    assert local_slot(spec, slot).tzinfo == ZoneInfo(spec.timezone)


# --- preview ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "after", "notes"),
    [
        (cron("30 2 * * *", NY), u(2026, 3, 8), ["DST gap: 02:30 does not exist, shifted to 03:00", ""]),
        (
            cron("*/15 2 * * *", NY),
            u(2026, 3, 8),
            ["DST gap: 02:00, 02:15, 02:30, 02:45 do not exist, shifted to 03:00", ""],
        ),
        (cron("0 2 * * *", LORD_HOWE), u(2026, 10, 3), ["DST gap: 02:00 does not exist, shifted to 02:30", ""]),
        (cron("30 1 * * *", NY), u(2026, 11, 1), ["DST repeat: first of two 01:30", ""]),
        (cron("30 1 * * *", NY, dst_repeat="last"), u(2026, 11, 1), ["DST repeat: second of two 01:30", ""]),
        (
            cron("30 1 * * *", NY, dst_repeat="both"),
            u(2026, 11, 1),
            ["DST repeat: first of two 01:30", "DST repeat: second of two 01:30"],
        ),
        (cron("30 2 * * *", NY, dst_gap="skip"), u(2026, 3, 8), ["", ""]),
        (cron("0 9 * * *", SHANGHAI), u(2026, 3, 8), ["", ""]),
        (interval(60, NY), u(2026, 3, 8, 7), ["", ""]),
    ],
)
def test_preview_explains_dst_handling(spec, after, notes):
    rows = preview(spec, after, 2)
    assert [sentences.say(r["note"]) for r in rows] == notes
    assert [r["utc"] for r in rows] == slots_between(spec, after, after + timedelta(days=3), limit=2)
    for row in rows:
        assert row["utc"].tzinfo is UTC
        # astimezone, not ==: PEP 495 makes a repeated-hour time unequal to every
        # other zone's datetime.
        assert row["local"].astimezone(UTC) == row["utc"]
        assert row["local"].tzinfo == ZoneInfo(spec.timezone)


@pytest.mark.parametrize("count", [0, 1, 5])
def test_preview_returns_count_rows(count):
    assert len(preview(HOURLY, u(2026, 1, 1), count)) == count


def test_preview_of_a_past_once_is_empty():
    assert preview(once(u(2020, 1, 1)), u(2026, 1, 1), 3) == []


# --- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "fragments", "absent"),
    [
        ("61 * * * *", ['minute field "61"', "0-59"], None),
        ("* 24 * * *", ['hour field "24"', "0-23"], None),
        ("* * 32 * *", ['day-of-month field "32"'], None),
        ("* * 0 * *", ['day-of-month field "0"'], None),
        ("* * * 13 *", ['month field "13"', "JAN-DEC"], None),
        ("* * * * 8", ['day-of-week field "8"', "0 and 7 are Sunday"], None),
        ("* * * * FUN", ['day-of-week field "FUN"'], None),
        ("*/0 * * * *", ['minute field "*/0"'], None),
        ("5-1 * * * *", ['minute field "5-1"'], None),
        ("? * * * *", ['minute field "?"'], None),
        ("0 0 30 2 *", ['day-of-month "30" never occurs in month "2"'], None),
        ("0 0 31 4,6 *", ['day-of-month "31" never occurs in month "4,6"'], None),
        ("0 * * * * *", ["6 fields", "only 5-field", "minute hour day-of-month month day-of-week", "interval"], None),
        ("0 * * * * * 2026", ["7 fields", "only 5-field", "interval"], None),
        ("* * * *", ["4 fields", "only 5-field"], "interval"),
        ("", ["required"], None),
        ("   ", ["required"], None),
        ("@daily", ['"@daily" is not supported', '"0 0 * * *"'], None),
        ("@hourly", ['"0 * * * *"'], None),
        ("@reboot", ["not supported"], "instead"),
    ],
)
def test_validate_cron_says_what_is_wrong(expr, fragments, absent):
    with pytest.raises(ScheduleError) as caught:
        validate_cron(expr)
    assert caught.value.field == "cron"
    message = sentences.schedule_error(caught.value)
    assert sentences.error_text(caught.value) == f"cron: {message}"
    for fragment in fragments:
        assert fragment in message
    if absent:
        assert absent not in message


@pytest.mark.parametrize(
    "expr",
    [
        "0 9 * * MON-FRI",
        "0 9 * * mon-fri",
        "*/15 * * * *",
        "0 0 L * *",
        "0 0 LW * *",
        "0 0 * * 5L",
        "0 12 * * MON#2",
        "0 0 1 JAN *",
        "  0   9 * *   *  ",
        "0 0 29 2 *",
        "0 0 31 2 1",  # OR with Mondays, so it fires
    ],
)
def test_validate_cron_accepts(expr):
    validate_cron(expr)


@pytest.mark.parametrize("name", ["Europe/Berlin", "UTC", SHANGHAI, "America/Argentina/Buenos_Aires", LORD_HOWE])
def test_validate_timezone_accepts_iana_names(name):
    assert validate_timezone(name) == ZoneInfo(name)


@pytest.mark.parametrize(
    ("name", "fragments"),
    [
        ("", ["required", "Europe/Berlin"]),
        ("  ", ["required"]),
        ("localtime", ['"localtime"', "Europe/Berlin"]),
        ("Factory", ['"Factory"']),
        ("posixrules", ['"posixrules"']),
        ("posix/Europe/Berlin", ['"posix/Europe/Berlin"']),
        ("Mars/Olympus_Mons", ['"Mars/Olympus_Mons"', "IANA"]),
        ("europe/berlin", ['"europe/berlin"', 'did you mean "Europe/Berlin"']),
        ("../etc/passwd", ['"../etc/passwd"']),
        ("+02:00", ['"+02:00"']),
    ],
)
def test_validate_timezone_rejects(name, fragments):
    with pytest.raises(ScheduleError) as caught:
        validate_timezone(name)
    assert caught.value.field == "timezone"
    for fragment in fragments:
        assert fragment in sentences.schedule_error(caught.value)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (ScheduleSpec(kind="weekly", timezone=BERLIN), "kind"),
        (ScheduleSpec(kind="cron", timezone="", cron="0 9 * * *"), "timezone"),
        (ScheduleSpec(kind="cron", timezone="Nowhere/Land", cron="0 9 * * *"), "timezone"),
        (ScheduleSpec(kind="cron", timezone=BERLIN, cron=""), "cron"),
        (ScheduleSpec(kind="cron", timezone=BERLIN, cron="0 9 * * * *"), "cron"),
        (ScheduleSpec(kind="cron", timezone=BERLIN, cron="0 9 * * *", dst_gap="later"), "dst_gap"),
        (ScheduleSpec(kind="cron", timezone=BERLIN, cron="0 9 * * *", dst_repeat="twice"), "dst_repeat"),
        (ScheduleSpec(kind="interval", timezone=BERLIN), "interval_seconds"),
        (ScheduleSpec(kind="interval", timezone=BERLIN, interval_seconds=0), "interval_seconds"),
        (ScheduleSpec(kind="interval", timezone=BERLIN, interval_seconds=-5), "interval_seconds"),
        (ScheduleSpec(kind="interval", timezone=BERLIN, interval_seconds=True), "interval_seconds"),
        (ScheduleSpec(kind="interval", timezone=BERLIN, interval_seconds=1.5), "interval_seconds"),
        (ScheduleSpec(kind="once", timezone=BERLIN), "run_at"),
        (ScheduleSpec(kind="once", timezone=BERLIN, run_at=NAIVE), "run_at"),
        (ScheduleSpec(kind="interval", timezone="localtime", interval_seconds=60), "timezone"),
    ],
)
def test_validate_spec_names_the_bad_field(spec, field):
    with pytest.raises(ScheduleError) as caught:
        validate_spec(spec)
    assert caught.value.field == field
    with pytest.raises(ScheduleError):
        next_slot(spec, u(2026, 1, 1))


@pytest.mark.parametrize(
    "spec",
    [
        cron("0 9 * * *", BERLIN),
        cron("0 9 * * *", BERLIN, dst_gap="skip", dst_repeat="both"),
        interval(1),
        once(u(2026, 1, 1)),
        ScheduleSpec(kind="interval", timezone=BERLIN, cron="ignored", interval_seconds=60),
    ],
)
def test_validate_spec_accepts(spec):
    validate_spec(spec)


def test_the_policy_tuples_are_the_documented_ones():
    assert KINDS == ("cron", "interval", "once")
    assert DST_GAP_POLICIES == ("shift", "skip")
    assert DST_REPEAT_POLICIES == ("first", "last", "both")
    assert ScheduleSpec(kind="cron", timezone=BERLIN).dst_gap == "shift"
    assert ScheduleSpec(kind="cron", timezone=BERLIN).dst_repeat == "first"


def test_schedule_error_is_a_value_error_with_field_and_reason():
    error = ScheduleError("cron", schedule.CRON_NEVER_FIRES, expr='"0 0 30 2 *"')
    assert isinstance(error, ValueError)
    assert (error.field, error.reason.code, error.reason.params) == (
        "cron",
        "schedule.cron_never_fires",
        {"expr": '"0 0 30 2 *"'},
    )
    assert sentences.error_text(error) == 'cron: "0 0 30 2 *" never fires'


# --- the edges: huge inputs and the end of the calendar --------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        schedule.ScheduleSpec(kind="cron", timezone="UTC", cron="1 " * 3000),
        schedule.ScheduleSpec(kind="cron", timezone="UTC", cron="9" * 6000 + " * * * *"),
        schedule.ScheduleSpec(kind="cron", timezone="Mars/" + "x" * 6000, cron="0 9 * * *"),
    ],
    ids=["many-fields", "huge-field", "huge-zone"],
)
def test_an_error_quotes_a_huge_input_only_in_part(spec):
    with pytest.raises(schedule.ScheduleError) as caught:
        schedule.validate_spec(spec)
    assert len(str(caught.value)) < 300


@pytest.mark.parametrize(
    "spec",
    [
        schedule.ScheduleSpec(kind="interval", timezone="UTC", interval_seconds=7200),
        schedule.ScheduleSpec(kind="cron", timezone="UTC", cron="30 23 * * *"),
        schedule.ScheduleSpec(kind="cron", timezone="Pacific/Kiritimati", cron="0 9 * * *"),
        schedule.ScheduleSpec(kind="cron", timezone="America/New_York", cron="0 9 * * *"),
    ],
    ids=["interval", "cron-utc", "cron-utc+14", "cron-new-york"],
)
def test_a_schedule_ends_with_the_calendar_instead_of_overflowing(spec):
    near_the_end = datetime(9999, 12, 31, 23, 0, tzinfo=UTC)
    assert schedule.next_slot(spec, near_the_end) is None
    end = datetime.max.replace(tzinfo=UTC)
    last_days = schedule.slots_between(spec, near_the_end - timedelta(days=5), end)
    assert last_days and all(s <= schedule.CALENDAR_END for s in last_days)


# Day-of-month and day-of-week specials, steps, ranges, a leap day, a day most months lack.
WALL_EXPRESSIONS = [
    "* * * * *",
    "*/7 * * * *",
    "0 9 * * 1-5",
    "30 2 * * *",
    "0 0 29 2 *",
    "15,45 8-18/2 L * *",
    "0 6 * * 5#2",
    "0 6 * * 5L",
    "*/15 * 1,15 * mon",
    "0 0 31 * *",
    "59 23 * * *",
    "5 4 * * sun",
    "0-59/13 1-3 * 3,10 *",
    "0 * 10-12 * 1",
    "1 1 LW * *",
]


def _walls_until_the_calendar_ends(walls, n: int) -> list:
    out: list = []
    try:
        for wall in walls:
            out.append(wall)
            if len(out) == n:
                break
    except OverflowError:
        out.append("the end of datetime")
    return out


@pytest.mark.parametrize("expr", WALL_EXPRESSIONS)
@pytest.mark.parametrize(
    "start",  # naive wall clocks, as the schedule gives cronsim
    [datetime(2024, 2, 28, 23, 59), datetime(2025, 12, 31, 12, 7, 30), datetime(9999, 11, 30)],  # noqa: DTZ001
)
def test_the_walls_listed_day_by_day_are_exactly_cronsims(expr, start):
    """The schedule lists a matching day's times itself (schedule._walls); cronsim is the reference."""
    expected = _walls_until_the_calendar_ends(CronSim(expr, start), 3000)
    assert _walls_until_the_calendar_ends(schedule._walls(expr, CronSim(expr, start)), 3000) == expected
