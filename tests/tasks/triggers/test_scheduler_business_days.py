# ruff: noqa: RUF001  (Chinese text uses full-width punctuation)
"""A working-day rule on a stored China calendar, through the real scheduler tick and database:
a make-up Saturday runs (its key names the previous business day), a holiday Monday is a recorded
calendar decision carrying the holiday's name, and an override's reason decides a day too."""

import json
from datetime import UTC, date, datetime

import pytest
from django.utils import translation

from runs.models import Decision, TaskRun
from tasks.models import BusinessCalendar, CalendarOverride
from tasks.rules import evaluation
from tasks.sentences import say_all
from tasks.triggers.explain import slot_explanation
from tasks.triggers.plan import plan_json, rule_plan
from tasks.triggers.scheduler import scheduler_tick
from tests.support.rules import at_0900_shanghai, make_rule, working_day_rule

SAT_MAKEUP = at_0900_shanghai(date(2026, 2, 14))
MON_HOLIDAY = at_0900_shanghai(date(2026, 2, 16))


@pytest.fixture
def china(db):
    return BusinessCalendar.objects.create(name="cn-mainland", country="CN")


def test_a_make_up_saturday_runs_with_the_previous_business_day_in_its_key(china):
    rule = working_day_rule(china, due=SAT_MAKEUP)
    scheduler_tick(now=SAT_MAKEUP)
    run = TaskRun.objects.get(rule=rule)
    assert run.slot == SAT_MAKEUP
    assert run.biz_key == f"rule/{rule.pk}/slot/cn-daily-report:2026-02-14:data-of-2026-02-13"
    assert not Decision.objects.filter(rule=rule).exists()


def test_a_holiday_monday_is_a_decision_with_the_holidays_name(china):
    rule = working_day_rule(china, due=MON_HOLIDAY)
    scheduler_tick(now=MON_HOLIDAY)
    assert not TaskRun.objects.filter(rule=rule).exists()
    decision = Decision.objects.get(rule=rule, slot=MON_HOLIDAY)
    assert decision.reason == Decision.Reason.CALENDAR
    assert decision.details["name"] == "Spring Festival"
    assert decision.details["why"] == evaluation.WHY_NOT_BUSINESS_DAY
    with translation.override("en"):
        said = say_all(slot_explanation(rule=rule, slot=MON_HOLIDAY, now=MON_HOLIDAY).said)
    assert "2026-02-16: Spring Festival (calendar cn-mainland)" in said
    with translation.override("zh-hans"):
        said = say_all(slot_explanation(rule=rule, slot=MON_HOLIDAY, now=MON_HOLIDAY).said)
    assert "2026-02-16：春节（日历 cn-mainland）" in said


def test_an_override_closes_a_working_day_with_its_reason(china):
    shutdown = at_0900_shanghai(date(2026, 12, 31))
    CalendarOverride.objects.create(
        calendar=china, date=date(2026, 12, 31), kind=CalendarOverride.Kind.CLOSED, reason="Year-end shutdown"
    )
    rule = working_day_rule(china, due=shutdown)
    scheduler_tick(now=shutdown)
    decision = Decision.objects.get(rule=rule, slot=shutdown)
    assert (decision.details["day"], decision.details["name"]) == ("closed", "Year-end shutdown")


def test_a_calendar_in_use_cannot_be_deleted(china):
    from django.db.models import ProtectedError

    working_day_rule(china, due=SAT_MAKEUP)
    with pytest.raises(ProtectedError):
        china.delete()


def test_a_change_plan_names_the_calendars_decisions_in_both_languages(china):
    """Putting a daily rule on the China calendar: the plan's future says which fires the calendar
    drops and why (23 Feb 2026 is still the Spring Festival) and that a make-up Saturday runs."""
    now = datetime(2026, 2, 20, 2, 0, tzinfo=UTC)
    rule = make_rule("cn-report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", due=now, now=now)
    edited = type(rule).objects.get(pk=rule.pk)
    edited.business_calendar = china
    plan = rule_plan(rule, edited, now=now, days=14)
    for language, holiday in (("en", "Spring Festival"), ("zh-hans", "春节")):
        with translation.override(language):
            text = json.dumps(plan_json(plan, zone="Asia/Shanghai"), ensure_ascii=False, default=str)
        assert "2026-02-23" in text and holiday in text, (language, text[:2000])
