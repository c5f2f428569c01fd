"""A mainland-China year without its notice, decided purely (tasks.rules.no_notice, business_days,
evaluation): the holidays the law fixes are skipped, the days a notice usually moves are uncertain
and go by the calendar's policy, and neither the key's dates nor a deferral land on a holiday.
Checked against chinese_calendar's 2025 and 2026 (the notices) as the reference."""

from datetime import UTC, date, datetime, time, timedelta

import chinese_calendar
import pytest

from tasks.rules import business_days, evaluation, no_notice
from tasks.rules.business_days import BusinessCalendar, LibraryDay

WEEKEND = frozenset({5, 6})
LAW = {
    2025: no_notice.LawDates(date(2025, 1, 28), date(2025, 4, 4), date(2025, 5, 31), date(2025, 10, 6)),
    2026: no_notice.LawDates(date(2026, 2, 16), date(2026, 4, 5), date(2026, 6, 19), date(2026, 9, 25)),
    2027: no_notice.LawDates(date(2027, 2, 5), date(2027, 4, 5), date(2027, 6, 9), date(2027, 9, 15)),
    2028: no_notice.LawDates(date(2028, 1, 25), date(2028, 4, 4), date(2028, 5, 28), date(2028, 10, 3)),
}


def days_of(year: int):
    d = date(year, 1, 1)
    while d.year == year:
        yield d
        d += timedelta(days=1)


def guess(day: date) -> no_notice.Guess | None:
    for year in (day.year, day.year + 1, day.year - 1):
        if year in LAW:
            found = no_notice.year_guesses(year, LAW[year], weekend=WEEKEND).get(day)
            if found is not None:
                return found
    return None


def china_until_2026(day: date) -> LibraryDay | None:
    """chinese_calendar as the calendar reads it: no data from 2027."""
    if day.year > 2026:
        return None
    _on, name = chinese_calendar.get_holiday_detail(day)
    return LibraryDay(chinese_calendar.is_workday(day), name or "")


def china(policy: str = business_days.POLICY_HOLD) -> BusinessCalendar:
    return BusinessCalendar(name="cn", lookup=china_until_2026, guess=guess, uncertain=policy)


@pytest.mark.parametrize("year", [2025, 2026])
def test_every_holiday_fixed_by_law_is_a_day_off_in_the_notice(year):
    fixed = no_notice.fixed_holidays(year, LAW[year])
    assert len(fixed) == 13  # 元旦 1, 春节 4, 清明 1, 劳动节 2, 端午 1, 中秋 1, 国庆 3
    for day, name in fixed.items():
        assert not chinese_calendar.is_workday(day), (day, name)
        assert chinese_calendar.get_holiday_detail(day)[1] == name


def test_every_day_the_2026_notice_moved_was_uncertain_without_it():
    guesses = no_notice.year_guesses(2026, LAW[2026], weekend=WEEKEND)
    for day in days_of(2026):
        ordinary_working = day.weekday() not in WEEKEND
        if chinese_calendar.is_workday(day) != ordinary_working:  # a holiday weekday or a make-up day
            assert day in guesses, day
            expected = no_notice.MAYBE_MAKEUP if chinese_calendar.is_workday(day) else no_notice.MAYBE_OFF
            assert guesses[day].maybe in ("", expected), day


@pytest.mark.parametrize("year", [2025, 2026, 2027, 2028])
def test_the_guess_of_a_year_is_holidays_or_uncertain_days_around_them(year):
    guesses = no_notice.year_guesses(year, LAW[year], weekend=WEEKEND)
    for day, found in guesses.items():
        assert found.name in no_notice.BREAKS
        if found.maybe == no_notice.MAYBE_MAKEUP:
            assert day.weekday() in WEEKEND
        if found.maybe == no_notice.MAYBE_OFF:
            assert day.weekday() not in WEEKEND


def test_new_years_day_2027_is_a_holiday_without_data():
    day = china().day(date(2027, 1, 1))
    assert (day.business, day.kind, day.name, day.covered) == (False, "holiday", "New Year's Day", False)


def test_a_monday_after_new_year_is_an_ordinary_day_whose_previous_business_day_is_in_2026():
    cal = china()
    monday = cal.day(date(2027, 1, 4))
    assert (monday.business, monday.kind, monday.covered) == (True, "workday", False)
    assert cal.previous_business_day(date(2027, 1, 4)) == date(2026, 12, 31)
    assert business_days.business_dates(cal, date(2027, 1, 4))["previous_business_date"] == "2026-12-31"
    assert cal.next_business_day(date(2026, 12, 31)) == date(2027, 1, 4)


@pytest.mark.parametrize(
    ("policy", "business", "hold"),
    [("run", True, False), ("skip", False, False), ("hold", True, True)],
)
def test_an_uncertain_day_goes_by_the_calendars_policy(policy, business, hold):
    bridge = china(policy).day(date(2027, 2, 4))  # the Thursday before 除夕 2027
    assert (bridge.kind, bridge.maybe, bridge.name) == ("uncertain", "off", "Spring Festival")
    assert (bridge.business, bridge.hold, bridge.covered) == (business, hold, False)


def test_the_covered_year_is_untouched_by_the_law():
    cal = china(business_days.POLICY_SKIP)
    for day in days_of(2026):
        assert cal.day(day).business == chinese_calendar.is_workday(day), day


def guards(policy="hold", **kw) -> evaluation.Guards:
    return evaluation.Guards(timezone="Asia/Shanghai", calendar=china(policy), **kw)


def shanghai(y, m, d, hh=9) -> datetime:
    return datetime(y, m, d, hh - 8, 0, tzinfo=UTC)


def test_new_years_day_2027_does_not_run_and_the_decision_says_the_law_fixed_it():
    slot = shanghai(2027, 1, 1)
    verdict = evaluation.evaluate_slot(guards(), slot, now=slot, facts=evaluation.Facts())
    assert (verdict.action, verdict.reason) == (evaluation.DECIDE, evaluation.CALENDAR)
    assert verdict.details["no_data"] is True
    reason = evaluation.calendar_reason(verdict.details)
    assert reason.code == evaluation.SLOT_LAW_HOLIDAY
    assert reason.params["name"] == "New Year's Day"


def test_an_1800_deferral_on_new_years_eve_opens_on_monday_not_on_new_years_day():
    slot = shanghai(2026, 12, 31, 18)
    g = guards(hours_start=time(9), hours_end=time(17), outside_hours="defer")
    verdict = evaluation.evaluate_slot(g, slot, now=slot, facts=evaluation.Facts())
    assert verdict.action == evaluation.RUN
    assert verdict.run_after == shanghai(2027, 1, 4)


def test_a_run_on_a_day_without_data_carries_what_the_calendar_said():
    slot = shanghai(2027, 1, 4)
    verdict = evaluation.evaluate_slot(guards(), slot, now=slot, facts=evaluation.Facts())
    assert verdict.action == evaluation.RUN
    assert verdict.details["calendar"]["no_data"] is True
    assert evaluation.calendar_run_reason(verdict.details["calendar"]).code == evaluation.SLOT_NO_DATA_OPEN


@pytest.mark.parametrize(
    ("policy", "action", "code"),
    [
        ("hold", evaluation.RUN, evaluation.SLOT_UNCERTAIN_HOLD),
        ("run", evaluation.RUN, evaluation.SLOT_UNCERTAIN_RUN),
        ("skip", evaluation.DECIDE, evaluation.SLOT_UNCERTAIN_SKIP),
    ],
)
def test_an_uncertain_slot_is_held_run_or_skipped_and_says_so(policy, action, code):
    slot = shanghai(2027, 2, 4)
    verdict = evaluation.evaluate_slot(guards(policy), slot, now=slot, facts=evaluation.Facts())
    assert verdict.action == action
    if action == evaluation.RUN:
        recorded = verdict.details["calendar"]
        assert recorded.get("hold", False) is (policy == "hold")
        reason = evaluation.calendar_run_reason(recorded)
        preview = evaluation.describe_day(guards(policy).calendar, china(policy).day(date(2027, 2, 4)))
        assert preview.params["runs"].code == code
    else:
        reason = evaluation.calendar_reason(verdict.details)
    assert reason.code == evaluation.SLOT_MAY_BE_OFF
    assert reason.params["runs"].code == code
