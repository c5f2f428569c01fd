"""Guards through the real tick and services: windows, calendar, overlap, heartbeat, snapshot, identity,
decision retention and /healthz. The clock is passed in as `now=`."""

from datetime import UTC, datetime, time, timedelta

import pytest
from django.core.exceptions import ValidationError

from deadletters.models import DeadLetter
from runs.desk.selectors import scheduler_health
from runs.engine.executor import run_execute
from runs.engine.retention import decision_sweep
from runs.models import Decision, SlotHold, TaskRun
from tasks.models import ServiceIdentity, TriggerRule
from tasks.triggers.heartbeat import rule_ping
from tasks.triggers.operator import rule_fire, rule_save
from tasks.triggers.scheduler import scheduler_tick
from tests.support.rules import build_rule, make_rule

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)  # Tuesday 08:00 Berlin


def berlin_rule(name: str = "r", **over) -> TriggerRule:
    """Every minute in Berlin, its first slot due at T0."""
    return make_rule(name, **{"timezone": "Europe/Berlin", "due": T0, **over})


# --- windows and calendar --------------------------------------------------------------------------


def test_a_slot_before_business_hours_is_deferred_to_the_opening():
    rule = berlin_rule(hours_start=time(9, 0), hours_end=time(17, 0), outside_hours="defer")
    scheduler_tick(now=T0)
    run = TaskRun.objects.get(rule=rule)
    assert run.run_after == T0 + timedelta(hours=1)  # 09:00 Berlin
    assert run.dispatched_at is None  # the sweeper sends it at 09:00


def test_outside_hours_skip_and_excluded_dates_record_decisions():
    skip = berlin_rule("skip", hours_start=time(9, 0), hours_end=time(17, 0), outside_hours="skip")
    holiday = berlin_rule("holiday", excluded_dates=["2026-12-01"])
    weekend = berlin_rule("weekend", weekdays="sat-sun")
    scheduler_tick(now=T0)
    assert Decision.objects.get(rule=skip).reason == Decision.Reason.OUTSIDE_WINDOW
    assert Decision.objects.get(rule=holiday).reason == Decision.Reason.CALENDAR
    assert Decision.objects.get(rule=weekend).details["weekday"] == "tue"
    assert not TaskRun.objects.exists()


def test_a_late_catch_up_slot_beyond_the_start_window_is_outside_the_window():
    rule = berlin_rule(catchup="latest", catchup_max_delay_seconds=7200, start_window_seconds=20)
    scheduler_tick(now=T0 + timedelta(minutes=5, seconds=30))
    decisions = dict(Decision.objects.filter(rule=rule).values_list("slot", "reason"))
    assert decisions[T0 + timedelta(minutes=5)] == Decision.Reason.OUTSIDE_WINDOW
    assert not TaskRun.objects.filter(rule=rule).exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("weekdays", "mon-funday", "mon-fri"),
        ("excluded_dates", ["2026-02-30"], "YYYY-MM-DD"),
        ("hours_start", time(9, 0), "both"),
        ("depends_on", "not-a-list", "JSON list"),
        ("snapshot_fields", ["nope"], "not a param"),
        ("object_key_template", "{nope}", "Unknown placeholder"),
    ],
)
def test_bad_guard_settings_are_refused_with_a_message_on_the_field(field, value, message):
    rule = build_rule("bad", **{field: value})
    with pytest.raises(ValidationError) as exc:
        rule.full_clean()
    errors = exc.value.message_dict
    key = "hours_end" if field == "hours_start" else field
    assert any(message in m for m in errors[key]), errors


# --- overlap ------------------------------------------------------------------------------------


def test_overlap_skip_records_a_decision_while_a_run_is_active():
    rule = berlin_rule(overlap="skip")
    scheduler_tick(now=T0)  # run for T0, pending (no worker here)
    scheduler_tick(now=T0 + timedelta(minutes=1))
    scheduler_tick(now=T0 + timedelta(minutes=2))
    assert TaskRun.objects.filter(rule=rule).count() == 1
    overlap = Decision.objects.filter(rule=rule, reason=Decision.Reason.OVERLAP)
    assert overlap.count() == 2
    TaskRun.objects.filter(rule=rule).update(state=TaskRun.State.SUCCEEDED)
    scheduler_tick(now=T0 + timedelta(minutes=3))
    assert TaskRun.objects.filter(rule=rule).count() == 2


def test_overlap_buffer_runs_one_slot_after_the_active_run_ends():
    rule = berlin_rule(overlap="buffer")
    scheduler_tick(now=T0)
    scheduler_tick(now=T0 + timedelta(minutes=1))  # buffered
    scheduler_tick(now=T0 + timedelta(minutes=2))  # buffer full: decision
    assert SlotHold.objects.get(rule=rule).slot == T0 + timedelta(minutes=1)
    assert Decision.objects.get(rule=rule).slot == T0 + timedelta(minutes=2)
    TaskRun.objects.filter(rule=rule).update(state=TaskRun.State.SUCCEEDED)
    scheduler_tick(now=T0 + timedelta(minutes=2, seconds=5))
    assert TaskRun.objects.filter(rule=rule, slot=T0 + timedelta(minutes=1)).count() == 1
    assert not SlotHold.objects.exists()


# --- snapshot and identity ----------------------------------------------------------------------


def test_a_run_copies_the_declared_snapshot_fields_at_trigger_time():
    rule = berlin_rule(
        params={"threshold": 0.8, "policy_version": "v3", "other": 1}, snapshot_fields=["threshold", "policy_version"]
    )
    scheduler_tick(now=T0)
    rule.params = {"threshold": 0.1, "policy_version": "v4", "other": 1}
    rule.save()
    run = TaskRun.objects.get(rule=rule)
    assert run.payload["snapshot"] == {"threshold": 0.8, "policy_version": "v3"}
    assert run.rule_version == 1
    assert TriggerRule.objects.get(pk=rule.pk).version == 2


def test_a_rule_whose_identity_may_not_run_its_skill_is_refused_at_save():
    ident = ServiceIdentity.objects.create(name="reporting", allowed_skills=["harness.record"])
    rule = build_rule("x", identity=ident)
    with pytest.raises(ValidationError) as exc:
        rule.full_clean()
    assert "may not run 'harness.noop'" in exc.value.message_dict["identity"][0]


@pytest.mark.django_db(transaction=True)
def test_a_run_is_refused_at_run_time_when_its_identity_lost_the_skill():
    ident = ServiceIdentity.objects.create(name="reporting", allowed_skills=["harness.noop"])
    rule = berlin_rule(identity=ident)
    claim = rule_fire(rule=rule, actor="alice", now=T0)
    run = claim.run
    assert (run.identity, run.triggered_by, run.source) == ("reporting", "alice", TaskRun.Source.MANUAL)
    ServiceIdentity.objects.filter(pk=ident.pk).update(allowed_skills=["harness.record"])

    outcome = run_execute(run_id=run.id, worker="w-test", clock=lambda: T0 + timedelta(seconds=1))
    assert outcome.status == "failed"
    run.refresh_from_db()
    assert (run.state, run.last_error_kind, run.attempts) == (TaskRun.State.FAILED, "permission_denied", 1)
    assert "may not run skill 'harness.noop'" in run.last_error
    assert DeadLetter.objects.filter(run=run).count() == 1


# --- heartbeat ----------------------------------------------------------------------------------


def test_a_heartbeat_rule_fires_only_when_no_ping_arrives_within_period_and_grace():
    rule = make_rule(
        "hb", kind="heartbeat", timezone="Europe/Berlin", heartbeat_every_seconds=300, heartbeat_grace_seconds=60
    )
    rule_ping(rule=rule, now=T0)
    assert TriggerRule.objects.get(pk=rule.pk).next_fire_at == T0 + timedelta(seconds=360)
    scheduler_tick(now=T0 + timedelta(seconds=300))
    rule_ping(rule=rule, now=T0 + timedelta(seconds=300))  # on time: pushed again
    scheduler_tick(now=T0 + timedelta(seconds=500))
    assert not TaskRun.objects.filter(rule=rule).exists()

    silent_until = T0 + timedelta(seconds=660)
    scheduler_tick(now=silent_until)
    run = TaskRun.objects.get(rule=rule)
    assert (run.slot, run.source) == (silent_until, TaskRun.Source.HEARTBEAT)
    # While the silence lasts it fires again each period, never once per missed tick.
    scheduler_tick(now=silent_until + timedelta(seconds=10))
    assert TaskRun.objects.filter(rule=rule).count() == 1
    scheduler_tick(now=silent_until + timedelta(seconds=300))
    assert TaskRun.objects.filter(rule=rule).count() == 2


def test_pinging_a_non_heartbeat_rule_is_refused():
    rule = berlin_rule()
    with pytest.raises(ValueError, match="not a heartbeat rule"):
        rule_ping(rule=rule, now=T0)


# --- retention and health ----------------------------------------------------------------------


def test_decisions_older_than_the_retention_are_swept(settings):
    rule = berlin_rule()
    for days in (1, 10, 40):
        Decision.objects.create(
            rule=rule,
            slot=T0 - timedelta(days=days),
            reason=Decision.Reason.MISSED,
            created_at=T0 - timedelta(days=days),
        )
    assert decision_sweep(now=T0, days=30) == 1
    assert decision_sweep(now=T0, days=30) == 0
    settings.HARNESS = {**settings.HARNESS, "DECISION_RETENTION_DAYS": 5}
    assert decision_sweep(now=T0) == 1
    assert list(Decision.objects.values_list("slot", flat=True)) == [T0 - timedelta(days=1)]


def test_healthz_reports_the_oldest_due_unclaimed_slot(admin_client):
    berlin_rule("late", due=T0)
    health = scheduler_health(now=T0 + timedelta(minutes=3))
    assert health["oldest_unclaimed_slot_age_seconds"] == 180
    assert health["oldest_unclaimed_slot_rule"] == "late"
    scheduler_tick(now=T0 + timedelta(minutes=3))
    after = scheduler_health(now=T0 + timedelta(minutes=3))
    assert after["oldest_unclaimed_slot_age_seconds"] is None
    assert after["last_tick_age_seconds"] == 0
    response = admin_client.get("/healthz")  # the details: a staff session
    assert "oldest_unclaimed_slot_age_seconds" in response.json()


def test_a_rule_with_unusable_stored_guards_gets_an_invalid_rule_decision_and_the_tick_goes_on():
    broken = berlin_rule("broken")
    healthy = berlin_rule("healthy")
    # Saved around full_clean, as a shell or a fixture could.
    TriggerRule.objects.filter(pk=broken.pk).update(weekdays="funday")
    scheduler_tick(now=T0)
    assert Decision.objects.get(rule=broken).reason == Decision.Reason.INVALID_RULE
    assert TaskRun.objects.filter(rule=healthy).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_scheduled_run_that_cannot_start_within_its_window_is_cancelled_by_the_executor():
    late = berlin_rule("late", start_window_seconds=60)
    in_time = berlin_rule("in-time", start_window_seconds=60)
    scheduler_tick(now=T0)
    late_run = TaskRun.objects.get(rule=late)
    assert late_run.start_by == T0 + timedelta(seconds=60)

    outcome = run_execute(run_id=late_run.id, worker="w", clock=lambda: T0 + timedelta(seconds=61))
    assert outcome.status == "start_window_passed"
    late_run.refresh_from_db()
    assert (late_run.state, late_run.attempts, late_run.last_error_kind) == ("cancelled", 0, "start_window")

    ok = TaskRun.objects.get(rule=in_time)
    assert run_execute(run_id=ok.id, worker="w", clock=lambda: T0 + timedelta(seconds=60)).status == "succeeded"


def test_saving_a_rule_writes_no_decision_itself():
    """The model decides nothing with side effects: a bare save() keeps derived fields only."""
    rule = make_rule("bare-save", timezone="Europe/Berlin")
    rule.enabled = False
    rule.save(now=T0)
    rule.refresh_from_db()
    rule.enabled = True
    rule.save(now=T0 + timedelta(minutes=5))
    rule.refresh_from_db()
    assert rule.paused_at is None and rule.enabled
    assert not Decision.objects.filter(rule=rule).exists()


def test_resuming_a_paused_rule_records_a_paused_decision_for_each_skipped_slot():
    from tasks.rules import schedule

    rule = make_rule("pausable", timezone="Europe/Berlin")
    rule.enabled = False
    rule_save(rule, now=T0)
    assert TriggerRule.objects.get(pk=rule.pk).paused_at == T0
    resumed = T0 + timedelta(minutes=5)
    rule.refresh_from_db()
    rule.enabled = True
    rule_save(rule, now=resumed)

    decisions = list(Decision.objects.filter(rule=rule).order_by("slot"))
    assert [d.slot for d in decisions] == schedule.slots_between(rule.schedule_spec(), T0, resumed)
    assert len(decisions) >= 4
    assert {d.reason for d in decisions} == {Decision.Reason.PAUSED}
    assert {d.created_at for d in decisions} == {resumed}
    assert TriggerRule.objects.get(pk=rule.pk).paused_at is None
    from tasks.triggers.explain import slot_explain

    answer = slot_explain(rule=rule, slot=decisions[0].slot, now=resumed)
    assert (answer["outcome"], answer["reason"]) == ("decision", "paused")
    assert answer["summary"] == "did not run: Rule was paused"
    assert TriggerRule.objects.get(pk=rule.pk).next_fire_at > resumed
