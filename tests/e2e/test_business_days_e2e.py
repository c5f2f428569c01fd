"""A working-day rule on the China calendar, end to end: the scheduler tick at 09:00 Shanghai on the
make-up Saturday 14 February 2026 claims a run that a real worker process executes; the tick on the
holiday Monday 16 February records a calendar decision naming the Spring Festival, and `harness
explain` says so. The tick is given those instants (`now=`): the calendar, not the host's clock, decides."""

import json
from datetime import UTC, datetime

import pytest

from runs.models import Decision, TaskRun
from tasks.models import BusinessCalendar, DiagnosticRecord
from tasks.triggers.scheduler import scheduler_tick
from tests.e2e.helpers import wait_finished, wait_run_of
from tests.support.rules import working_day_rule

pytestmark = [pytest.mark.e2e, pytest.mark.one_pass("postgresql")]

SAT_MAKEUP = datetime(2026, 2, 14, 1, 0, tzinfo=UTC)  # 09:00 Asia/Shanghai
MON_HOLIDAY = datetime(2026, 2, 16, 1, 0, tzinfo=UTC)


def test_a_make_up_saturday_runs_and_a_holiday_monday_is_a_decision(harness):
    china = BusinessCalendar.objects.create(name="cn-mainland", country="CN")
    rule = working_day_rule(
        china, due=SAT_MAKEUP, name="cn-working-day", reason="end-to-end test", skill="harness.record"
    )
    harness.worker()

    saturday = scheduler_tick(now=SAT_MAKEUP)
    run = wait_finished(wait_run_of(rule, slot=SAT_MAKEUP))
    assert run.state == TaskRun.State.SUCCEEDED, run.last_error
    assert run.biz_key == f"rule/{rule.pk}/slot/cn-working-day:2026-02-14:data-of-2026-02-13"
    assert DiagnosticRecord.objects.filter(biz_key=run.biz_key).count() == 1

    type(rule).objects.filter(pk=rule.pk).update(next_fire_at=MON_HOLIDAY)
    monday = scheduler_tick(now=MON_HOLIDAY)
    decision = Decision.objects.get(rule=rule, slot=MON_HOLIDAY)
    assert decision.reason == Decision.Reason.CALENDAR
    assert (decision.details["day"], decision.details["name"]) == ("holiday", "Spring Festival")
    assert not TaskRun.objects.filter(rule=rule, slot=MON_HOLIDAY).exists()
    assert (saturday.claimed, monday.claimed, monday.decisions) == (1, 0, 1)

    out = harness.manage("harness", "explain", rule.name, MON_HOLIDAY.isoformat(), "--json")
    assert out.returncode == 0, out.stderr
    assert "2026-02-16: Spring Festival (calendar cn-mainland)" in json.loads(out.stdout)["summary"]
