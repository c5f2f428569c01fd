"""The objective pass (runs/engine/objectives.py) on the real database, the clock passed in: the status and
cause of real slots (readiness, pool, pause), one alert per slot and kind, acknowledgement, a fixed
number of queries, and a test day whose met/missed history and metrics agree with the runs table."""

from datetime import UTC, datetime, time, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from deadletters.alerts import alert_check_scheduler
from deadletters.models import Alert
from runs.desk.metrics import metrics_registry
from runs.desk.objectives import objective_history, objective_status_for_rules
from runs.desk.selectors import scheduler_health
from runs.engine.executor import run_execute
from runs.engine.objectives import (
    AT_RISK_ALERT,
    BREACHED_ALERT,
    OBJECTIVE_PASS_QUERIES,
    RECOVERED_ALERT,
    cause_text,
    objective_acknowledge,
    objective_evaluate,
    objective_sweep,
)
from runs.models import PoolSlot, PoolWaiter, SchedulerTick, SlotObjective, TaskRun
from tasks.flags import flag_set
from tasks.models import BusinessCalendar, Pool, TriggerRule
from tasks.triggers.operator import rule_pause
from tasks.triggers.scheduler import scheduler_tick
from tests.support.desk import client_for, make_user
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db(transaction=True)

FLAG = "raw_data.ready"
SH = "Asia/Shanghai"


def sh(hh: int, mm: int, ss: int = 0) -> datetime:
    """2026-12-02 hh:mm:ss in Shanghai (UTC+8), as UTC."""
    return datetime(2026, 12, 2, hh - 8, mm, ss, tzinfo=UTC)


SLOT = sh(8, 0)


def alerts(kind: str) -> int:
    return Alert.objects.filter(channel=None, kind=kind).count()


def row(rule: TriggerRule, slot: datetime = SLOT) -> SlotObjective:
    return SlotObjective.objects.get(rule=rule, slot=slot)


def execute(run: TaskRun, at: datetime) -> str:
    return run_execute(run_id=run.id, worker="w1", clock=lambda: at, rand=lambda: 0.5).status


def report(name: str = "daily-report", **over) -> TriggerRule:
    """08:00 Shanghai every day, done by 09:30; due at SLOT."""
    fields = {
        "kind": TriggerRule.Kind.CRON,
        "cron": "0 8 * * *",
        "timezone": SH,
        "dedupe_key_template": "{rule}:{business_date}",
        "objective": TriggerRule.ObjectiveKind.WALL,
        "objective_time": time(9, 30),
        **over,
    }
    return make_rule(name, due=SLOT, **fields)


def test_a_late_readiness_flag_goes_at_risk_before_the_objective_and_alerts_once():
    rule = report(depends_on=[FLAG], not_ready_policy="wait", ready_deadline=time(12, 0), ready_recheck_seconds=60)
    scheduler_tick(now=sh(8, 0, 5))  # the slot is held: the flag is not set

    objective_evaluate(now=sh(8, 0, 10))
    assert row(rule).status == "on_track"
    # The default estimate (10 s queue + 60 s run) still fits at 09:28:30 …
    objective_evaluate(now=sh(9, 28, 30))
    assert row(rule).status == "on_track" and alerts(AT_RISK_ALERT) == 0
    # … and no longer at 09:29: at risk, a minute before the breach, with the flag named.
    objective_evaluate(now=sh(9, 29))
    found = objective_status_for_rules([rule.id])[rule.id]
    assert found.status == "at_risk"
    assert found.cause.startswith(f"waiting for readiness flag {FLAG} (not set since ")
    objective_evaluate(now=sh(9, 29, 30))
    assert alerts(AT_RISK_ALERT) == 1
    entry = Alert.objects.get(channel=None, kind=AT_RISK_ALERT)
    assert entry.payload["rule"] == rule.name and FLAG in entry.payload["reason"]

    # The flag comes at 09:40: the run finishes late, breached once, with its lateness.
    flag_set(name=FLAG, scope="2026-12-02", actor="pipeline", now=sh(9, 40))
    scheduler_tick(now=sh(9, 40, 5))
    execute(TaskRun.objects.get(rule=rule), sh(9, 40, 10))
    objective_evaluate(now=sh(9, 41))
    objective_evaluate(now=sh(9, 42))
    done = row(rule)
    assert (done.status, done.closed, done.lateness_seconds) == ("breached", True, 610.0)
    assert alerts(BREACHED_ALERT) == 1 and alerts(RECOVERED_ALERT) == 0


def test_a_rule_that_meets_its_objective_sends_nothing():
    rule = report()
    scheduler_tick(now=sh(8, 0, 5))
    objective_evaluate(now=sh(8, 0, 6))
    execute(TaskRun.objects.get(rule=rule), sh(8, 0, 7))
    objective_evaluate(now=sh(8, 1))
    assert (row(rule).status, row(rule).closed) == ("met", True)
    assert Alert.objects.filter(kind__startswith="objective_").count() == 0


def test_an_at_risk_slot_that_ends_in_time_sends_recovered():
    rule = report(objective=TriggerRule.ObjectiveKind.OFFSET, objective_offset_seconds=60, objective_time=None)
    scheduler_tick(now=sh(8, 0, 5))
    objective_evaluate(now=sh(8, 0, 6))  # 6 s + 70 s expected > 60 s: at risk
    assert alerts(AT_RISK_ALERT) == 1
    execute(TaskRun.objects.get(rule=rule), sh(8, 0, 30))
    objective_evaluate(now=sh(8, 0, 40))
    assert row(rule).status == "met" and alerts(RECOVERED_ALERT) == 1


def test_a_full_pool_puts_another_rule_at_risk_with_the_pool_named():
    llm = Pool.objects.create(name="llm-provider", reason="test", max_concurrency=1)
    holder = make_rule("holder", interval_seconds=3600)
    holder.pools.add(llm)
    held = TaskRun.objects.create(
        biz_key="held", rule=holder, rule_name="holder", skill="harness.noop", source="manual",
        trigger_at=SLOT, run_after=SLOT, state=TaskRun.State.RUNNING, lease_owner="w0",
        lease_expires_at=SLOT + timedelta(hours=1), fence=1,
    )  # fmt: skip
    PoolSlot.objects.create(pool=llm, run=held, fence=1, acquired_at=SLOT, expires_at=SLOT + timedelta(hours=1))
    rule = report(objective=TriggerRule.ObjectiveKind.OFFSET, objective_offset_seconds=90, objective_time=None)
    rule.pools.add(llm)
    scheduler_tick(now=sh(8, 0, 1))
    run = TaskRun.objects.get(rule=rule)
    assert execute(run, sh(8, 0, 2)) == "pool_wait" and PoolWaiter.objects.filter(run=run).exists()

    objective_evaluate(now=sh(8, 0, 5))
    found = objective_status_for_rules([rule.id])[rule.id]
    assert found.status == "at_risk"
    assert found.cause == "pool llm-provider full (1 of 1), 0 runs ahead"
    assert alerts(AT_RISK_ALERT) == 1


def test_a_rule_paused_with_a_reason_holds_its_objective_and_pages_at_no_deadline_of_the_pause():
    rule = report()
    rule_pause(rule=rule, actor="alice", now=SLOT - timedelta(minutes=5), reason="maintenance")
    for day in range(3):  # each day's 08:00 slot, before and after its 09:30 deadline
        objective_evaluate(now=sh(8, 0, 5) + timedelta(days=day))
        objective_evaluate(now=sh(9, 31) + timedelta(days=day))
    rows = SlotObjective.objects.filter(rule=rule).order_by("slot")
    assert [(r.status, r.closed) for r in rows] == [("excused", True)] * 3
    cause = cause_text(rows[0].cause)
    assert cause.startswith("rule paused by alice at ") and cause.endswith(": 'maintenance'")
    assert Alert.objects.filter(kind__startswith="objective_").count() == 0


def test_a_scheduler_outage_pages_once_for_the_outage_not_once_per_rule():
    rules = [report(f"report-{i}") for i in range(3)]
    scheduler_tick(now=SLOT - timedelta(minutes=1))  # the last tick before the outage: nothing is due yet
    for at in (sh(8, 1), sh(8, 30), sh(9, 31), sh(9, 45)):
        objective_evaluate(now=at)
        alert_check_scheduler(health=scheduler_health(now=at), now=at)
    assert Alert.objects.filter(channel=None, kind="scheduler_stalled").count() == 1
    assert Alert.objects.filter(kind__startswith="objective_").count() == 0
    for rule in rules:
        found = objective_status_for_rules([rule.id])[rule.id]
        assert found.status == "breached"
        assert found.cause.startswith("the scheduler has not ticked since ")
        assert found.cause.endswith("(paged once, as the scheduler-stalled alert)")
    # The scheduler comes back: the slots it missed are the outage's, no page for them follows.
    scheduler_tick(now=sh(9, 50))
    objective_evaluate(now=sh(9, 50, 5))
    objective_evaluate(now=sh(9, 51))
    assert Alert.objects.filter(kind__startswith="objective_").count() == 0


def test_a_slot_a_ticking_scheduler_has_not_taken_is_at_risk_after_a_minute_and_pages():
    rule = report()
    # The scheduler ticks (it is not stalled) but is behind: the slot is due and nobody took it.
    SchedulerTick.objects.update_or_create(name="scheduler", defaults={"last_tick_at": SLOT + timedelta(seconds=55)})
    objective_evaluate(now=SLOT + timedelta(seconds=59))
    assert row(rule).status == "on_track"
    objective_evaluate(now=SLOT + timedelta(seconds=60))
    found = objective_status_for_rules([rule.id])[rule.id]
    assert found.status == "at_risk" and "not yet taken by the scheduler" in found.cause
    assert alerts(AT_RISK_ALERT) == 1


def test_an_acknowledged_slot_alerts_no_more():
    rule = report(depends_on=[FLAG], ready_deadline=time(12, 0))
    scheduler_tick(now=sh(8, 0, 5))
    objective_evaluate(now=sh(9, 29))
    assert alerts(AT_RISK_ALERT) == 1
    assert objective_acknowledge(rows=SlotObjective.objects.filter(rule=rule), actor="bob", now=sh(9, 29, 10)) == 1
    objective_evaluate(now=sh(9, 31))
    assert row(rule).status == "breached" and alerts(BREACHED_ALERT) == 0
    assert row(rule).acknowledged_by == "bob"


def test_a_pass_runs_at_most_once_per_period():
    report()
    assert objective_sweep(now=sh(8, 0, 5)) is not None
    assert objective_sweep(now=sh(8, 0, 6)) is None
    assert objective_sweep(now=sh(8, 1)) is not None


def test_a_pass_costs_the_same_queries_for_one_rule_or_many():
    def measured() -> int:
        with CaptureQueriesContext(connection) as ctx:
            objective_evaluate(now=sh(8, 0, 10))
        return len(ctx)

    rule = report("r0", depends_on=[FLAG], ready_deadline=time(12, 0))
    report("r1")
    scheduler_tick(now=sh(8, 0, 5))  # r0 held (flag), r1 a pending run
    few = measured()
    for i in range(2, 8):
        report(f"r{i}", depends_on=[FLAG] if i % 2 else [], ready_deadline=time(12, 0))
    scheduler_tick(now=sh(8, 0, 5))
    many = measured()
    assert few == many <= OBJECTIVE_PASS_QUERIES, (few, many)
    assert SlotObjective.objects.count() == 8
    with CaptureQueriesContext(connection) as ctx:
        found = objective_status_for_rules(list(TriggerRule.objects.values_list("id", flat=True)))
    assert len(ctx) <= 2 and found[rule.id].status == "on_track"


def test_a_test_days_history_and_metrics_agree_with_the_runs_table():
    """An hourly rule due within 10 minutes of each slot; runs start 5 or 15 minutes late in turn."""
    day = datetime(2026, 12, 2, tzinfo=UTC)
    rule = make_rule(
        "hourly",
        due=day,
        kind="cron",
        cron="0 * * * *",
        dedupe_key_template="{rule}:{slot}",
        objective=TriggerRule.ObjectiveKind.OFFSET,
        objective_offset_seconds=600,
    )
    for hour in range(24):
        slot = day + timedelta(hours=hour)
        scheduler_tick(now=slot + timedelta(seconds=5))
        run = TaskRun.objects.get(rule=rule, slot=slot)
        execute(run, slot + timedelta(minutes=5 if hour % 3 else 15))
        objective_evaluate(now=slot + timedelta(minutes=20))

    runs = list(TaskRun.objects.filter(rule=rule, state="succeeded"))
    assert len(runs) == 24
    late = [(r.finish_at - r.slot - timedelta(minutes=10)).total_seconds() for r in runs]
    met, missed = sum(x <= 0 for x in late), sum(x > 0 for x in late)
    assert (met, missed) == (16, 8)

    # Every slot is closed: a pass reads no run of that day again.
    assert objective_evaluate(now=day + timedelta(hours=23, minutes=30)).slots == 0
    history = objective_history(rule, now=day + timedelta(hours=23, minutes=30))
    assert (history[-1].met, history[-1].missed) == (met, missed)
    assert sum(d.met for d in history[:-1]) == sum(d.missed for d in history[:-1]) == 0

    text = generate_latest(metrics_registry(clock=lambda: day + timedelta(days=1))).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    value = {
        (s.name, s.labels.get("le")): s.value
        for f in families.values()
        if f.name.startswith("harness_objective")
        for s in f.samples
        if s.labels.get("rule") == "hourly"
    }
    assert value[("harness_objective_met", None)] == met
    assert value[("harness_objective_breached", None)] == missed
    assert value[("harness_objective_at_risk", None)] == 0
    assert value[("harness_objective_lateness_seconds_count", None)] == 24
    assert value[("harness_objective_lateness_seconds_bucket", "0.0")] == met
    assert value[("harness_objective_lateness_seconds_sum", None)] == sum(x for x in late if x > 0)


def test_a_slot_that_never_ran_is_counted_apart_not_as_a_day_late():
    """One slot finishes 5 min late; the next never runs and is closed a day after its deadline."""
    rule = report(objective=TriggerRule.ObjectiveKind.OFFSET, objective_offset_seconds=600, objective_time=None)
    scheduler_tick(now=sh(8, 0, 5))
    execute(TaskRun.objects.get(rule=rule), sh(8, 15))
    objective_evaluate(now=sh(8, 16))
    # Switched off in the form (no reason given): its next slot is at risk, then breached, never run.
    TriggerRule.objects.filter(id=rule.id).update(enabled=False, paused_at=sh(8, 30), pause_reason="")
    for at in (sh(8, 0, 5) + timedelta(days=1), sh(8, 11) + timedelta(days=1), sh(8, 11) + timedelta(days=2)):
        objective_evaluate(now=at)
    never = row(rule, SLOT + timedelta(days=1))
    assert (never.status, never.closed, never.finished_at) == ("breached", True, None)

    text = generate_latest(metrics_registry(clock=lambda: sh(9, 0) + timedelta(days=2))).decode()
    value = {
        (s.name, s.labels.get("le")): s.value
        for f in text_string_to_metric_families(text)
        if f.name.startswith("harness_objective")
        for s in f.samples
        if s.labels.get("rule") == rule.name
    }
    # Breached: the late one, the one never run, and the next (open, still not run).
    assert value[("harness_objective_breached", None)] == 3
    assert value[("harness_objective_unfinished", None)] == 1
    assert value[("harness_objective_lateness_seconds_count", None)] == 1
    assert value[("harness_objective_lateness_seconds_sum", None)] == 300.0
    assert value[("harness_objective_lateness_seconds_bucket", "+Inf")] == 1


def test_on_call_acknowledges_in_the_admin_and_a_viewer_cannot():
    rule = report(depends_on=[FLAG], ready_deadline=time(12, 0))
    scheduler_tick(now=sh(8, 0, 5))
    objective_evaluate(now=sh(9, 29))
    slot_row = row(rule)
    url = "/admin/runs/slotobjective/"
    action = {"action": "acknowledge", "_selected_action": [slot_row.id]}

    viewer = client_for(make_user("vera", "Viewers"))
    assert viewer.get(url).status_code == 200
    viewer.post(url, action)
    assert row(rule).acknowledged_at is None

    oncall = client_for(make_user("olga", "On-call"))
    response = oncall.post(url, action, follow=True)
    assert "1 slot acknowledged." in response.content.decode()
    assert row(rule).acknowledged_by == "olga"


def test_a_wall_time_objective_falls_on_the_rules_next_business_day():
    """ "09:30 on the slot's business day" by the rule's own calendar: a Friday 20:00 slot is due by
    Monday 09:30 on a China calendar (Saturday and Sunday are not working days that week)."""
    cn = BusinessCalendar.objects.create(name="cn", country="CN")
    friday_evening = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)  # 20:00 in Shanghai
    rule = make_rule(
        "evening-report",
        due=friday_evening,
        kind=TriggerRule.Kind.CRON,
        cron="0 20 * * *",
        timezone=SH,
        objective=TriggerRule.ObjectiveKind.WALL,
        objective_time=time(9, 30),
        business_calendar=cn,
    )
    scheduler_tick(now=friday_evening + timedelta(seconds=5))
    objective_evaluate(now=friday_evening + timedelta(seconds=10))
    assert row(rule, friday_evening).deadline == datetime(2026, 12, 7, 1, 30, tzinfo=UTC)  # Monday 09:30 +08


def test_the_status_page_shows_each_rules_objective_with_its_cause():
    rule = report(objective=TriggerRule.ObjectiveKind.OFFSET, objective_offset_seconds=60, objective_time=None)
    report("in-time", objective=TriggerRule.ObjectiveKind.OFFSET, objective_offset_seconds=3600, objective_time=None)
    scheduler_tick(now=sh(8, 0, 5))
    objective_evaluate(now=sh(8, 0, 6))  # 6 s + 70 s expected > 60 s: at risk; the other on track
    page = client_for(make_user("root", superuser=True)).get("/admin/").content.decode()
    assert page.count('class="badge b-objective-at_risk"') == 1 and page.count('class="badge b-objective-ok"') == 1
    assert objective_status_for_rules([rule.id])[rule.id].cause in page
