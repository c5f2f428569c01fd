"""The plan of a rule change stands on real history: rules run through real beat ticks and real
worker processes (a readiness flag that comes late, a pause, an outage of beat with catch-up);
then a plan of "no change" replays the past exactly as it was recorded, slot for slot, and a plan
of a narrowed window marks exactly the slots the new window excludes."""

from datetime import UTC, time, timedelta

import pytest
from django.utils import timezone

from runs.models import Decision, SlotHold, TaskRun
from tasks.flags import flag_set
from tasks.models import TriggerRule
from tasks.rules import plan as planned
from tasks.triggers.operator import rule_pause, rule_resume
from tasks.triggers.plan import rule_plan
from tasks.triggers.scheduler import scheduler_tick
from tests.e2e.helpers import RUN_TIMEOUT, START_TIMEOUT, freeze, recording_rule, wait_ticking
from tests.support.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.one_pass("postgresql")]

PERIOD = 4  # seconds between slots: short, so the whole story takes well under a minute
GRACE_SECONDS = 2
FLAG = "e2e.plan.ready"


def _sleep_until(instant, what: str) -> None:
    wait_for(lambda: timezone.now() >= instant, timeout=120, interval=0.2, what=what)


def _edited(rule: TriggerRule, **changes) -> TriggerRule:
    edited = TriggerRule.objects.get(pk=rule.pk)
    for name, value in changes.items():
        setattr(edited, name, value)
    edited.full_clean()
    return edited


def test_a_plan_of_no_change_replays_real_history_and_a_narrowed_window_marks_its_slots(harness, settings):
    settings.HARNESS = {**settings.HARNESS, "SLOT_GRACE_SECONDS": GRACE_SECONDS}
    env = {"HARNESS_SLOT_GRACE_SECONDS": str(GRACE_SECONDS)}
    deadline = (timezone.now() + timedelta(hours=6)).astimezone(UTC).time().replace(microsecond=0)
    paced = recording_rule(
        "plan-paced", kind="interval", interval_seconds=PERIOD, catchup="latest", catchup_max_delay_seconds=600
    )
    waits = recording_rule(
        "plan-waits",
        kind="interval",
        interval_seconds=PERIOD,
        depends_on=[FLAG],
        not_ready_policy="wait",
        ready_recheck_seconds=1,
        ready_deadline=deadline,
    )
    harness.worker("w1", extra_env=env)
    beat = harness.beat("beat1", extra_env=env)
    wait_ticking(timeout=START_TIMEOUT)

    # The flag comes late: the first slots of `waits` are held until it is set.
    wait_for(lambda: SlotHold.objects.filter(rule=waits).exists(), timeout=START_TIMEOUT, what="a held slot")
    _sleep_until(timezone.now() + timedelta(seconds=PERIOD + 1), "the flag to be late")
    now = timezone.now()
    flag_set(name=FLAG, scope=now.astimezone(UTC).date().isoformat(), actor="pipeline", now=now)

    # A pause of two slots.
    rule_pause(rule=paced, actor="ops", now=timezone.now(), reason="maintenance")
    _sleep_until(timezone.now() + timedelta(seconds=2 * PERIOD + 1), "two slots paused")
    rule_resume(rule=paced, actor="ops", now=timezone.now(), reason="done")

    # An outage: no beat, so no tick, for three slots. The first tick after it runs here, late past the
    # grace of the last missed slot and before the next one, as the restarted beat's first tick would:
    # a beat's start-up on a loaded machine would otherwise decide whether it comes before that slot.
    beat.stop()
    _sleep_until(timezone.now() + timedelta(seconds=3 * PERIOD), "three slots down")
    now = timezone.now()
    last_slot = now - timedelta(seconds=now.timestamp() % PERIOD)  # interval slots are epoch-aligned
    restart = last_slot + timedelta(seconds=GRACE_SECONDS + 0.5)
    if restart <= now:
        restart += timedelta(seconds=PERIOD)
    _sleep_until(restart, "the restart instant")
    scheduler_tick(now=restart)
    harness.beat("beat2", extra_env=env)
    wait_for(
        lambda: TaskRun.objects.filter(rule=paced, source="catchup").exists(),
        timeout=START_TIMEOUT,
        what="the catch-up run after the outage",
    )
    _sleep_until(timezone.now() + timedelta(seconds=2 * PERIOD), "two slots on time again")
    freeze(paced, waits)
    wait_for(
        lambda: not TaskRun.objects.exclude(state__in=TaskRun.FINISHED).exists() and not SlotHold.objects.exists(),
        timeout=RUN_TIMEOUT,
        what="every run to finish",
    )

    recorded = {r.reason for r in Decision.objects.filter(rule__in=[paced, waits])}
    assert {"paused", "superseded"} <= recorded, recorded
    late = TaskRun.objects.filter(rule=waits).order_by("slot").first()
    assert (late.trigger_at - late.slot).total_seconds() > PERIOD  # ran when the flag came, not on time

    for rule in (paced, waits):
        rule.refresh_from_db()
        # The plan is made as of the last slot handled: later slots of a frozen rule have no record.
        handled = [*TaskRun.objects.filter(rule=rule).values_list("slot", flat=True)]
        handled += Decision.objects.filter(rule=rule).values_list("slot", flat=True)
        at = max(handled)
        plan = rule_plan(rule, _edited(rule), now=at, days=1)
        rows = [r for r in plan.past if r.recorded is not None]
        print(
            f"\n[e2e plan] {rule.name}: {len(rows)} recorded slots, outcomes "
            f"{sorted({r.recorded.outcome for r in rows})}, differing {len(plan.past_differences)}"
        )
        assert len(rows) == len(handled)
        assert [(r.slot, r.new, r.current) for r in plan.past if r.differs] == []

    # A narrowed window: business hours end halfway through the history (UTC wall clock).
    runs = dict(TaskRun.objects.filter(rule=paced).values_list("slot", "source"))
    decisions = dict(Decision.objects.filter(rule=paced).values_list("slot", "reason"))
    slots = sorted([*runs, *decisions])
    if slots[0].date() != slots[-1].date():
        pytest.skip("the history crosses midnight UTC: a window of one day cannot split it")
    middle = slots[len(slots) // 2]
    edited = _edited(paced, hours_start=time(0, 0), hours_end=middle.time(), outside_hours="skip")
    plan = rule_plan(paced, edited, now=max(slots), days=1)
    excluded = {s for s in runs if s.time() >= middle.time()}
    assert excluded
    assert {r.slot for r in plan.past if r.differs} == excluded
    assert {r.new for r in plan.past if r.differs} == {"outside_window"}
    assert all(r.new == planned.PAUSED for r in plan.past if r.current == "paused")
