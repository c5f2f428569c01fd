"""A working-day rule on the China calendar across New Year 2027, a year chinesecalendar 1.11.0 has
no notice for, end to end: scheduler ticks at 09:00 Shanghai on 31 December, 1 January and 4 January;
the two working days are claimed (due at their slots, weeks ahead of the host's clock, so no
worker is started), New Year's Day is a calendar decision (the law fixes it),
the 4 January key names 31 December as the previous business day, and `harness explain` of that
run says the calendar had no data for its day."""

import json
from datetime import UTC, datetime

import pytest

from runs.models import Decision, TaskRun
from tasks.models import BusinessCalendar
from tasks.triggers.scheduler import scheduler_tick
from tests.support.rules import working_day_rule

pytestmark = [pytest.mark.e2e]

EVE = datetime(2026, 12, 31, 1, 0, tzinfo=UTC)  # 09:00 Asia/Shanghai
NEW_YEAR = datetime(2027, 1, 1, 1, 0, tzinfo=UTC)
MONDAY = datetime(2027, 1, 4, 1, 0, tzinfo=UTC)


def test_new_years_day_2027_does_not_run_on_a_calendar_without_2027_data(harness):
    china = BusinessCalendar.objects.create(name="cn-mainland", country="CN")
    rule = working_day_rule(china, due=EVE, name="cn-working-day", reason="end-to-end test", skill="harness.record")
    ticks = []
    for now in (EVE, NEW_YEAR, MONDAY):
        type(rule).objects.filter(pk=rule.pk).update(next_fire_at=now)
        ticks.append(scheduler_tick(now=now))

    assert [(t.claimed, t.decisions) for t in ticks] == [(1, 0), (0, 1), (1, 0)]
    assert TaskRun.objects.get(rule=rule, slot=EVE).run_after == EVE
    decision = Decision.objects.get(rule=rule, slot=NEW_YEAR)
    assert (decision.details["day"], decision.details["name"], decision.details["no_data"]) == (
        "holiday",
        "New Year's Day",
        True,
    )
    monday = TaskRun.objects.get(rule=rule, slot=MONDAY)
    assert not TaskRun.objects.filter(rule=rule, slot=NEW_YEAR).exists()
    assert monday.biz_key == f"rule/{rule.pk}/slot/cn-working-day:2027-01-04:data-of-2026-12-31"

    out = harness.manage("harness", "explain", rule.name, MONDAY.isoformat(), "--json")
    assert out.returncode == 0, out.stderr
    assert "calendar cn-mainland has no data for 2027-01-04 yet" in json.loads(out.stdout)["summary"]
    out = harness.manage("harness", "explain", rule.name, NEW_YEAR.isoformat(), "--json")
    assert "New Year's Day, a holiday fixed by law" in json.loads(out.stdout)["summary"]
