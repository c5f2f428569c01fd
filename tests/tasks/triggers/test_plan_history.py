"""The plan service over real ticks where something changed: after a retime a plan of no change
differs nowhere and a revert differs only since the retime; while the scheduler is behind, the slots
after its last tick are undecided on both sides; a retimed slot inside an outage only the scheduler's
tick history shows is replayed as that outage decided it; one late slot is no dangerous burst."""

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from tasks.models import TriggerRule
from tasks.rules import plan as planned
from tasks.triggers.operator import rule_save
from tasks.triggers.plan import plan_json, rule_plan
from tasks.triggers.scheduler import scheduler_tick
from tests.support.rules import make_rule

DAY0 = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)  # a Monday; 08:00 in Shanghai
HOUR = timedelta(hours=1)


def _tick_hourly(start: datetime, end: datetime, *, down: tuple[datetime, datetime] | None = None) -> None:
    """A beat that ticks on every hour in [start, end), but not inside `down`."""
    at = start
    while at < end:
        if down is None or not down[0] <= at < down[1]:
            scheduler_tick(now=at)
        at += HOUR


def _edited(rule: TriggerRule, **changes) -> TriggerRule:
    edited = TriggerRule.objects.get(pk=rule.pk)
    for name, value in changes.items():
        setattr(edited, name, value)
    edited.full_clean()
    return edited


def _daily(name: str, **fields) -> TriggerRule:
    return make_rule(name, kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", now=DAY0 - HOUR, **fields)


@pytest.mark.django_db
def test_after_a_retime_no_change_differs_nowhere_and_a_revert_only_since_the_retime():
    rule = _daily("report")
    retimed_at = DAY0 + 4 * 24 * HOUR + 4 * HOUR  # Friday 12:00 in Shanghai
    _tick_hourly(DAY0, retimed_at)  # 09:00 ran five times
    rule.cron = "0 10 * * *"
    rule_save(rule, now=retimed_at)
    _tick_hourly(retimed_at, DAY0 + 9 * 24 * HOUR)  # 10:00 ran four times
    now = DAY0 + 9 * 24 * HOUR
    rule.refresh_from_db()

    same = rule_plan(rule, _edited(rule), now=now, days=14)
    assert [(r.slot, r.current, r.new) for r in same.past if r.differs] == []
    assert len([r for r in same.past if r.compared]) == 4  # the 10:00 slots since the retime

    revert = rule_plan(rule, _edited(rule, cron="0 9 * * *"), now=now, days=14)
    differing = [r for r in revert.past if r.differs]
    assert len(differing) == 8 and all(r.slot > retimed_at for r in differing)
    ran_at_nine = [r for r in revert.past if r.slot < retimed_at and r.recorded is not None]
    assert len(ran_at_nine) == 5
    assert all(r.recorded.outcome == planned.RUN and not r.differs for r in ran_at_nine)
    data = plan_json(revert, zone=rule.timezone)
    assert data["past"]["differing"] == 8
    # Tomorrow's 09:00 is the first fire that goes otherwise (today's 10:00 is past).
    assert data["future"]["first_difference_at"] == "2026-03-11T09:00:00+08:00"


@pytest.mark.django_db
def test_while_the_scheduler_is_behind_no_change_and_an_edit_leave_undecided_slots_alone():
    rule = _daily("report")
    _tick_hourly(DAY0, DAY0 + 3 * 24 * HOUR)  # then no tick for two days
    now = DAY0 + 5 * 24 * HOUR + 6 * HOUR
    plan = rule_plan(rule, _edited(rule), now=now, days=14)
    assert [(r.slot, r.current, r.new) for r in plan.past if r.differs] == []
    behind = [r for r in plan.past if r.slot > DAY0 + 3 * 24 * HOUR]
    assert [(r.current, r.new) for r in behind] == [(planned.PENDING, planned.PENDING)] * 3

    # An edit planned during the outage: only what it changes in the decided past differs.
    edited = rule_plan(rule, _edited(rule, weekdays="tue-sun"), now=now, days=14)
    assert [(r.slot, r.current, r.new) for r in edited.past if r.differs] == [
        (DAY0 + HOUR, planned.RUN, "calendar")  # Monday 09:00
    ]


@pytest.mark.django_db
def test_a_retimed_slot_inside_an_outage_of_the_scheduler_is_replayed_as_the_outage_decided_it():
    rule = _daily("report", catchup="none")
    # Wednesday 09:30 to 13:30 Shanghai no tick ran: the 09:00 slot ran on time, no slot of the rule fell inside.
    down = (DAY0 + 2 * 24 * HOUR + 2 * HOUR, DAY0 + 2 * 24 * HOUR + 6 * HOUR)
    _tick_hourly(DAY0, DAY0 + 4 * 24 * HOUR, down=down)
    now = DAY0 + 4 * 24 * HOUR
    rows = {r.slot: r for r in rule_plan(rule, _edited(rule, cron="0 10 * * *"), now=now, days=14).past}
    wednesday_ten = DAY0 + 2 * 24 * HOUR + 2 * HOUR
    assert rows[wednesday_ten].new == "missed"
    assert rows[wednesday_ten - 24 * HOUR].new == planned.RUN

    latest = _edited(rule, cron="0 10 * * *", catchup="latest", catchup_max_delay_seconds=6 * 3600)
    rows = {r.slot: r for r in rule_plan(rule, latest, now=now, days=14).past}
    assert (rows[wednesday_ten].new, rows[wednesday_ten].at) == (planned.CATCHUP, down[1])


def _harness(*args: str) -> str:
    out = io.StringIO()
    call_command("harness", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.django_db
def test_one_late_slot_under_catchup_latest_is_imported_without_allow(tmp_path):
    item = {
        "name": "hourly",
        "reason": "hourly sync",
        "kind": "cron",
        "cron": "0 * * * *",
        "timezone": "UTC",
        "dedupe_key_template": "{rule}:{slot}",
        "skill": "harness.noop",
    }
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"rules": [item]}))
    _harness("rules", "import", str(path), "--reason", "first", "--by", "ana")
    now = timezone.now()
    TriggerRule.objects.filter(name="hourly").update(next_fire_at=now.replace(minute=0, second=0) - 5 * HOUR)

    path.write_text(json.dumps({"rules": [{**item, "catchup": "latest", "catchup_max_delay_seconds": 6 * 3600}]}))
    plan = json.loads(_harness("rules", "plan", str(path), "--json"))["rules"][0]
    assert plan["dangerous"] is False
    assert [c["dangerous"] for c in plan["consequences"]] == [False]  # said, not refused
    _harness("rules", "import", str(path), "--reason", "catch up", "--by", "ana")
    assert TriggerRule.objects.get(name="hourly").catchup == "latest"

    # Every due slot at once is a burst: refused without --allow.
    path.write_text(json.dumps({"rules": [{**item, "catchup": "all", "catchup_max_delay_seconds": 6 * 3600}]}))
    plan = json.loads(_harness("rules", "plan", str(path), "--json", "--allow"))["rules"][0]
    assert plan["dangerous"] is True
