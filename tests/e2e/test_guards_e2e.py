"""Rule guards with real beat and worker processes: overlap skip with a slow skill, and a readiness
wait that re-checks every 2 seconds until a flag is set from the command line."""

from itertools import combinations

import pytest
from django.utils import timezone

from runs.models import Attempt, Decision, SlotHold, TaskRun
from tests.e2e.helpers import RUN_TIMEOUT, recording_rule, wait_ticking
from tests.support.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.one_pass("sqlite")]


def test_overlap_skip_with_a_slow_skill_records_skip_decisions(harness):
    harness.worker(concurrency=2)
    harness.beat()
    wait_ticking()
    rule = recording_rule(
        "slow-overlap",
        kind="interval",
        interval_seconds=1,
        skill="harness.sleep",
        params={"seconds": 2.5},
        overlap="skip",
    )

    def enough():
        done = TaskRun.objects.filter(rule=rule, state="succeeded").count()
        skipped = Decision.objects.filter(rule=rule, reason=Decision.Reason.OVERLAP).count()
        return done >= 2 and skipped >= 3

    wait_for(enough, timeout=RUN_TIMEOUT, what="2 finished runs and 3 overlap decisions")
    rule.enabled = False
    rule.save()

    attempts = list(Attempt.objects.filter(run__rule=rule, finished_at__isnull=False))
    overlaps = [
        (a.run_id, b.run_id)
        for a, b in combinations(attempts, 2)
        if a.started_at < b.finished_at and b.started_at < a.finished_at
    ]
    assert not overlaps, overlaps
    decisions = Decision.objects.filter(rule=rule)
    assert set(decisions.values_list("reason", flat=True)) <= {Decision.Reason.OVERLAP, Decision.Reason.MISSED}
    run_slots = set(TaskRun.objects.filter(rule=rule).values_list("slot", flat=True))
    assert not run_slots & set(decisions.values_list("slot", flat=True)), "a slot is a run or a decision, not both"
    out = harness.manage("harness", "explain", rule.name, decisions.filter(reason="overlap").first().slot.isoformat())
    assert out.returncode == 0, out.stderr
    assert "A run of this rule was still active" in out.stdout


def test_a_waiting_slot_runs_at_the_first_recheck_after_the_flag_is_set(harness):
    harness.worker(concurrency=2)
    harness.beat()
    wait_ticking()
    today = timezone.now().date().isoformat()
    rule = recording_rule(
        "needs-data",
        kind="interval",
        interval_seconds=3600 * 24,
        skill="harness.noop",
        depends_on=["e2e.data.ready"],
        ready_recheck_seconds=2,
        ready_deadline=timezone.now().replace(hour=23, minute=59, second=59).time(),
    )
    # Daily epoch-aligned slots are at 00:00 UTC; make the next one due now.
    first = timezone.now().replace(microsecond=0)
    type(rule).objects.filter(pk=rule.pk).update(next_fire_at=first)

    hold = wait_for(lambda: SlotHold.objects.filter(rule=rule).first(), timeout=RUN_TIMEOUT, what="a held slot")
    wait_for(
        lambda: SlotHold.objects.filter(pk=hold.pk, checks__gte=2).exists(),
        timeout=RUN_TIMEOUT,
        what="two re-checks of the held slot",
    )
    assert not TaskRun.objects.filter(rule=rule).exists()

    set_at = timezone.now()
    out = harness.manage("harness", "flags", "set", "e2e.data.ready", today)
    assert out.returncode == 0, out.stderr
    run = wait_for(
        lambda: TaskRun.objects.filter(rule=rule, state="succeeded").first(),
        timeout=RUN_TIMEOUT,
        what="the held slot's run",
    )
    assert run.slot == first
    assert run.trigger_at >= set_at
    assert not SlotHold.objects.filter(rule=rule).exists()
    assert not Decision.objects.filter(rule=rule).exists()
    print(
        f"\n[e2e readiness] flag set -> run claimed in {(run.trigger_at - set_at).total_seconds():.2f}s "
        "(re-check every 2 s)"
    )
