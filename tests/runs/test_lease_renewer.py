"""The lease renewer (runs/engine/leases.py): it tells the running skill when the lease is lost, and the
attempt then stops and commits nothing (invariant 2). Real database, real threads."""

import logging
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from runs.engine.claims import Work, run_claim
from runs.engine.executor import run_execute
from runs.engine.leases import LeaseRenewer, _renewals
from runs.engine.operations import run_lease_force_release
from runs.engine.store import store
from runs.models import Attempt, TaskRun
from tasks.models import DiagnosticRecord
from tests.support.runs import run_policy

pytestmark = pytest.mark.django_db(transaction=True)


def make_run(*, seconds: float, ttl: float) -> TaskRun:
    payload = {"params": {"seconds": seconds}}
    policy = run_policy({"lease_ttl_seconds": ttl, "max_attempts": 1})
    work = Work(
        biz_key="renew:1", skill="harness.record", source="api", triggered_by="tests", payload=payload, policy=policy
    )
    return run_claim(work, now=timezone.now(), dispatch=False).run


def test_the_renewer_flags_a_lease_whose_fence_moved():
    run = make_run(seconds=0, ttl=1)
    assert store().lease_claim(run, worker="A", now=timezone.now(), plain=False) is not None
    renewer = LeaseRenewer(run_id=run.id, fence=run.fence, ttl=timedelta(seconds=0.6), clock=timezone.now)
    renewer.start()
    try:
        time.sleep(0.5)
        assert not renewer.lost.is_set()  # renewed while the fence holds
        TaskRun.objects.filter(id=run.id).update(fence=run.fence + 1)  # taken by another worker
        assert renewer.lost.wait(timeout=5), "the renewer never noticed the lease was gone"
    finally:
        renewer.stop()


def test_a_skill_stops_and_commits_nothing_once_its_lease_is_taken():
    run = make_run(seconds=3, ttl=0.6)

    def take_it_away():
        deadline = time.monotonic() + 10
        while TaskRun.objects.get(id=run.id).state != TaskRun.State.RUNNING and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        run_lease_force_release(run_id=run.id, actor="oncall", now=timezone.now(), reason="test")
        connection.close()

    thief = threading.Thread(target=take_it_away)
    thief.start()
    started = time.monotonic()
    outcome = run_execute(run_id=run.id, worker="A", clock=timezone.now)
    elapsed = time.monotonic() - started
    thief.join()
    assert outcome.status == "fenced"
    assert elapsed < 2.5, f"the skill kept working {elapsed:.1f}s after losing its lease"
    assert not DiagnosticRecord.objects.filter(run_id=run.id).exists()
    [attempt] = Attempt.objects.filter(run_id=run.id)
    assert attempt.outcome == Attempt.Outcome.FENCED


def test_a_pass_that_meets_a_run_finished_meanwhile_reports_no_lost_lease(caplog):
    """A renewal pass takes its due leases, the run finishes (its renewal stopped first, then its
    outcome committed), and the pass's statement no longer finds it running: that is the end of a
    lease, not a lost one, and says nothing (60 agent runs logged 7 false "lease lost" lines so)."""
    run = make_run(seconds=0, ttl=60)
    assert store().lease_claim(run, worker="A", now=timezone.now(), plain=False) is not None
    renewer = LeaseRenewer(run_id=run.id, fence=run.fence, ttl=timedelta(seconds=60), clock=timezone.now)
    renewer.start()
    renewer.stop()  # the executor stops renewing before it writes the outcome
    TaskRun.objects.filter(id=run.id).update(state=TaskRun.State.SUCCEEDED)

    with caplog.at_level(logging.INFO, logger="harness.leases"):
        _renewals.renew([renewer])  # the pass that had taken it as due

    assert [r.getMessage() for r in caplog.records if r.name == "harness.leases"] == []
