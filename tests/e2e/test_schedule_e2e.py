"""Schedules fire on time with real beat and worker processes (invariants 1, 3, 7)."""

import re
from collections import Counter
from datetime import timedelta
from itertools import pairwise

import pytest
from django.db.models import Sum
from django.utils import timezone

from runs.models import Decision, TaskRun
from tasks.models import DiagnosticRecord
from tests.e2e.helpers import RUN_TIMEOUT, freeze, next_whole_second, recording_rule, wait_run_of, wait_ticking
from tests.support.processes import wait_for

pytestmark = pytest.mark.e2e


@pytest.mark.one_pass("sqlite")
def test_it_runs_an_interval_rule_every_two_seconds(harness):
    harness.worker()
    harness.beat()
    wait_ticking()
    created = timezone.now()
    rule = recording_rule("every-2s", kind="interval", interval_seconds=2)

    def three_succeeded():
        # The first three slots' runs, all finished: with two worker processes a later slot's run may
        # finish before an earlier one's, so "the first three that succeeded" could skip a slot.
        runs = list(TaskRun.objects.filter(rule=rule).order_by("slot")[:3])
        return runs if len(runs) == 3 and all(r.state == "succeeded" for r in runs) else None

    runs = wait_for(three_succeeded, timeout=RUN_TIMEOUT, what="the first 3 slots' runs to succeed")

    keys = [r.biz_key for r in runs]
    assert len(set(keys)) == 3, keys
    gaps = [(b.slot - a.slot).total_seconds() for a, b in pairwise(runs)]
    assert gaps == [2.0, 2.0], gaps
    assert all(r.slot.timestamp() % 2 == 0 for r in runs), "interval slots are epoch-aligned"
    assert runs[0].slot > created
    lateness = [round((r.start_at - r.slot).total_seconds(), 3) for r in runs]
    third_done = (runs[2].finish_at - created).total_seconds()
    print(
        f"\n[e2e interval] 3 runs done {third_done:.2f}s after the rule was created; slot gaps {gaps}; "
        f"start lateness per run {lateness}s; keys {keys}"
    )
    assert third_done < 20, "3 slots 2 s apart, first within 2 s: about 6 s, 20 s allowed for a loaded machine"
    assert not Decision.objects.filter(rule=rule).exists()


@pytest.mark.one_pass("sqlite")
def test_it_starts_a_one_time_rule_within_a_second_of_its_instant(harness):
    harness.worker()
    harness.beat()
    wait_ticking()
    run_at = next_whole_second(timezone.now(), plus=5)
    rule = recording_rule("once-5s", kind="once", run_at=run_at, skill="harness.noop")
    assert rule.next_fire_at == run_at

    run = wait_run_of(rule, state="succeeded")

    lateness = (run.start_at - run_at).total_seconds()
    claim_lateness = (run.trigger_at - run_at).total_seconds()
    print(f"\n[e2e once] claimed {claim_lateness:.3f}s and started {lateness:.3f}s after its instant")
    assert run.slot == run_at
    assert run.source == TaskRun.Source.SCHEDULER
    assert 0 <= claim_lateness and 0 <= lateness, "never before its instant"
    assert lateness < 5, f"started {lateness:.3f}s late (about 1 s expected; 5 s allowed for a loaded machine)"
    rule.refresh_from_db()
    assert rule.next_fire_at is None, "a one-time rule has no further slot"
    assert TaskRun.objects.filter(rule=rule).count() == 1


def test_two_beats_and_two_workers_run_every_slot_exactly_once(harness):
    workers = [harness.worker("w1"), harness.worker("w2")]
    beats = [harness.beat("beat1"), harness.beat("beat2")]
    wait_ticking()
    rule = recording_rule("every-1s", kind="interval", interval_seconds=1)
    observe_until = timezone.now() + timedelta(seconds=15)
    # Observing the processes for 15 s is the point of the test, not waiting for an outcome.
    wait_for(lambda: timezone.now() >= observe_until, timeout=25, interval=0.5, what="15 s of scheduling")
    freeze(rule)
    wait_for(
        lambda: not TaskRun.objects.filter(rule=rule).exclude(state__in=TaskRun.FINISHED).exists(),
        timeout=RUN_TIMEOUT,
        what="every run to finish",
    )

    runs = list(TaskRun.objects.filter(rule=rule).order_by("slot"))
    records = list(DiagnosticRecord.objects.filter(rule_name=rule.name))
    slots = [r.slot for r in runs]
    ticks = {b.name: len(re.findall(r"Sending due task harness: scheduler tick", b.log())) for b in beats}
    by_worker = Counter(r.executed_by.split("@")[0] for r in runs)
    dedupe_hits = TaskRun.objects.filter(rule=rule).aggregate(n=Sum("dedupe_hits"))["n"] or 0
    print(
        f"\n[e2e 2 beats x 2 workers] {len(runs)} runs over {(slots[-1] - slots[0]).total_seconds():.0f}s "
        f"of slots, {len(records)} records, dedupe hits {dedupe_hits}, ticks sent per beat {ticks}, "
        f"runs per worker {dict(by_worker)}"
    )

    assert len(runs) >= 10, "about 15 slots in 15 s"
    assert all(r.state == TaskRun.State.SUCCEEDED for r in runs), Counter(r.state for r in runs)
    assert len(set(slots)) == len(slots), "one run per slot"
    gaps = {(b - a).total_seconds() for a, b in pairwise(slots)}
    assert gaps == {1.0}, f"slots must be a contiguous 1-s sequence, found gaps {sorted(gaps)}"
    assert not Decision.objects.filter(rule=rule).exists(), "every slot ran on time"
    per_key = Counter(rec.biz_key for rec in records)
    assert max(per_key.values()) == 1, [k for k, n in per_key.items() if n > 1]
    assert sorted(per_key) == sorted(r.biz_key for r in runs), "exactly one record per run"
    assert {rec.run_id for rec in records} == {r.id for r in runs}
    assert all(n >= 5 for n in ticks.values()), f"both beats must fire ticks: {ticks}"
    assert len(by_worker) == 2, f"both workers should execute runs: {dict(by_worker)}"
    assert all(w.popen.poll() is None for w in workers)
