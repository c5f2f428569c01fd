"""Where a preview from a chosen day starts (tasks.rules.preview.preview_start): pure, no database."""

from datetime import UTC, datetime, timedelta

import pytest

from tasks.rules import preview, schedule


@pytest.mark.parametrize(
    ("text", "zone", "first_instant"),
    [
        ("2027-02-05", "Asia/Shanghai", datetime(2027, 2, 4, 16, 0, tzinfo=UTC)),
        ("2027-02-05", "UTC", datetime(2027, 2, 5, 0, 0, tzinfo=UTC)),
        (" 2026-03-29 ", "Europe/Berlin", datetime(2026, 3, 28, 23, 0, tzinfo=UTC)),  # the spring-forward day
        ("2026-10-25", "Europe/Berlin", datetime(2026, 10, 24, 22, 0, tzinfo=UTC)),  # the fall-back day
        # Chile springs forward at midnight: 00:00 does not exist, the day begins at 01:00 (-03:00).
        ("2026-09-06", "America/Santiago", datetime(2026, 9, 6, 4, 0, tzinfo=UTC)),
        ("1900-01-01", "UTC", datetime(1900, 1, 1, tzinfo=UTC)),
        ("9998-12-31", "Pacific/Kiritimati", datetime(9998, 12, 30, 10, 0, tzinfo=UTC)),
    ],
)
def test_a_preview_starts_just_before_the_days_first_instant(text, zone, first_instant):
    # Previews list fires strictly after their start: one microsecond before lists a fire at 00:00.
    assert preview.preview_start(text, timezone=zone) == first_instant - timedelta(microseconds=1)


def test_the_days_first_fire_is_listed_even_at_midnight_and_across_a_skipped_midnight():
    spec = schedule.ScheduleSpec(kind="cron", timezone="America/Santiago", cron="0 0 * * *", dst_gap="shift")
    at = preview.preview_start("2026-09-06", timezone="America/Santiago")
    fires = preview.schedule_preview(spec, at=at, count=2).fires
    # 00:00 is skipped that night: "shift" runs it at 01:00, the day's first instant.
    assert [f"{f.local:%Y-%m-%d %H:%M}" for f in fires] == ["2026-09-06 01:00", "2026-09-07 00:00"]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("", preview.FROM_NOT_A_DATE),
        ("2027-2-5", preview.FROM_NOT_A_DATE),
        ("20270205", preview.FROM_NOT_A_DATE),
        ("2027-02-05T00:00", preview.FROM_NOT_A_DATE),
        ("2027-02-30", preview.FROM_NOT_A_DATE),
        ("\uff12\uff10\uff12\uff17-02-05", preview.FROM_NOT_A_DATE),  # full-width digits
        ("1899-12-31", preview.FROM_OUT_OF_RANGE),
        ("9999-01-01", preview.FROM_OUT_OF_RANGE),
    ],
)
def test_a_bad_day_says_why(text, code):
    with pytest.raises(preview.StartError) as caught:
        preview.preview_start(text, timezone="UTC")
    assert caught.value.reason.code == code


def test_a_bad_zone_is_the_zones_error():
    with pytest.raises(schedule.ScheduleError) as caught:
        preview.preview_start("2027-02-05", timezone="Mars/Olympus")
    assert caught.value.field == "timezone"


def test_a_one_time_rule_is_past_or_coming_by_now_not_by_the_start_day():
    run_at = datetime(2030, 1, 1, tzinfo=UTC)
    spec = schedule.ScheduleSpec(kind="once", timezone="UTC", run_at=run_at)
    at = preview.preview_start("2029-12-01", timezone="UTC")
    coming = preview.schedule_preview(spec, at=at, count=1, now=datetime(2029, 6, 1, tzinfo=UTC))
    past = preview.schedule_preview(spec, at=at, count=1, now=datetime(2031, 1, 1, tzinfo=UTC))
    assert coming.description is not None and coming.description.code == preview.ONCE_AT
    assert past.description is not None and past.description.code == preview.ONCE_PAST
