"""The scheduler tick: due rules → slots → exactly one run or decision per slot (invariants 1, 3, 4, 7).

Rules are created through the ORM; their save() reads the real clock, so each test pins
next_fire_at / last_slot_at with .update() and passes `now` explicitly.
"""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from runs.engine.outages import slot_grace
from runs.models import Decision, SchedulerTick, TaskRun
from tasks.models import TriggerRule
from tasks.rules import schedule
from tasks.triggers.scheduler import scheduler_tick
from tests.support.rules import make_rule
from tests.support.slots import due_slots, outcomes

ON_TIME_GRACE = slot_grace()  # HARNESS_SLOT_GRACE_SECONDS

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def due_rule(name: str = "every-minute", **fields) -> TriggerRule:
    """A rule (every minute in UTC unless `fields` say otherwise) whose first slot is due at T0."""
    return make_rule(name, **{"due": T0, **fields})


def tick_until_caught_up(now: datetime, **kwargs) -> int:
    for ticks in range(1, 100):
        scheduler_tick(now=now, **kwargs)
        if not TriggerRule.objects.filter(enabled=True, next_fire_at__lte=now).exists():
            return ticks
    raise AssertionError("the scheduler never caught up")


# --- on-time slots -------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_claims_each_due_slot_with_its_own_key_and_advances_the_rule():
    rule = due_rule("every-2s", interval_seconds=2)
    now = T0 + ON_TIME_GRACE - timedelta(seconds=1)
    slots = due_slots(rule, now)
    assert len(slots) > 1

    result = scheduler_tick(now=now)

    assert (result.rules, result.claimed, result.decisions, result.dedupe_hits) == (1, len(slots), 0, 0)
    runs = list(TaskRun.objects.filter(rule=rule).order_by("slot"))
    assert [r.slot for r in runs] == slots
    assert len({r.biz_key for r in runs}) == len(slots)
    assert {(r.source, r.triggered_by, r.trigger_at, r.state) for r in runs} == {
        (TaskRun.Source.SCHEDULER, "scheduler", now, TaskRun.State.PENDING)
    }
    rule.refresh_from_db()
    assert rule.last_slot_at == slots[-1]
    assert rule.next_fire_at == schedule.next_slot(rule.schedule_spec(), slots[-1])
    assert rule.next_fire_at > now
    tick = SchedulerTick.objects.get(name="scheduler")
    assert (tick.last_tick_at, tick.last_claimed) == (now, len(slots))


@pytest.mark.django_db
def test_a_second_tick_at_the_same_instant_claims_nothing():
    rule = due_rule("every-2s", interval_seconds=2)
    now = T0 + timedelta(seconds=5)
    first = scheduler_tick(now=now)
    assert first.claimed > 0

    again = scheduler_tick(now=now)
    assert (again.rules, again.claimed, again.decisions, again.dedupe_hits) == (0, 0, 0, 0)
    assert TaskRun.objects.filter(rule=rule).count() == first.claimed


@pytest.mark.django_db
def test_a_tick_that_reads_a_stale_rule_dedupes_instead_of_running_twice():
    rule = due_rule("every-2s", interval_seconds=2)
    now = T0 + timedelta(seconds=5)
    first = scheduler_tick(now=now)
    # A second beat that read the rule before the first advanced it sees the same slots again.
    TriggerRule.objects.filter(pk=rule.pk).update(next_fire_at=T0, last_slot_at=None)

    stale = scheduler_tick(now=now)
    assert (stale.claimed, stale.dedupe_hits) == (0, first.claimed)
    assert TaskRun.objects.filter(rule=rule).count() == first.claimed
    assert set(TaskRun.objects.filter(rule=rule).values_list("dedupe_hits", flat=True)) == {1}


@pytest.mark.django_db
def test_it_snapshots_the_rule_into_the_run_payload():
    rule = due_rule(params={"channel": "email"}, dedupe_key_template="{rule}:{slot}:{channel}", max_attempts=5)
    scheduler_tick(now=T0 + timedelta(seconds=1))
    run = TaskRun.objects.get(rule=rule)
    assert run.biz_key.endswith(":email")
    assert run.payload["params"] == {"channel": "email"}
    assert run.retry_policy() == rule.run_policy().retry
    assert run.retry_max_attempts == 5
    assert (run.payload["rule_version"], run.rule_version, run.rule_name) == (rule.version, rule.version, rule.name)


@pytest.mark.django_db
def test_it_ignores_a_disabled_rule():
    rule = due_rule()
    TriggerRule.objects.filter(pk=rule.pk).update(enabled=False)
    assert scheduler_tick(now=T0 + timedelta(hours=1)).rules == 0
    assert outcomes(rule) == {}


# --- catch-up ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_without_catch_up_late_slots_become_missed_decisions_and_the_on_time_slot_runs():
    rule = due_rule(catchup=TriggerRule.CatchUp.NONE)
    now = T0 + 10 * MINUTE + timedelta(seconds=3)
    slots = due_slots(rule, now)
    late, on_time = [s for s in slots if now - s > ON_TIME_GRACE], [s for s in slots if now - s <= ON_TIME_GRACE]
    assert late and len(on_time) == 1

    result = scheduler_tick(now=now)

    assert (result.claimed, result.decisions) == (1, len(late))
    assert outcomes(rule) == {on_time[0]: "run:scheduler", **{s: "decision:missed" for s in late}}
    for decision in Decision.objects.filter(rule=rule):
        assert decision.details["late_seconds"] == (now - decision.slot).total_seconds()
        assert decision.created_at == now


@pytest.mark.django_db
def test_catch_up_latest_runs_the_newest_late_slot_and_accounts_for_the_rest():
    max_delay = timedelta(minutes=5)
    rule = due_rule(catchup=TriggerRule.CatchUp.LATEST, catchup_max_delay_seconds=int(max_delay.total_seconds()))
    now = T0 + 10 * MINUTE + timedelta(seconds=30)  # even the newest slot is late
    slots = due_slots(rule, now)
    assert all(now - s > ON_TIME_GRACE for s in slots)

    scheduler_tick(now=now)

    expected = {slots[-1]: "run:catchup"}
    expected.update({s: "decision:superseded" for s in slots[:-1] if now - s <= max_delay})
    expected.update({s: "decision:missed" for s in slots[:-1] if now - s > max_delay})
    assert outcomes(rule) == expected
    assert "decision:superseded" in expected.values() and "decision:missed" in expected.values()
    assert TaskRun.objects.get(rule=rule).biz_key == f"rule/{rule.pk}/slot/{rule.name}:{slots[-1].isoformat()}"


@pytest.mark.django_db
@pytest.mark.parametrize("catchup", ["none", "latest"])
@pytest.mark.parametrize("interval", [60, 7, 3600])
@pytest.mark.parametrize("gap", [timedelta(seconds=5), timedelta(minutes=4), timedelta(hours=5, seconds=17)])
def test_every_slot_ends_in_exactly_one_run_or_decision(catchup, interval, gap):
    rule = due_rule(catchup=catchup, interval_seconds=interval, due=T0)
    now = T0 + gap
    slots = due_slots(rule, now)

    # A long gap of a short interval exceeds MAX_SLOTS_PER_TICK: later ticks finish it.
    results = [scheduler_tick(now=now)]
    while TriggerRule.objects.filter(pk=rule.pk, next_fire_at__lte=now).exists():
        results.append(scheduler_tick(now=now))
        assert len(results) < 20

    accounted = outcomes(rule)
    assert sorted(accounted) == slots
    assert sum(r.claimed + r.decisions for r in results) == len(slots)
    late_runs = [s for s, v in accounted.items() if v.startswith("run:") and now - s > ON_TIME_GRACE]
    assert len(late_runs) <= (1 if catchup == "latest" else 0)
    assert all(accounted[s] == "run:scheduler" for s in slots if now - s <= ON_TIME_GRACE)


@pytest.mark.django_db
@pytest.mark.parametrize("catchup", ["none", "latest"])
def test_a_bounded_tick_leaves_the_rest_for_the_next_tick(catchup):
    rule = due_rule(catchup=catchup, catchup_max_delay_seconds=300)
    now = T0 + 10 * MINUTE + timedelta(seconds=30)
    slots = due_slots(rule, now)
    bound = 4
    assert len(slots) > 2 * bound

    scheduler_tick(now=now, max_slots=bound)
    assert sorted(outcomes(rule)) == slots[:bound]
    rule.refresh_from_db()
    assert rule.next_fire_at == slots[bound]

    ticks = tick_until_caught_up(now, max_slots=bound)
    accounted = outcomes(rule)
    assert sorted(accounted) == slots
    assert ticks == -(-(len(slots) - bound) // bound)
    # The bound must not change the policy's answer: only the newest slot may be caught up.
    runs = [s for s, v in accounted.items() if v.startswith("run:")]
    assert runs == ([slots[-1]] if catchup == "latest" else [])


@pytest.mark.django_db
@pytest.mark.parametrize("bound", [4, 3, 1])
def test_a_bounded_tick_keeps_the_catch_up_all_cap_for_the_whole_outage(bound):
    # The cap counts the whole outage, not each tick's batch: the 3 newest slots run, however the
    # bound cuts the outage into batches.
    rule = due_rule(catchup="all", catchup_max_count=3, catchup_max_delay_seconds=3600)
    now = T0 + 9 * MINUTE + timedelta(seconds=30)
    slots = due_slots(rule, now)
    assert len(slots) == 10

    tick_until_caught_up(now, max_slots=bound)

    accounted = outcomes(rule)
    assert sorted(accounted) == slots
    assert [s for s in slots if accounted[s] == "run:catchup"] == slots[-3:]
    assert {accounted[s] for s in slots[:-3]} == {"decision:catchup_capped"}


@pytest.mark.django_db(transaction=True)
def test_concurrent_ticks_never_duplicate_a_run_and_account_for_every_slot():
    rules = [due_rule(f"rule-{i}", interval_seconds=60 + 13 * i, catchup=["none", "latest"][i % 2]) for i in range(6)]
    now = T0 + 17 * MINUTE + timedelta(seconds=4)
    owed = {rule.pk: due_slots(rule, now) for rule in rules}
    tickers = 4
    barrier = threading.Barrier(tickers)
    results, errors = [], []

    def body() -> None:
        try:
            connection.ensure_connection()
            barrier.wait(timeout=30)
            results.append(scheduler_tick(now=now))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=body) for _ in range(tickers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors

    for rule in rules:
        assert sorted(outcomes(rule)) == owed[rule.pk], rule.name
    assert sum(r.claimed for r in results) == TaskRun.objects.count()
    assert sum(r.decisions for r in results) == Decision.objects.count()
    assert TaskRun.objects.values("biz_key").distinct().count() == TaskRun.objects.count()
    assert not TriggerRule.objects.filter(next_fire_at__lte=now).exists()


# --- rules that cannot be evaluated --------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("template", ["{rule}:{nope}", "{rule.nope}", "{slot[99]}"])
def test_a_key_template_that_fails_to_render_becomes_an_invalid_rule_decision(template):
    # Created without full_clean(), as a shell, fixture or migration could.
    broken = due_rule("broken", dedupe_key_template=template, clean=False)
    healthy = due_rule("healthy")
    now = T0 + timedelta(seconds=1)

    result = scheduler_tick(now=now)

    assert outcomes(broken) == {T0: "decision:invalid_rule"}
    assert Decision.objects.get(rule=broken).details["error"]
    assert outcomes(healthy) == {T0: "run:scheduler"}  # one bad rule does not hold up the others
    assert (result.claimed, result.decisions) == (1, 1)
    broken.refresh_from_db()
    assert broken.next_fire_at > now


# --- one-time and zoned rules -------------------------------------------------------------


@pytest.mark.django_db
def test_a_one_time_rule_fires_once_and_then_has_no_next_fire():
    rule = due_rule("once", kind=TriggerRule.Kind.ONCE, run_at=T0)

    assert scheduler_tick(now=T0 + timedelta(seconds=1)).claimed == 1
    rule.refresh_from_db()
    assert rule.next_fire_at is None
    assert scheduler_tick(now=T0 + timedelta(days=30)).rules == 0
    assert outcomes(rule) == {T0: "run:scheduler"}


@pytest.mark.django_db
def test_saving_a_one_time_rule_in_the_future_schedules_it_at_run_at():
    from django.utils import timezone

    run_at = (timezone.now() + timedelta(days=2)).replace(microsecond=0)
    rule = make_rule("later", kind="once", run_at=run_at, timezone="Europe/Berlin")
    assert rule.next_fire_at == run_at


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("hour", "slot_utc", "business_date"),
    [
        (9, datetime(2026, 3, 2, 1, 0, tzinfo=UTC), "2026-03-02"),
        # 07:00 in Shanghai is 23:00 UTC the day before: the business date is Shanghai's.
        (7, datetime(2026, 3, 1, 23, 0, tzinfo=UTC), "2026-03-02"),
    ],
)
def test_a_shanghai_cron_slot_is_stored_in_utc_and_keyed_on_local_time(hour, slot_utc, business_date):
    rule = make_rule(
        f"shanghai-{hour}",
        kind="cron",
        cron=f"0 {hour} * * *",
        timezone="Asia/Shanghai",
        dedupe_key_template="{rule}:{business_date}:{slot}",
    )
    # save() computed next_fire_at from the real clock, in the rule's zone, stored in UTC.
    assert rule.next_fire_at.utcoffset() == timedelta(0)
    assert (rule.next_fire_at.hour, rule.next_fire_at.minute) == ((hour - 8) % 24, 0)

    TriggerRule.objects.filter(pk=rule.pk).update(next_fire_at=slot_utc)
    scheduler_tick(now=slot_utc + timedelta(seconds=5))

    run = TaskRun.objects.get(rule=rule)
    assert run.slot == slot_utc
    assert f"T{hour:02d}:00:00+08:00" in run.biz_key
    assert run.biz_key == f"rule/{run.rule_id}/slot/{rule.name}:{business_date}:{business_date}T{hour:02d}:00:00+08:00"
    assert run.payload["slot_local"] == f"{business_date}T{hour:02d}:00:00+08:00"
    rule.refresh_from_db()
    assert rule.next_fire_at == slot_utc + timedelta(days=1)


@pytest.mark.django_db
def test_the_default_slot_grace_rides_out_a_database_restart_or_a_beat_failover(settings):
    """With the default grace (HARNESS_SLOT_GRACE_SECONDS unset: 60 s), a 45 s outage loses no slot
    even under catch-up none: every slot of the outage still runs."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "HARNESS_SLOT_GRACE_SECONDS"}
    probe = (
        "from django.conf import settings; import django; django.setup(); print(settings.HARNESS['SLOT_GRACE_SECONDS'])"
    )
    default = subprocess.run(
        [sys.executable, "-c", probe],
        env={**env, "DJANGO_SETTINGS_MODULE": "harness_site.settings", "SECRET_KEY": os.environ["SECRET_KEY"]},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert default == "60"
    settings.HARNESS = {**settings.HARNESS, "SLOT_GRACE_SECONDS": 60}
    rule = due_rule("grace", kind="interval", interval_seconds=15, catchup="none")
    TriggerRule.objects.filter(pk=rule.pk).update(next_fire_at=T0)
    scheduler_tick(now=T0 + timedelta(seconds=45))  # down from T0 to T0+45s: slots T0, +15, +30, +45
    assert TaskRun.objects.filter(rule=rule).count() == 4
    assert not Decision.objects.filter(rule=rule).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("late", [timedelta(0), 3 * MINUTE])
def test_a_pause_before_the_tick_reached_a_due_slot_records_it_as_paused(late):
    """Invariant 3 across a pause: a slot already due when the operator pauses (at its very instant,
    or later while the scheduler was down) and not yet claimed ends in a "paused" decision, as do
    the slots skipped while paused; none is left with neither a run nor a decision."""
    from tasks.triggers.operator import rule_pause, rule_resume

    rule = due_rule()
    paused = T0 + late
    owed = due_slots(rule, paused)
    rule_pause(rule=rule, actor=None, now=paused, reason="maintenance")
    resumed = paused + 10 * MINUTE
    rule_resume(rule=TriggerRule.objects.get(pk=rule.pk), actor=None, now=resumed, reason="done")
    tick_until_caught_up(resumed)

    seen = outcomes(rule)
    assert all(seen.get(slot) == "decision:paused" for slot in owed), {s: seen.get(s) for s in owed}
    every = [T0, *schedule.slots_between(rule.schedule_spec(), T0, resumed)]
    assert [slot for slot in every if slot not in seen] == []
