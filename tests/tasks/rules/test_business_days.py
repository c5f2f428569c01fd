# ruff: noqa: RUF001, RUF003  (Chinese text uses full-width punctuation)
"""Business calendars, pure: every day of 2024-2026 for mainland China against the State Council's
notices (holidays and make-up working days, 调休), Germany against its public holidays, overrides,
business-day arithmetic, coverage (staleness), and what the guards and the preview say."""

from datetime import UTC, date, datetime, time, timedelta

import pytest
from django.utils import translation

from tasks.models.calendar import library_lookup
from tasks.rules import business_days, evaluation, keys, schedule
from tasks.rules.business_days import BusinessCalendar, calendar_gap
from tasks.rules.evaluation import CALENDAR, DECIDE, RUN, Facts, Guards, evaluate_slot
from tasks.rules.preview import schedule_preview
from tasks.sentences import say


def days(first: str, last: str) -> set[date]:
    a, b = date.fromisoformat(first), date.fromisoformat(last)
    return {a + timedelta(n) for n in range((b - a).days + 1)}


# The State Council's notices: 国办发明电〔2023〕7号 (2024), 〔2024〕12号 (2025), 〔2025〕7号 (2026).
# Each holiday: (days off, its name in chinese-calendar); then the weekend days worked in lieu.
CHINA_OFF = {
    2024: [
        (days("2024-01-01", "2024-01-01"), "New Year's Day"),
        (days("2024-02-10", "2024-02-17"), "Spring Festival"),
        (days("2024-04-04", "2024-04-06"), "Tomb-sweeping Day"),
        (days("2024-05-01", "2024-05-05"), "Labour Day"),
        (days("2024-06-10", "2024-06-10"), "Dragon Boat Festival"),
        (days("2024-09-15", "2024-09-17"), "Mid-autumn Festival"),
        (days("2024-10-01", "2024-10-07"), "National Day"),
    ],
    2025: [
        (days("2025-01-01", "2025-01-01"), "New Year's Day"),
        (days("2025-01-28", "2025-02-04"), "Spring Festival"),
        (days("2025-04-04", "2025-04-06"), "Tomb-sweeping Day"),
        (days("2025-05-01", "2025-05-05"), "Labour Day"),
        (days("2025-05-31", "2025-06-02"), "Dragon Boat Festival"),
        # National Day and Mid-autumn together, 1-8 October (6 October is Mid-autumn itself).
        (days("2025-10-01", "2025-10-05") | days("2025-10-07", "2025-10-08"), "National Day"),
        (days("2025-10-06", "2025-10-06"), "Mid-autumn Festival"),
    ],
    2026: [
        (days("2026-01-01", "2026-01-03"), "New Year's Day"),
        (days("2026-02-15", "2026-02-23"), "Spring Festival"),
        (days("2026-04-04", "2026-04-06"), "Tomb-sweeping Day"),
        (days("2026-05-01", "2026-05-05"), "Labour Day"),
        (days("2026-06-19", "2026-06-21"), "Dragon Boat Festival"),
        (days("2026-09-25", "2026-09-27"), "Mid-autumn Festival"),
        (days("2026-10-01", "2026-10-07"), "National Day"),
    ],
}
CHINA_MAKEUP = {
    2024: {
        "2024-02-04",
        "2024-02-18",
        "2024-04-07",
        "2024-04-28",
        "2024-05-11",
        "2024-09-14",
        "2024-09-29",
        "2024-10-12",
    },
    2025: {"2025-01-26", "2025-02-08", "2025-04-27", "2025-09-28", "2025-10-11"},
    2026: {"2026-01-04", "2026-02-14", "2026-02-28", "2026-05-09", "2026-09-20", "2026-10-10"},
}

GERMANY_OFF = {
    2024: ["01-01", "03-29", "04-01", "05-01", "05-09", "05-20", "10-03", "12-25", "12-26"],
    2025: ["01-01", "04-18", "04-21", "05-01", "05-29", "06-09", "10-03", "12-25", "12-26"],
    2026: ["01-01", "04-03", "04-06", "05-01", "05-14", "05-25", "10-03", "12-25", "12-26"],
}


def china(**overrides) -> BusinessCalendar:
    return BusinessCalendar(name="cn", lookup=library_lookup("CN"), **overrides)


@pytest.mark.parametrize("year", [2024, 2025, 2026])
def test_it_knows_every_chinese_holiday_and_make_up_working_day(year):
    cal = china()
    off = {d: name for dates, name in CHINA_OFF[year] for d in dates}
    makeup = {date.fromisoformat(d) for d in CHINA_MAKEUP[year]}
    assert all(d.weekday() >= 5 for d in makeup)  # the notices only ever move work onto weekends
    for d in days(f"{year}-01-01", f"{year}-12-31"):
        day = cal.day(d)
        assert day.covered
        if d in off:
            assert (day.business, day.kind, day.name) == (False, business_days.HOLIDAY, off[d]), d
        elif d in makeup:
            assert (day.business, day.kind) == (True, business_days.MAKEUP), d
            assert day.name, d  # named after the holiday it makes up for
        else:
            assert day.business == (d.weekday() < 5), d
            assert day.kind == (business_days.WORKDAY if d.weekday() < 5 else business_days.WEEKEND), d


def test_the_2026_make_up_days_are_named_after_their_holidays():
    cal = china()
    names = {d: cal.reason(date.fromisoformat(d)) for d in sorted(CHINA_MAKEUP[2026])}
    assert names == {
        "2026-01-04": "New Year's Day",
        "2026-02-14": "Spring Festival",
        "2026-02-28": "Spring Festival",
        "2026-05-09": "Labour Day",
        "2026-09-20": "National Day",
        "2026-10-10": "National Day",
    }


@pytest.mark.parametrize("year", [2024, 2025, 2026])
def test_it_knows_germanys_public_holidays(year):
    cal = BusinessCalendar(name="de", lookup=library_lookup("DE"))
    off = {date.fromisoformat(f"{year}-{md}") for md in GERMANY_OFF[year]}
    for d in days(f"{year}-01-01", f"{year}-12-31"):
        assert cal.is_business_day(d) == (d.weekday() < 5 and d not in off), d
        assert cal.covers(d)
    assert cal.reason(date(year, 10, 3)) == "German Unity Day"


@pytest.mark.parametrize("environ", [{}, {"LANG": "C.UTF-8"}, {"LANG": "de_DE.UTF-8"}, {"LANGUAGE": "fr"}])
def test_a_holidays_name_does_not_follow_the_process_locale(monkeypatch, environ):
    """The library names holidays in the country's language unless asked, reading LANGUAGE, LC_ALL,
    LC_MESSAGES and LANG: the name a decision records must not depend on how the server started."""
    for name in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    library_lookup.cache_clear()
    try:
        assert library_lookup("DE")(date(2026, 10, 3)).name == "German Unity Day"
        assert library_lookup("FR")(date(2026, 7, 14)).name == "National Day"
    finally:
        library_lookup.cache_clear()


def test_china_has_no_data_for_2027_yet_and_says_so():
    cal = china()
    assert cal.covers(date(2026, 12, 31))
    assert not cal.covers(date(2027, 1, 4))
    # Judged by its weekday alone, marked as not covered: never silently an ordinary day.
    assert cal.day(date(2027, 1, 4)) == business_days.Day(date(2027, 1, 4), True, business_days.WORKDAY, covered=False)
    assert calendar_gap(cal, today=date(2026, 11, 10)) is None  # 45 days ahead ends on 25 December
    assert calendar_gap(cal, today=date(2026, 11, 20)) == date(2027, 1, 1)
    assert calendar_gap(cal, today=date(2026, 12, 4), horizon=timedelta(days=60)) == date(2027, 1, 1)


def test_an_override_is_covered_even_where_the_library_is_not():
    cal = china(opened={date(2027, 1, 2): "Stock-take"})
    assert cal.covers(date(2027, 1, 2))
    assert cal.day(date(2027, 1, 2)) == business_days.Day(date(2027, 1, 2), True, business_days.OPENED, "Stock-take")


def test_overrides_win_over_the_library():
    cal = china(closed={date(2026, 12, 31): "Year-end shutdown"}, opened={date(2026, 10, 8): "Release day"})
    assert cal.day(date(2026, 12, 31)) == business_days.Day(
        date(2026, 12, 31), False, business_days.CLOSED, "Year-end shutdown"
    )
    assert cal.is_business_day(date(2026, 10, 8))
    assert cal.reason(date(2026, 10, 8)) == "Release day"


@pytest.mark.parametrize(
    ("day", "previous", "following"),
    [
        ("2026-02-24", "2026-02-14", "2026-02-25"),  # after the Spring Festival: the make-up Saturday before it
        ("2026-02-14", "2026-02-13", "2026-02-24"),
        ("2026-10-08", "2026-09-30", "2026-10-09"),
        ("2026-10-12", "2026-10-10", "2026-10-13"),  # Monday after a make-up Saturday
        ("2026-12-07", "2026-12-04", "2026-12-08"),  # an ordinary Monday
    ],
)
def test_business_day_arithmetic(day, previous, following):
    cal = china()
    d = date.fromisoformat(day)
    assert cal.previous_business_day(d).isoformat() == previous
    assert cal.next_business_day(d).isoformat() == following
    assert business_days.business_dates(cal, d) == {
        "business_date": day,
        "previous_business_date": previous,
        "next_business_date": following,
    }


def test_without_a_calendar_the_neighbours_are_weekdays():
    assert business_days.business_dates(None, date(2026, 12, 7))["previous_business_date"] == "2026-12-04"
    rendered = keys.render(
        "{previous_business_date}/{business_date}", rule="r", slot="s", business_date="2026-12-07", params={}
    )
    assert rendered == "2026-12-04/2026-12-07"


def test_the_ends_of_the_date_range_have_no_neighbour():
    assert business_days.business_dates(china(), date(9999, 12, 31))["next_business_date"] == ""
    assert business_days.business_dates(None, date(1, 1, 1))["previous_business_date"] == ""


def test_an_event_key_by_date_takes_the_calendars_neighbours():
    from tasks.rules import events

    key = events.render_key(
        "{object_id}:{previous_business_date}",
        rule_id=7,
        rule="r",
        source="s",
        criteria={"object_id": "42"},
        business_date="2026-02-24",
        params={},
        neighbours={
            k: v for k, v in business_days.business_dates(china(), date(2026, 2, 24)).items() if k != "business_date"
        },
    )
    assert key == "rule/7/event/42:2026-02-14"


def test_a_calendar_closed_for_a_year_is_an_error_not_a_hang():
    closed = BusinessCalendar(name="shut", lookup=lambda d: business_days.LibraryDay(False, "closed"))
    with pytest.raises(ValueError, match="no business day"):
        closed.next_business_day(date(2026, 1, 1))


def shanghai_9am(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, 1, 0, tzinfo=UTC)  # 09:00 Asia/Shanghai (UTC+8, no DST)


def test_a_holiday_is_a_calendar_decision_with_its_name():
    g = Guards(timezone="Asia/Shanghai", calendar=china())
    verdict = evaluate_slot(g, shanghai_9am(date(2026, 10, 2)), now=shanghai_9am(date(2026, 10, 2)), facts=Facts())
    assert (verdict.action, verdict.reason) == (DECIDE, CALENDAR)
    assert verdict.details == {
        "why": evaluation.WHY_NOT_BUSINESS_DAY,
        "date": "2026-10-02",
        "calendar": "cn",
        "day": business_days.HOLIDAY,
        "name": "National Day",
    }
    reason = evaluation.calendar_reason(verdict.details)
    with translation.override("en"):
        assert say(reason) == "no run: 2026-10-02: National Day (calendar cn)"
    with translation.override("zh-hans"):
        assert say(reason) == "不运行：2026-10-02：国庆节（日历 cn）"


def test_a_make_up_saturday_runs():
    g = Guards(timezone="Asia/Shanghai", calendar=china())
    slot = shanghai_9am(date(2026, 2, 14))
    assert evaluate_slot(g, slot, now=slot, facts=Facts()).action == RUN


def test_business_hours_defer_to_the_next_business_day():
    g = Guards(timezone="Asia/Shanghai", calendar=china(), hours_start=time(9), hours_end=time(17))
    # Friday 13 February at 18:00: the next opening is the make-up Saturday, not Tuesday the 24th.
    slot = datetime(2026, 2, 13, 10, 0, tzinfo=UTC)
    verdict = evaluate_slot(g, slot, now=slot, facts=Facts())
    assert verdict.run_after == shanghai_9am(date(2026, 2, 14))
    # Saturday 14 February at 18:00: the next opening skips the nine days of the holiday.
    slot = datetime(2026, 2, 14, 10, 0, tzinfo=UTC)
    verdict = evaluate_slot(g, slot, now=slot, facts=Facts())
    assert verdict.run_after == shanghai_9am(date(2026, 2, 24))
    # A holiday slot is decided by the calendar before business hours are asked.
    slot = datetime(2026, 2, 23, 10, 0, tzinfo=UTC)
    assert evaluate_slot(g, slot, now=slot, facts=Facts()).details["why"] == evaluation.WHY_NOT_BUSINESS_DAY


def test_preview_across_the_2026_spring_festival():
    """A working-day rule ("0 9 * * *" on the China calendar) from 13 to 28 February 2026."""
    spec = schedule.ScheduleSpec(kind="cron", timezone="Asia/Shanghai", cron="0 9 * * *")
    g = Guards(timezone="Asia/Shanghai", calendar=china())
    preview = schedule_preview(spec, at=datetime(2026, 2, 12, 2, 0, tzinfo=UTC), count=16, guards=g)
    with translation.override("en"):
        said = {f"{f.local:%m-%d %a}": say(f.guards) for f in preview.fires}
    assert said == {
        "02-13 Fri": "runs",
        "02-14 Sat": "runs: 2026-02-14 is a make-up working day (Spring Festival)",
        "02-15 Sun": "no run: 2026-02-15: Spring Festival (calendar cn)",
        "02-16 Mon": "no run: 2026-02-16: Spring Festival (calendar cn)",
        "02-17 Tue": "no run: 2026-02-17: Spring Festival (calendar cn)",
        "02-18 Wed": "no run: 2026-02-18: Spring Festival (calendar cn)",
        "02-19 Thu": "no run: 2026-02-19: Spring Festival (calendar cn)",
        "02-20 Fri": "no run: 2026-02-20: Spring Festival (calendar cn)",
        "02-21 Sat": "no run: 2026-02-21: Spring Festival (calendar cn)",
        "02-22 Sun": "no run: 2026-02-22: Spring Festival (calendar cn)",
        "02-23 Mon": "no run: 2026-02-23: Spring Festival (calendar cn)",
        "02-24 Tue": "runs",
        "02-25 Wed": "runs",
        "02-26 Thu": "runs",
        "02-27 Fri": "runs",
        "02-28 Sat": "runs: 2026-02-28 is a make-up working day (Spring Festival)",
    }
    with translation.override("zh-hans"):
        assert say(preview.fires[1].guards) == "运行：2026-02-14 是调休工作日（春节）"
        assert say(preview.fires[3].guards) == "不运行：2026-02-16：春节（日历 cn）"


def test_preview_says_when_the_calendar_has_no_data():
    spec = schedule.ScheduleSpec(kind="cron", timezone="Asia/Shanghai", cron="0 9 * * *")
    g = Guards(timezone="Asia/Shanghai", calendar=china())
    preview = schedule_preview(spec, at=datetime(2027, 1, 1, 2, 0, tzinfo=UTC), count=2, guards=g)
    with translation.override("en"):
        said = [say(f.guards) for f in preview.fires]
    assert said == [
        "no run: 2027-01-02 is a weekend day; calendar cn has no data for it yet",
        "no run: 2027-01-03 is a weekend day; calendar cn has no data for it yet",
    ]
    preview = schedule_preview(spec, at=datetime(2027, 1, 3, 2, 0, tzinfo=UTC), count=1, guards=g)
    with translation.override("en"):
        assert say(preview.fires[0].guards) == "runs as an ordinary weekday: calendar cn has no data for 2027-01-04 yet"
