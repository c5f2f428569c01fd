"""Downtime: slots missed while beat and workers were stopped follow the catch-up policy (invariant 3)."""

from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.engine.outages import slot_grace
from runs.models import Decision, TaskRun
from tasks.models import DiagnosticRecord, TriggerRule
from tasks.triggers.scheduler import scheduler_tick
from tests.e2e.helpers import RUN_TIMEOUT, START_TIMEOUT, freeze, recording_rule
from tests.support.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.one_pass("sqlite")]

# Interval rules, so that three slots pass in 45 s of real downtime: the catch-up policy does not
# care how a slot was computed (cron minutes, across zones and DST days, are tests/tasks/rules/test_catchup*.py).
PERIOD = timedelta(seconds=15)
DOWN_SLOTS = 3
# The scheduler's on-time grace for this test's processes and its own: shorter than the suite's 10 s,
# so that three periods of downtime are 45 s, not a minute.
GRACE_SECONDS = 5
# Restart beat this long after the last missed slot, so it is late beyond the grace and its first tick
# comes well before the next slot (9 s later), even on a loaded machine.
PAST_GRACE = timedelta(seconds=6)
# The seeded tick runs this long after its slot: on time (within the grace).
SEEDED_TICK_AFTER = timedelta(seconds=1)


def _slots(rule: TriggerRule) -> tuple[dict, dict]:
    runs = {r.slot: r for r in TaskRun.objects.filter(rule=rule)}
    decisions = {d.slot: d for d in Decision.objects.filter(rule=rule)}
    return runs, decisions


def test_missed_slots_are_caught_up_or_recorded_after_three_slots_down(harness, settings):
    settings.HARNESS = {**settings.HARNESS, "SLOT_GRACE_SECONDS": GRACE_SECONDS}
    assert SEEDED_TICK_AFTER < slot_grace() < PAST_GRACE < PERIOD
    grace_env = {"HARNESS_SLOT_GRACE_SECONDS": str(GRACE_SECONDS)}
    worker = harness.worker("w1", extra_env=grace_env)
    every = int(PERIOD.total_seconds())
    latest = recording_rule(
        "every-latest", kind="interval", interval_seconds=every, catchup="latest", catchup_max_delay_seconds=600
    )
    none = recording_rule("every-none", kind="interval", interval_seconds=every, catchup="none")
    # The last slot before the outage is seeded instead of waited for: the slot that began last is made
    # due and claimed on time by the scheduler's own tick, run here as beat would have run it then; the
    # real worker executes both runs. No beat is up yet, so no later slot is taken. The outage and the
    # restart below are real processes and real time.
    now = timezone.now()
    seeded = now - timedelta(seconds=now.timestamp() % every)  # interval slots are epoch-aligned
    TriggerRule.objects.filter(pk__in=[latest.pk, none.pk]).update(next_fire_at=seeded)
    scheduler_tick(now=seeded + SEEDED_TICK_AFTER)
    for rule in (latest, none):
        wait_for(
            lambda r=rule: TaskRun.objects.filter(rule=r, state="succeeded").exists(),
            timeout=START_TIMEOUT + RUN_TIMEOUT,
            what=f"the first minute run of {rule.name}",
        )
    worker.stop()
    stopped_at = timezone.now()
    first = {r.name: TaskRun.objects.get(rule=r).slot for r in (latest, none)}
    assert first["every-latest"] == first["every-none"]
    start_slot = first["every-latest"]
    assert start_slot == seeded
    last_missed = start_slot + DOWN_SLOTS * PERIOD

    # Staying down across three slots is the point of the test: this wait is the downtime. The worker
    # comes back first (a worker alone takes no slot). The first tick after the outage runs here, at the
    # restart instant past the grace, as the restarted beat's first tick would: a beat process's start-up
    # on a loaded machine (11 s seen in a full suite run) would otherwise decide whether that tick comes before the next
    # slot, 9 s later. Beat restarting and ticking is tests/e2e/test_restarts_e2e.py's.
    restart_at = last_missed + PAST_GRACE
    wait_for(lambda: timezone.now() >= last_missed, timeout=DOWN_SLOTS * every + 60, interval=1, what="3 slots down")
    harness.worker("w1-restarted", extra_env=grace_env)
    wait_for(lambda: timezone.now() >= restart_at, timeout=every + 60, interval=0.2, what="the restart instant")
    restarted_at = timezone.now()
    scheduler_tick(now=restarted_at)
    freeze(latest, none)  # no later slot: the accounting below ends at the last missed one
    wait_for(
        lambda: TaskRun.objects.filter(rule=latest, source="catchup", state="succeeded").exists(),
        timeout=RUN_TIMEOUT,
        what="the catch-up run",
    )
    wait_for(
        lambda: Decision.objects.filter(rule=none).count() >= DOWN_SLOTS, timeout=RUN_TIMEOUT, what="missed decisions"
    )
    wait_for(
        lambda: not TaskRun.objects.exclude(state__in=TaskRun.FINISHED).exists(),
        timeout=RUN_TIMEOUT,
        what="every run to finish",
    )

    missed = [start_slot + n * PERIOD for n in range(1, DOWN_SLOTS + 1)]
    late_runs, late_decisions = _slots(latest)
    none_runs, none_decisions = _slots(none)
    catchup_run = TaskRun.objects.get(rule=latest, source="catchup")
    print(
        f"\n[e2e catch-up] down {(restarted_at - stopped_at).total_seconds():.0f}s (slots {missed[0]:%H:%M:%S} to "
        f"{missed[-1]:%H:%M:%S}); latest: runs {sorted(f'{s:%H:%M:%S} {r.source}' for s, r in late_runs.items())}, "
        f"decisions {sorted(f'{s:%H:%M:%S} {d.reason}' for s, d in late_decisions.items())}; none: runs "
        f"{sorted(f'{s:%H:%M:%S} {r.source}' for s, r in none_runs.items())}, decisions "
        f"{sorted(f'{s:%H:%M:%S} {d.reason}' for s, d in none_decisions.items())}; catch-up run claimed "
        f"{(catchup_run.trigger_at - catchup_run.slot).total_seconds():.1f}s after its slot"
    )

    # latest: one catch-up run for the most recent missed slot, the older missed slots superseded.
    assert catchup_run.slot == missed[-1]
    assert {s: d.reason for s, d in late_decisions.items()} == {s: "superseded" for s in missed[:-1]}
    assert late_runs[start_slot].source == TaskRun.Source.SCHEDULER
    # none: every missed slot is a "missed" decision, and nothing is caught up.
    assert {s: d.reason for s, d in none_decisions.items()} == {s: "missed" for s in missed}
    assert not TaskRun.objects.filter(rule=none, source="catchup").exists()
    assert none_runs[start_slot].source == TaskRun.Source.SCHEDULER
    assert not set(none_runs) & set(missed)

    for rule, runs, decisions in ((latest, late_runs, late_decisions), (none, none_runs, none_decisions)):
        # Every slot between the first and the last handled one: exactly one run or one decision.
        assert not set(runs) & set(decisions), f"{rule.name}: a slot with both a run and a decision"
        handled = sorted([*runs, *decisions])
        expected = [handled[0] + n * PERIOD for n in range(int((handled[-1] - handled[0]) / PERIOD) + 1)]
        assert handled == expected, f"{rule.name}: slots not accounted for"
        assert all(r.state == TaskRun.State.SUCCEEDED for r in runs.values())
        records = Counter(DiagnosticRecord.objects.filter(rule_name=rule.name).values_list("biz_key", flat=True))
        assert records == Counter(r.biz_key for r in runs.values()), f"{rule.name}: one record per run, none twice"
