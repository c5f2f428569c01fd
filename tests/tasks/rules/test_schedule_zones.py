"""Gaps in the issue's zone list: a zone without DST ignores both DST policies on the dates other zones
change, and a DST policy composes with a business-hours guard on the rule's clock."""

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from tasks.rules.evaluation import Facts, Guards, evaluate_slot
from tasks.rules.schedule import DST_GAP_POLICIES, DST_REPEAT_POLICIES, ScheduleSpec, slots_between

TRANSITION_DAYS = [
    date(2026, 3, 8),
    date(2026, 11, 1),
    date(2026, 3, 29),
    date(2026, 10, 25),
    date(2026, 4, 5),
    date(2026, 10, 4),
]


@pytest.mark.parametrize("gap", DST_GAP_POLICIES)
@pytest.mark.parametrize("repeat", DST_REPEAT_POLICIES)
@pytest.mark.parametrize("day", TRANSITION_DAYS)
@pytest.mark.parametrize("expr", ["30 2 * * *", "30 1 * * *", "0 0 * * *"])
def test_shanghai_fires_exactly_once_a_day_under_every_policy(gap, repeat, day, expr):
    spec = ScheduleSpec(kind="cron", timezone="Asia/Shanghai", cron=expr, dst_gap=gap, dst_repeat=repeat)
    zone = ZoneInfo("Asia/Shanghai")
    start = datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)
    slots = slots_between(
        spec, start - timedelta(microseconds=1), start + timedelta(days=1) - timedelta(microseconds=1)
    )
    assert len(slots) == 1
    assert slots[0] - start == timedelta(hours=int(expr.split()[1]), minutes=int(expr.split()[0]))


@pytest.mark.parametrize(("repeat", "expected"), [("first", 1), ("last", 1), ("both", 2)])
def test_a_repeated_hour_slot_outside_business_hours_is_deferred_once_per_occurrence(repeat, expected):
    # 01:30 New York happens twice on 2026-11-01; business hours 09:00-17:00 defer each occurrence to 09:00 EST.
    spec = ScheduleSpec(kind="cron", timezone="America/New_York", cron="30 1 * * *", dst_repeat=repeat)
    slots = slots_between(spec, datetime(2026, 11, 1, 4, tzinfo=UTC), datetime(2026, 11, 1, 8, tzinfo=UTC))
    assert len(slots) == expected
    g = Guards(timezone="America/New_York", hours_start=time(9), hours_end=time(17), outside_hours="defer")
    verdicts = [evaluate_slot(g, s, now=s, facts=Facts()) for s in slots]
    assert {v.run_after for v in verdicts} == {datetime(2026, 11, 1, 14, tzinfo=UTC)}
