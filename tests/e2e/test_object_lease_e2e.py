"""Object serialization with real worker processes: runs naming the same object never execute at once,
even with 4 pool processes free to take them (object leases in runs.Lease, no global lock)."""

from datetime import timedelta
from itertools import combinations

import pytest
from django.utils import timezone

from runs.models import Attempt, Lease, TaskRun
from tasks.models import TriggerRule
from tasks.triggers.operator import rule_fire
from tests.e2e.helpers import RUN_TIMEOUT, wait_ticking
from tests.support.processes import wait_for
from tests.support.rules import make_rule

pytestmark = pytest.mark.e2e

RUNS_PER_OBJECT = 6


def _rule(name: str, obj: str) -> TriggerRule:
    return make_rule(
        name,
        reason="e2e: object serialization",
        interval_seconds=3600,
        enabled=False,
        skill="harness.sleep",
        params={"seconds": 0.4, "obj": obj},
        object_key_template="invoice:{obj}",
    )


def test_it_never_runs_two_runs_of_one_object_at_once_under_4_workers(harness):
    harness.worker("w4", concurrency=4)
    harness.beat()  # the sweeper re-dispatches runs pushed back while their object was busy
    wait_ticking()
    now = timezone.now()
    rules = [_rule("invoice-a", "A"), _rule("invoice-b", "B")]
    for rule in rules:
        for i in range(RUNS_PER_OBJECT):
            rule_fire(rule=rule, actor="e2e", now=now, slot=now.replace(microsecond=0) - timedelta(minutes=i))

    def all_done():
        runs = TaskRun.objects.filter(rule__in=rules)
        return runs.count() == 2 * RUNS_PER_OBJECT and all(r.state in TaskRun.FINISHED for r in runs)

    wait_for(all_done, timeout=RUN_TIMEOUT, what="every run of both objects to finish")

    assert set(TaskRun.objects.filter(rule__in=rules).values_list("state", flat=True)) == {"succeeded"}
    for rule, key in zip(rules, ("invoice:A", "invoice:B"), strict=True):
        attempts = list(Attempt.objects.filter(run__rule=rule).order_by("started_at"))
        assert len(attempts) == RUNS_PER_OBJECT  # one attempt each: waiting for the object is not an attempt
        assert {a.run.object_key for a in attempts} == {key}
        overlaps = [
            (a.run_id, b.run_id)
            for a, b in combinations(attempts, 2)
            if a.started_at < b.finished_at and b.started_at < a.finished_at
        ]
        assert not overlaps, f"runs of {key} overlapped: {overlaps}"
        lease = Lease.objects.get(key=f"object:{key}")
        assert lease.owner == "" and lease.token >= RUNS_PER_OBJECT  # released; one fenced token per holder
    # The lease was really contended: some executions found their object busy and were pushed back.
    assert any("'object_busy'" in p.log() for p in harness.procs), "no run ever waited for its object"
    workers = set(Attempt.objects.filter(run__rule__in=rules).values_list("worker", flat=True))
    print(f"\n[e2e object lease] {2 * RUNS_PER_OBJECT} runs over 2 objects by {len(workers)} pool processes")
