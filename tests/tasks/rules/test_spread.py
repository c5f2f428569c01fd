"""Pure tests of tasks.rules.spread: the start offset of a slot (stable, even, bounded), DST days,
and which spreads a schedule refuses. No database."""

import itertools
import random
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from tasks.rules import schedule, spread
from tasks.rules.schedule import ScheduleSpec

NY, BERLIN, LORD_HOWE, SHANGHAI = "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Shanghai"
NINE = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)  # 09:00 in Shanghai
MINUTE = timedelta(seconds=60)


def cron(expr: str, zone: str = NY, **policies) -> ScheduleSpec:
    return ScheduleSpec(kind="cron", timezone=zone, cron=expr, **policies)


def test_it_gives_the_same_offset_for_the_same_rule_and_slot():
    first = spread.offset("daily-report", NINE, timedelta(seconds=300))
    assert spread.offset("daily-report", NINE, timedelta(seconds=300)) == first
    # The same slot read in another zone is the same instant, so the same offset.
    assert spread.offset("daily-report", NINE.astimezone(schedule.validate_timezone(SHANGHAI)), timedelta(300)) == (
        spread.offset("daily-report", NINE, timedelta(300))
    )


def test_it_gives_the_same_offset_in_another_process():
    """hashlib, not Python's per-process salted hash(): a restart (another PYTHONHASHSEED) agrees."""
    code = (
        "from datetime import datetime, UTC, timedelta; from tasks.rules import spread; "
        "print(spread.offset('daily-report', datetime(2026, 12, 1, 1, tzinfo=UTC), timedelta(seconds=300)))"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": seed}
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert seen == {str(spread.offset("daily-report", NINE, timedelta(seconds=300)))}


def test_it_moves_each_slot_of_a_rule_to_its_own_offset():
    offsets = {spread.offset("sync", NINE + timedelta(hours=h), timedelta(seconds=3600)) for h in range(24)}
    assert len(offsets) == 24


@pytest.mark.parametrize("seconds", [1, 7, 60, 300, 3599])
def test_it_stays_within_the_spread(seconds):
    width = timedelta(seconds=seconds)
    for i in range(500):
        got = spread.offset(f"rule-{i}", NINE, width)
        assert timedelta(0) <= got < width


def test_it_spreads_many_rules_evenly_over_the_minute():
    """1000 rules due at one instant, spread 60 s: each second gets close to 1000/60 of them."""
    per_second = Counter(int(spread.offset(f"team-{i}-report", NINE, MINUTE).total_seconds()) for i in range(1000))
    assert set(per_second) == set(range(60))
    assert max(per_second.values()) <= 2 * 1000 / 60
    assert min(per_second.values()) >= 1000 / 60 / 3


def test_no_spread_is_no_offset():
    assert spread.offset("a", NINE, timedelta(0)) == timedelta(0)
    assert spread.start("a", NINE, timedelta(0)) == NINE


def test_it_never_reaches_the_next_slot():
    """A pool's spread of 10 minutes on a rule that fires every minute: shrunk to the minute."""
    for i in range(200):
        got = spread.offset(f"r{i}", NINE, timedelta(minutes=10), next_slot=NINE + MINUTE)
        assert got < MINUTE


def test_a_random_part_moves_the_offset_and_stays_bounded():
    rng = random.Random(7)  # seeded: the service draws from the system's random source
    width = timedelta(seconds=300)
    plain = spread.offset("a", NINE, width)
    drawn = [spread.offset("a", NINE, width, draw=rng.random()) for _ in range(50)]
    assert all(timedelta(0) <= d < width for d in drawn)
    assert len(set(drawn)) > 40 and plain not in drawn
    assert spread.offset("a", NINE, width, draw=0.0) == plain


def test_it_refuses_a_naive_slot():
    with pytest.raises(ValueError):
        spread.offset("a", datetime(2026, 12, 1, 9), MINUTE)  # noqa: DTZ001


# --- DST days: the offset is added in UTC to the resolved slot, bounded by the next slot ---


@pytest.mark.parametrize(
    ("zone", "expr", "day", "policies"),
    [
        (NY, "30 2 * * *", "2026-03-08", {"dst_gap": "shift"}),  # gap: 02:30 shifted to 03:00
        (NY, "*/15 2 * * *", "2026-03-08", {"dst_gap": "shift"}),  # four gap slots collapse into one
        (NY, "30 2,3 * * *", "2026-03-08", {"dst_gap": "shift"}),  # shifted 03:00 next to the regular 03:30
        (NY, "30 1 * * *", "2026-11-01", {"dst_repeat": "both"}),  # 01:30 twice, an hour apart
        (BERLIN, "*/15 2 * * *", "2026-10-25", {}),  # a repeated hour, both occurrences
        (LORD_HOWE, "15 2 * * *", "2026-10-04", {"dst_gap": "shift"}),  # a 30-minute gap
        (NY, "0 * * * *", "2026-11-01", {}),  # 25 hourly slots
        (NY, "0 * * * *", "2026-03-08", {}),  # 23 hourly slots
    ],
)
def test_on_dst_days_every_start_is_after_its_slot_and_before_the_next(zone, expr, day, policies):
    spec = cron(expr, zone, **policies)
    midnight = datetime.fromisoformat(day).replace(tzinfo=schedule.validate_timezone(zone))
    slots = schedule.slots_between(spec, midnight - timedelta(hours=1), midnight + timedelta(days=2))
    assert len(slots) >= 2
    for width in (timedelta(minutes=10), timedelta(hours=2)):
        for i in range(30):
            for slot, nxt in itertools.pairwise(slots):
                start = spread.start(f"rule-{i}", slot, width, next_slot=nxt)
                assert slot <= start < nxt
                assert start - slot < width


def test_on_a_repeat_under_both_a_long_spread_stays_within_the_hour():
    spec = cron("30 1 * * *", dst_repeat="both")
    first, second = schedule.slots_between(
        spec, datetime(2026, 11, 1, 4, tzinfo=UTC), datetime(2026, 11, 1, 7, tzinfo=UTC)
    )
    assert second - first == timedelta(hours=1)
    for i in range(100):
        assert spread.start(f"r{i}", first, timedelta(hours=3), next_slot=second) < second


# --- which spreads a schedule refuses ---

AT = datetime(2026, 6, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("spec", "seconds", "refused"),
    [
        (ScheduleSpec(kind="interval", timezone="UTC", interval_seconds=60), 59, None),
        (ScheduleSpec(kind="interval", timezone="UTC", interval_seconds=60), 60, spread.NOT_SHORTER_THAN_INTERVAL),
        (cron("0 9 * * *"), 3600, None),
        (cron("*/5 * * * *"), 300, spread.NOT_SHORTER_THAN_GAP),
        (cron("*/5 * * * *"), 299, None),
        (cron("0,10 9 * * *"), 600, spread.NOT_SHORTER_THAN_GAP),  # the shortest gap, not the daily one
        (cron("30 1 * * *", dst_repeat="both"), 3600, spread.NOT_SHORTER_THAN_GAP),  # the fall-back hour
        (cron("30 1 * * *", dst_repeat="first"), 3600, None),
        (cron("30 2,3 * * *", dst_gap="shift"), 1800, spread.NOT_SHORTER_THAN_GAP),  # 03:00 shifted, 03:30
        (ScheduleSpec(kind="once", timezone="UTC", run_at=AT), 86400, None),
    ],
)
def test_it_refuses_a_spread_not_shorter_than_the_schedule_gap(spec, seconds, refused):
    got = spread.refusal(spec, seconds, at=AT)
    assert (got[0] if got else None) == refused


def test_it_names_where_the_shortest_gap_is():
    _code, params = spread.refusal(cron("30 1 * * *", dst_repeat="both"), 3600, at=AT)
    assert params == {"spread": 3600, "gap": 3600, "at": "2026-11-01 01:30"}


def test_it_refuses_a_spread_not_shorter_than_the_start_window():
    got = spread.refusal(cron("0 9 * * *"), 300, at=AT, start_window_seconds=300)
    assert got == (spread.NOT_SHORTER_THAN_START_WINDOW, {"spread": 300, "window": 300})
    assert spread.refusal(cron("0 9 * * *"), 299, at=AT, start_window_seconds=300) is None


def test_the_rule_spread_wins_else_the_largest_pool_default():
    assert spread.effective(30, [("openai", 300)]) == spread.Spread(30)
    assert spread.effective(0, [("openai", 300), ("anthropic", 120), ("global", None)]) == spread.Spread(300, "openai")
    assert spread.effective(0, [("b", 60), ("a", 60)]) == spread.Spread(60, "a")
    assert not spread.effective(0, [("global", None)])
