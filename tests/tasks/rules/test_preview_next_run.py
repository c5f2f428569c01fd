"""For a rule whose calendar or window skips fires, "next fire" on the rule's header, the status
board and the dashboard is its next *run* (the preview's answer), not the cron's next fire; read in
a fixed number of queries whatever the number of rules."""

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from runs.desk.status import next_runs
from tasks.models import BusinessCalendar, CalendarOverride
from tasks.rules import business_days, evaluation, preview, schedule
from tasks.rules.guards import rule_guards
from tests.support.desk import client_for, make_user
from tests.support.rules import make_rule

SHANGHAI = ZoneInfo("Asia/Shanghai")
DAILY = schedule.ScheduleSpec(kind="cron", timezone="Asia/Shanghai", cron="0 9 * * *")


def nine(day: date) -> datetime:
    return datetime.combine(day, time(9), tzinfo=SHANGHAI).astimezone(UTC)


# Sat 2027-02-06 to Sun 2027-02-14 closed (a Spring Festival shutdown); Mon 2027-02-15 opens.
SHUTDOWN = {date(2027, 2, 6) + timedelta(days=i): "Spring Festival" for i in range(9)}


@pytest.mark.parametrize(
    ("guards", "first", "expected"),
    [
        (evaluation.Guards(timezone="Asia/Shanghai"), nine(date(2027, 2, 6)), nine(date(2027, 2, 6))),
        (
            evaluation.Guards(timezone="Asia/Shanghai", weekdays=evaluation.parse_weekdays("mon-fri")),
            nine(date(2027, 2, 6)),  # a Saturday
            nine(date(2027, 2, 8)),
        ),
        (
            evaluation.Guards(
                timezone="Asia/Shanghai", calendar=business_days.BusinessCalendar(name="cn", closed=SHUTDOWN)
            ),
            nine(date(2027, 2, 5)) + timedelta(minutes=1),  # just after Friday's fire
            nine(date(2027, 2, 15)),
        ),
        (
            evaluation.Guards(
                timezone="Asia/Shanghai", excluded_dates=frozenset(date(2027, 1, 1) + timedelta(i) for i in range(400))
            ),
            nine(date(2027, 1, 1)),
            None,  # no run ahead within the look-ahead: unknown, not the cron's fire
        ),
    ],
)
def test_the_next_run_is_the_first_fire_the_guards_let_run(guards, first, expected):
    assert preview.next_run(DAILY, guards, first=first) == expected


def test_the_next_run_is_the_first_fire_the_preview_marks_as_running():
    guards = evaluation.Guards(
        timezone="Asia/Shanghai", calendar=business_days.BusinessCalendar(name="cn", closed=SHUTDOWN)
    )
    shown = preview.schedule_preview(DAILY, at=nine(date(2027, 2, 5)), count=12, guards=guards)
    running = [
        f.utc for f in shown.fires if f.guards and f.guards.code in (evaluation.SLOT_RUNS, evaluation.SLOT_NO_DATA_OPEN)
    ]
    assert preview.next_run(DAILY, guards, first=nine(date(2027, 2, 5)) + timedelta(seconds=1)) == running[0]


def _closed_weekend_rule(name: str, calendar: BusinessCalendar):
    """A daily 09:00 rule whose next fire is next week's Saturday, on a calendar closed at weekends."""
    today = timezone.now().astimezone(SHANGHAI).date()
    saturday = today + timedelta(days=(5 - today.weekday()) % 7 + 7)
    rule = make_rule(
        name,
        kind="cron",
        cron="0 9 * * *",
        timezone="Asia/Shanghai",
        business_calendar=calendar,
        due=nine(saturday),
    )
    return rule, nine(saturday), nine(saturday + timedelta(days=2))


@pytest.mark.django_db
def test_the_header_the_board_and_the_dashboard_show_the_next_run(settings):
    calendar = BusinessCalendar.objects.create(name="office", weekend="sat-sun")
    rule, saturday, monday = _closed_weekend_rule("weekday-report", calendar)
    assert rule_guards(rule).calendar is not None and preview.rule_next_run(rule) == monday
    viewer = client_for(make_user("vera", "Viewers"))
    header = viewer.get(reverse("admin:tasks_triggerrule_change", args=[rule.pk]))
    board = viewer.get(reverse("harness-status"))
    dashboard = viewer.get(reverse("harness-dashboard"))
    assert header.context["rule_status"]["next_run"] == monday
    (row,) = board.context["b"].rows
    assert row.next_run == monday and row.next_fire_at == saturday
    (fire,) = dashboard.context["d"].next_fires
    assert fire["next_run"] == monday
    for page in (header, board, dashboard):
        assert monday.isoformat() in page.content.decode()


@pytest.mark.django_db
def test_next_runs_cost_two_queries_whatever_the_rules_and_calendars():
    def count(n: int) -> int:
        ids = []
        for i in range(n):
            calendar = BusinessCalendar.objects.create(name=f"cal-{n}-{i}", weekend="sat-sun")
            CalendarOverride.objects.create(calendar=calendar, date=date(2030, 1, 2), kind="closed", reason="x")
            ids.append(_closed_weekend_rule(f"rule-{n}-{i}", calendar)[0].id)
        with CaptureQueriesContext(connection) as queries:
            found = next_runs(ids)
        assert len(found) == n
        return len(queries)

    assert count(1) == count(20) == 2
