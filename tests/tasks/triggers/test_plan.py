"""The plan service over real records: rules run through real scheduler ticks (a late readiness flag,
a pause, an outage with catch-up), then planned. A plan of "no change" replays the past exactly as
recorded; a narrowed window marks exactly the slots it excludes; the number of queries does not
grow with the number of slots. The admin's "Review change" step shows the plan before saving."""

import io
import json
from datetime import UTC, datetime, time, timedelta
from time import perf_counter, process_time

import pytest
from django.core.management import CommandError, call_command
from django.template.loader import render_to_string
from django.urls import reverse

from harness_site.audit.models import AuditEntry
from runs.models import Decision, SchedulerTick, TaskRun
from tasks.admin.rule_review import REVIEW_TEMPLATE
from tasks.flags import flag_set
from tasks.models import TriggerRule
from tasks.rules import plan as planned
from tasks.rules import schedule
from tasks.triggers.operator import rule_pause, rule_resume
from tasks.triggers.plan import plan_json, rule_plan
from tasks.triggers.scheduler import scheduler_tick
from tests.support.api import api_for
from tests.support.desk import make_user
from tests.support.rules import make_rule, rule_form_post

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)  # 13:00 in Berlin
MINUTE = timedelta(minutes=1)
END = T0 + 60 * MINUTE
OUTAGE = (T0 + 20 * MINUTE, T0 + 42 * MINUTE)  # no tick ran from 12:20 to 12:41 UTC
# The minutes a tick runs: each slot, the re-checks around the late flag, the end of the outage.
TICKS = sorted({*range(0, 61, 5), 6, 7, 8, 9, 42, 46, 51})


def _history() -> tuple[TriggerRule, TriggerRule]:
    """Two rules through an hour of ticks, with an outage; `paced` is paused for a
    while, `waits` waits for a flag that comes seven minutes late."""
    paced = make_rule(
        "paced",
        kind="cron",
        cron="*/5 * * * *",
        timezone="Europe/Berlin",
        catchup="latest",
        catchup_max_delay_seconds=3600,
        due=T0,
    )
    waits = make_rule(
        "waits",
        kind="cron",
        cron="*/5 * * * *",
        timezone="Europe/Berlin",
        depends_on=["data.ready"],
        not_ready_policy="wait",
        ready_deadline=time(16, 0),
        ready_recheck_seconds=60,
        due=T0,
    )
    for minute in TICKS:
        now = T0 + minute * MINUTE
        if minute == 7:
            flag_set(name="data.ready", scope="2026-03-01", actor="pipeline", now=now)
        if minute == 46:
            rule_pause(rule=paced, actor="ops", now=now, reason="maintenance")
        if minute == 51:
            rule_resume(rule=paced, actor="ops", now=now, reason="done")
        if not OUTAGE[0] <= now < OUTAGE[1]:
            scheduler_tick(now=now)
    paced.refresh_from_db()
    waits.refresh_from_db()
    return paced, waits


def _edited(rule: TriggerRule, **changes) -> TriggerRule:
    edited = TriggerRule.objects.get(pk=rule.pk)
    for name, value in changes.items():
        setattr(edited, name, value)
    edited.full_clean()
    return edited


@pytest.mark.django_db
def test_a_plan_of_no_change_replays_the_recorded_past_slot_for_slot():
    paced, waits = _history()
    outcomes = {r.reason for r in Decision.objects.all()} | {r.source for r in TaskRun.objects.all()}
    # The history holds what the plan must replay: a catch-up, missed slots, paused slots, a late run.
    assert {"catchup", "missed", "superseded", "paused", "scheduler"} <= outcomes

    for rule in (paced, waits):
        plan = rule_plan(rule, _edited(rule), now=END, days=1)
        recorded = [r for r in plan.past if r.recorded is not None]
        assert len(recorded) == 13  # every slot of the hour, 12:00 to 13:00
        assert [r for r in plan.past if r.differs] == []
        assert plan.changes == [] and plan.consequences == []
        assert all(r.new == r.recorded.outcome for r in recorded)

    late = rule_plan(waits, _edited(waits), now=END, days=1)
    first = next(r for r in late.past if r.slot == T0)
    assert (first.new, first.recorded.outcome, first.at) == (planned.RUN, planned.RUN, T0 + 7 * MINUTE)


@pytest.mark.django_db
def test_a_narrowed_window_marks_exactly_the_slots_it_excludes():
    paced, _waits = _history()
    edited = _edited(paced, hours_start=time(13, 0), hours_end=time(13, 30), outside_hours="skip")
    plan = rule_plan(paced, edited, now=END, days=1)
    # Slots from 13:30 Berlin (12:30 UTC) that ran are now outside the window; missed and paused stay so.
    ran = {s for s, source in TaskRun.objects.filter(rule=paced).values_list("slot", "source") if s >= T0 + 30 * MINUTE}
    assert ran  # the catch-up at 12:40 and the slots after the pause
    assert {r.slot for r in plan.past if r.differs} == ran
    assert {r.new for r in plan.past if r.differs} == {"outside_window"}
    assert [c for c, _o, _n in plan.changes] == ["hours_start", "hours_end", "outside_hours"]


@pytest.mark.django_db
def test_the_queries_do_not_grow_with_the_slots(django_assert_max_num_queries):
    every_minute = make_rule("every-minute", kind="cron", cron="* * * * *", timezone="Europe/Berlin")
    now = every_minute.created_at + timedelta(days=14)
    # Ticks ran throughout but for two hours a week ago: every slot of the 14 days goes through
    # catch-up and the guards, and each has a record (a decision) to be read and compared. The
    # last tick handled the slot at `now`, so the rule's next fire is the one after it.
    SchedulerTick.objects.create(name="scheduler", last_tick_at=now)
    next_fire = schedule.next_slot(every_minute.schedule_spec(), now)
    TriggerRule.objects.filter(pk=every_minute.pk).update(next_fire_at=next_fire, last_slot_at=now)
    every_minute.refresh_from_db()
    slots = schedule.slots_between(every_minute.schedule_spec(), every_minute.created_at, now)
    # Half a minute past a slot, so the last slot of the outage is late (beyond the grace) whenever
    # the test runs: every one of its 120 slots was missed.
    down_from = (now - timedelta(days=7)).replace(second=30, microsecond=0)
    down = (down_from, down_from + timedelta(hours=2))
    Decision.objects.bulk_create(
        Decision(rule=every_minute, slot=s, reason="missed", created_at=down[1])
        if down[0] <= s < down[1]
        else Decision(rule=every_minute, slot=s, reason="overlap", created_at=s)
        for s in slots
    )
    edited = _edited(every_minute, weekdays="mon-fri")

    def review():
        plan = rule_plan(every_minute, edited, now=now, days=14)
        data = plan_json(plan, zone=edited.timezone, rows=200)
        context = {"plan": data, "past_rows": data["past"]["rows"], "future_rows": data["future"]["rows"]}
        context |= {"opts": TriggerRule._meta, "object": every_minute, "cancel_url": "/", "shown": 200}
        return plan, data, render_to_string(REVIEW_TEMPLATE, context)

    seconds = []
    for _ in range(3):  # the first in a process also compiles the template (then cached)
        started, cpu = perf_counter(), process_time()
        with django_assert_max_num_queries(10):
            plan, data, page = review()
        seconds.append((perf_counter() - started, process_time() - cpu))
    print(
        f"\n[plan bench] 14 days of per-minute slots ({len(plan.past)} past, {len(plan.future)} ahead): built and "
        f"rendered in {seconds[-1][0]:.2f} s wall, {seconds[-1][1]:.2f} s CPU (the first in the process: "
        f"{seconds[0][0]:.2f} s wall, template compiled)"
    )
    assert len(plan.past) == 14 * 1440
    assert {r.new for r in plan.past} == {planned.RUN, "calendar", "missed"}
    assert sum(r.new == "missed" for r in plan.past) == 120
    assert data["future"]["fires_old"] == 14 * 1440
    assert data["future"]["first_difference"] is not None
    assert page.count("<tr>") > 200


@pytest.mark.django_db
def test_a_catchup_burst_and_a_key_of_another_shape_are_dangerous():
    rule = make_rule(
        "behind",
        kind="cron",
        cron="0 * * * *",
        timezone="UTC",
        dedupe_key_template="{rule}:{business_date}",
        catchup="none",
        due=T0,
    )
    edited = _edited(rule, catchup="all", catchup_max_delay_seconds=6 * 3600, dedupe_key_template="{rule}:{slot}")
    plan = rule_plan(rule, edited, now=T0 + timedelta(hours=5, minutes=10), days=1)
    codes = [c.said.code for c in plan.consequences]
    assert codes[:2] == [planned.BURST, planned.KEY_SHAPE]
    assert plan.dangerous
    assert plan.consequences[0].said.params["n"] == 6  # 12:00 to 17:00 would run at once


# --- the admin's review step ---


def _form(rule: TriggerRule, **over) -> dict:
    fields = {
        "name": rule.name,
        "enabled": None,
        "reason": rule.reason,
        "kind": rule.kind,
        "cron": rule.cron,
        "timezone": rule.timezone,
        "dedupe_key_template": rule.dedupe_key_template,
        "params": "{}",
    }
    return rule_form_post(**{**fields, **over})


@pytest.mark.django_db
def test_the_admin_shows_the_plan_before_saving_and_saves_on_confirmation(admin_client):
    rule = make_rule("report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai")
    url = reverse("admin:tasks_triggerrule_change", args=[rule.pk])

    review = admin_client.post(url, _form(rule, cron="0 10 * * *"))
    page = review.content.decode()
    assert review.status_code == 200
    assert 'id="plan-confirm"' in page and 'name="_plan_confirmed" value="1"' in page
    assert "0 9 * * *" in page and "0 10 * * *" in page
    rule.refresh_from_db()
    assert (rule.cron, rule.version) == ("0 9 * * *", 1)  # nothing saved yet

    saved = admin_client.post(url, _form(rule, cron="0 10 * * *", _plan_confirmed="1"))
    assert saved.status_code == 302
    rule.refresh_from_db()
    assert (rule.cron, rule.version) == ("0 10 * * *", 2)


@pytest.mark.django_db
def test_a_confirmation_for_an_older_version_is_planned_again(admin_client):
    rule = make_rule("report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai")
    url = reverse("admin:tasks_triggerrule_change", args=[rule.pk])
    TriggerRule.objects.filter(pk=rule.pk).update(version=2)  # someone saved meanwhile

    again = admin_client.post(url, _form(rule, cron="0 10 * * *", _plan_confirmed="1"))
    assert again.status_code == 200 and 'id="plan-stale"' in again.content.decode()
    rule.refresh_from_db()
    assert rule.cron == "0 9 * * *"


@pytest.mark.django_db
def test_an_edit_with_errors_is_the_form_again_not_a_plan(admin_client):
    rule = make_rule("report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai")
    url = reverse("admin:tasks_triggerrule_change", args=[rule.pk])
    response = admin_client.post(url, _form(rule, cron="0 9 * * * *"))
    assert response.status_code == 200 and "plan-confirm" not in response.content.decode()
    assert "has 6 fields" in response.content.decode()


# --- `harness rules plan` and `rules import`: plan, then apply ---


def _harness(*args: str) -> str:
    out = io.StringIO()
    call_command("harness", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def _file(tmp_path, **over):
    item = {
        "name": "report",
        "reason": "the 09:00 report",
        "kind": "cron",
        "cron": "0 9 * * *",
        "timezone": "Asia/Shanghai",
        "dedupe_key_template": "{rule}:{business_date}",
        "skill": "harness.noop",
        **over,
    }
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"rules": [item]}))
    return path


@pytest.mark.django_db
def test_rules_plan_prints_each_rule_and_fails_on_a_dangerous_consequence_unless_allowed(tmp_path):
    _harness("rules", "import", str(_file(tmp_path)), "--reason", "first version", "--by", "ana")
    safe = _harness("rules", "plan", str(_file(tmp_path, cron="0 10 * * *")))
    assert "rule report: changed" in safe and "~ cron: '0 9 * * *' -> '0 10 * * *'" in safe

    dangerous = _file(tmp_path, dedupe_key_template="{rule}:{slot}")
    with pytest.raises(CommandError, match="dangerous consequences in report"):
        _harness("rules", "plan", str(dangerous))
    allowed = _harness("rules", "plan", str(dangerous), "--allow", "--json")
    doc = json.loads(allowed)
    assert doc["rules"][0]["dangerous"] is True
    assert doc["rules"][0]["changes"] == [
        {"field": "dedupe_key_template", "old": "{rule}:{business_date}", "new": "{rule}:{slot}"}
    ]


@pytest.mark.django_db
def test_rules_import_is_plan_then_apply_all_or_nothing_and_audited(tmp_path):
    _harness("rules", "import", str(_file(tmp_path)), "--reason", "first version", "--by", "ana")
    dangerous = _file(tmp_path, dedupe_key_template="{rule}:{slot}")
    with pytest.raises(CommandError, match="nothing was saved"):
        _harness("rules", "import", str(dangerous), "--reason", "per slot", "--by", "ben")
    assert TriggerRule.objects.get(name="report").dedupe_key_template == "{rule}:{business_date}"

    _harness("rules", "import", str(dangerous), "--reason", "per slot", "--by", "ben", "--allow")
    rule = TriggerRule.objects.get(name="report")
    assert rule.dedupe_key_template == "{rule}:{slot}"
    entries = list(AuditEntry.objects.filter(action=AuditEntry.Action.RULE_IMPORT).order_by("id"))
    assert [(e.actor, e.reason, e.target_id) for e in entries] == [
        ("ana", "first version", str(rule.pk)),
        ("ben", "per slot", str(rule.pk)),
    ]
    assert entries[1].details["changes"] == ["dedupe_key_template"]
    assert entries[1].details["consequences"][0]["dangerous"] is True


# --- POST /api/v1/rules/{name}/plan ---


@pytest.mark.django_db
def test_the_api_plans_a_change_and_a_creation_saving_nothing():
    client = api_for(make_user("root", superuser=True))
    rule = make_rule("report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai")

    changed = client.post("/api/v1/rules/report/plan", {"cron": "0 10 * * *"}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["changes"] == [{"field": "cron", "old": "0 9 * * *", "new": "0 10 * * *"}]
    assert changed.json()["created"] is False
    rule.refresh_from_db()
    assert rule.cron == "0 9 * * *"

    new = {"reason": "new", "kind": "cron", "cron": "0 8 * * *", "timezone": "UTC", "skill": "harness.noop"}
    created = client.post("/api/v1/rules/fresh/plan?days=3", new, format="json")
    assert created.status_code == 200, created.content
    assert created.json()["created"] is True and created.json()["future"]["fires_new"] == 3
    assert not TriggerRule.objects.filter(name="fresh").exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/rules/report/plan", {"cron": "0 9 * * * *"}, "cron"),
        ("/api/v1/rules/report/plan?days=0", {}, "days"),
        ("/api/v1/rules/report/plan?days=x", {}, "days"),
        ("/api/v1/rules/report/plan", {"name": "other"}, "name"),
    ],
)
def test_the_api_refuses_a_bad_plan_request_with_a_problem(path, body, field):
    client = api_for(make_user("root", superuser=True))
    make_rule("report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai")
    response = client.post(path, body, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == field
