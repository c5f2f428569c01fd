# ruff: noqa: RUF001  (Chinese text uses full-width punctuation)
"""A stored China calendar past the library's last year (chinesecalendar 1.11.0 has no 2027),
through the real scheduler tick and database: New Year's Day 2027 is a calendar decision, the key
of 2027-01-04 names 2026-12-31 as the previous business day, an uncertain day is held for approval
and its explain says the data was missing; an imported notice is read by every calendar of its
country, and a local override still wins."""

import json
from datetime import date
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.utils import translation

from runs.engine.approvals import catchup_approve
from runs.models import Decision, TaskRun
from tasks.models import BusinessCalendar, CalendarOverride, NoticeDay
from tasks.models.calendar import china_law_dates
from tasks.sentences import say_all
from tasks.triggers.explain import slot_explanation
from tasks.triggers.scheduler import scheduler_tick
from tests.support.rules import at_0900_shanghai, working_day_rule

NEW_YEAR = at_0900_shanghai(date(2027, 1, 1))
MONDAY = at_0900_shanghai(date(2027, 1, 4))
BRIDGE = at_0900_shanghai(date(2027, 2, 4))  # Thursday before 除夕 2027: a notice may bridge it


@pytest.fixture
def china(db):
    return BusinessCalendar.objects.create(name="cn-mainland", country="CN")


def explain_text(rule, slot, lang="en") -> str:
    with translation.override(lang):
        return say_all(slot_explanation(rule=rule, slot=slot, now=slot).said)


def test_the_law_dates_from_the_lunar_library_match_the_notices_of_2025_and_2026():
    assert china_law_dates(2025).new_years_eve == date(2025, 1, 28)
    assert china_law_dates(2026) == type(china_law_dates(2026))(
        date(2026, 2, 16), date(2026, 4, 5), date(2026, 6, 19), date(2026, 9, 25)
    )
    assert china_law_dates(2027).new_years_eve == date(2027, 2, 5)


def test_new_years_day_2027_does_not_run_without_2027_data(china):
    rule = working_day_rule(china, due=NEW_YEAR)
    scheduler_tick(now=NEW_YEAR)
    assert not TaskRun.objects.filter(rule=rule).exists()
    decision = Decision.objects.get(rule=rule, slot=NEW_YEAR)
    assert decision.reason == Decision.Reason.CALENDAR
    assert (decision.details["day"], decision.details["name"], decision.details["no_data"]) == (
        "holiday",
        "New Year's Day",
        True,
    )
    assert "New Year's Day, a holiday fixed by law" in explain_text(rule, NEW_YEAR)
    assert "元旦，法定节假日（日历 cn-mainland 尚无该年的放假通知）" in explain_text(rule, NEW_YEAR, "zh-hans")


def test_the_key_of_the_first_monday_of_2027_names_2026_12_31_and_the_run_records_the_missing_data(china):
    rule = working_day_rule(china, due=MONDAY)
    scheduler_tick(now=MONDAY)
    run = TaskRun.objects.get(rule=rule, slot=MONDAY)
    assert run.biz_key == f"rule/{rule.pk}/slot/cn-daily-report:2027-01-04:data-of-2026-12-31"
    assert run.payload["calendar"]["no_data"] is True
    said = explain_text(rule, MONDAY)
    assert "calendar cn-mainland has no data for 2027-01-04 yet" in said


def test_an_uncertain_day_is_held_for_approval_and_released_by_an_operator(china):
    rule = working_day_rule(china, due=BRIDGE)
    scheduler_tick(now=BRIDGE)
    run = TaskRun.objects.get(rule=rule, slot=BRIDGE)
    assert run.state == TaskRun.State.AWAITING_APPROVAL
    assert run.payload["calendar"]["hold"] is True
    said = explain_text(rule, BRIDGE)
    assert "may become a day off of Spring Festival" in said
    assert "once approved (the calendar holds uncertain days)" in said
    op = get_user_model().objects.create_user("op")
    assert catchup_approve(run_ids=[run.id], actor=op, now=BRIDGE) == 1
    run.refresh_from_db()
    assert run.state == TaskRun.State.PENDING


def test_an_uncertain_day_is_skipped_under_the_skip_policy(china):
    china.uncertain_days = BusinessCalendar.Uncertain.SKIP
    china.save()
    rule = working_day_rule(china, due=BRIDGE)
    scheduler_tick(now=BRIDGE)
    assert not TaskRun.objects.filter(rule=rule).exists()
    assert "no run (the calendar skips uncertain days)" in explain_text(rule, BRIDGE)


def notice_file(tmp_path, **over):
    data = {
        "country": "CN",
        "year": 2027,
        "days_off": [
            {"date": "2027-01-01", "name": "New Year's Day"},
            {"date": "2027-02-04", "name": "Spring Festival"},
        ],
        "working_days": [{"date": "2027-02-20", "name": "Spring Festival"}],
        **over,
    }
    path = tmp_path / "cn-2027.json"
    path.write_text(json.dumps(data))
    return path


def test_an_imported_notice_is_read_by_every_calendar_of_the_country_and_overrides_still_win(china, tmp_path):
    other = BusinessCalendar.objects.create(name="cn-office", country="CN")
    CalendarOverride.objects.create(
        calendar=other, date=date(2027, 2, 20), kind=CalendarOverride.Kind.CLOSED, reason="Office move"
    )
    out = StringIO()
    call_command("harness", "notice", "import", str(notice_file(tmp_path)), stdout=out)
    assert "CN 2027: 2 day(s) off, 1 make-up working day(s)" in out.getvalue()
    for cal in (china, other):
        pure = cal.business_days()
        assert pure.day(date(2027, 2, 4)).kind == "holiday"  # the notice decided: no longer uncertain
        assert pure.day(date(2027, 2, 5)).covered  # a published year: other dates are ordinary days
        assert pure.covers(date(2027, 6, 1))
    assert china.business_days().day(date(2027, 2, 20)).kind == "makeup"
    assert other.business_days().day(date(2027, 2, 20)).kind == "closed"
    # Importing again replaces the year's days.
    call_command("harness", "notice", "import", str(notice_file(tmp_path, working_days=[])), stdout=StringIO())
    assert NoticeDay.objects.filter(country="CN", year=2027).count() == 2


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"year": "2027"}, "year: a year"),
        ({"days_off": [{"date": "2027-13-01", "name": "x"}]}, "days_off #1: date must be YYYY-MM-DD"),
        ({"days_off": [], "working_days": []}, "the notice names no day"),
        ({"extra": 1}, "unknown field 'extra'"),
    ],
)
def test_a_bad_notice_is_refused_with_its_reason_and_saves_nothing(china, tmp_path, over, message):
    with pytest.raises(CommandError, match=message):
        call_command("harness", "notice", "import", str(notice_file(tmp_path, **over)), stdout=StringIO())
    assert not NoticeDay.objects.exists()


def test_zh_hans_calls_a_calendar_decision_not_a_business_day():
    with translation.override("zh-hans"):
        label = str(Decision.Reason.CALENDAR.label)
    assert "工作日" not in label and "非营业日" in label
    with translation.override("en"):
        assert str(Decision.Reason.CALENDAR.label).startswith("Not a business day (holiday")
