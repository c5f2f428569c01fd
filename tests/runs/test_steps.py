"""Checkpointed steps under the run's fence (runs/engine/steps.py): a step done once is returned, never done
again; a checkpoint or a write step's writes commit only while this attempt holds the lease."""

import logging
import threading
import time
from datetime import UTC, datetime

import pytest
from django.db import connection, transaction
from django.db.models import F

from runs.engine.claims import run_claim
from runs.engine.leases import LeaseLost
from runs.engine.steps import run_step
from runs.engine.store import store
from runs.models import RunStep, TaskRun
from tasks.models import DiagnosticRecord
from tasks.skills.sdk import SkillContext
from tests.support.runs import api_work

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LOG = logging.getLogger("tests.steps")
JOIN_SECONDS = 30


@pytest.fixture
def run() -> TaskRun:
    run = run_claim(api_work("steps:1", skill="harness.noop"), now=T0, dispatch=False).run
    assert store().lease_claim(run, worker="w1", now=T0, plain=False) is not None
    return run


def context(run: TaskRun, *, fence: int | None = None, lost: bool = False, dry_run: bool = False) -> SkillContext:
    return SkillContext(
        run_id=run.id,
        biz_key=run.biz_key,
        fence=run.fence if fence is None else fence,
        attempt=run.attempts,
        params={},
        now=T0,
        logger=LOG,
        payload={"dry_run": dry_run},
        lease_lost=lambda: lost,
    )


def record(ctx: SkillContext) -> dict:
    row = DiagnosticRecord.objects.create(
        run_id=ctx.run_id, biz_key=ctx.biz_key, fence=ctx.fence, attempt=ctx.attempt, created_at=T0
    )
    return {"record_id": row.id}


def take_lease(run: TaskRun) -> None:
    """The sweeper took the lease and another attempt claimed it: the fence moved on."""
    TaskRun.objects.filter(id=run.id).update(fence=run.fence + 1)


@pytest.mark.parametrize("write", [False, True])
def test_a_step_runs_once_and_its_checkpoint_is_returned_afterwards(run, write):
    calls = []

    def step() -> dict:
        calls.append(1)
        return record(ctx) if write else {"n": len(calls)}

    ctx = context(run)
    first = run_step(ctx, "s", step, write=write)
    take_lease(run)  # a later attempt resumes after the step, even one that no longer holds the lease
    again = run_step(context(run), "s", step, write=write)

    assert again == first and len(calls) == 1
    assert RunStep.objects.get(run=run, name="s").output == first
    assert DiagnosticRecord.objects.filter(run_id=run.id).count() == (1 if write else 0)


def test_a_read_steps_checkpoint_is_refused_once_its_lease_was_taken_during_the_step(run):
    ctx = context(run)

    def slow_read() -> dict:
        take_lease(run)  # while the model answered, the sweeper moved the fence
        return {"summary": "late"}

    with pytest.raises(LeaseLost):
        run_step(ctx, "call_model", slow_read)
    assert not RunStep.objects.filter(run=run).exists()


def test_a_write_step_does_nothing_once_its_lease_was_taken(run):
    take_lease(run)
    ran = []

    with pytest.raises(LeaseLost):
        run_step(context(run), "write_result", lambda: ran.append(1) or record(context(run)), write=True)
    assert ran == [] and not RunStep.objects.filter(run=run).exists()
    assert not DiagnosticRecord.objects.filter(run_id=run.id).exists()


def test_an_attempt_that_knows_its_lease_is_lost_starts_no_read_step(run):
    # A read step may be a model call: an attempt whose lease is gone must not make it (its view of
    # the checkpoints, read once per attempt, cannot see a newer attempt's).
    calls = []
    with pytest.raises(LeaseLost):
        run_step(context(run, lost=True), "call_model", lambda: calls.append(1))
    assert calls == []


@pytest.mark.parametrize("write", [False, True])
def test_a_lost_lease_flag_refuses_the_checkpoint_before_the_fence_moved(run, write):
    with pytest.raises(LeaseLost):
        run_step(context(run, lost=True), "s", lambda: {"n": 1}, write=write)
    assert not RunStep.objects.filter(run=run).exists()


def test_a_write_steps_writes_are_rolled_back_with_its_checkpoint_when_it_fails(run):
    def fails() -> dict:
        record(context(run))
        raise RuntimeError("the write failed half-way")

    with pytest.raises(RuntimeError):
        run_step(context(run), "write_result", fails, write=True)
    assert not RunStep.objects.filter(run=run).exists() and not DiagnosticRecord.objects.exists()


def test_a_dry_run_records_a_write_step_as_skipped_without_running_it(run):
    ran = []

    assert run_step(context(run, dry_run=True), "write_result", lambda: ran.append(1), write=True) is None
    assert ran == []
    step = RunStep.objects.get(run=run, name="write_result")
    assert step.skipped and step.output is None
    take_lease(run)
    with pytest.raises(LeaseLost):
        run_step(context(run, dry_run=True), "other_write", lambda: ran.append(1), write=True)


def waiting_on_a_row_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="a row lock to wait on is PostgreSQL's")
@pytest.mark.parametrize("write", [False, True])
def test_a_step_meeting_the_sweeper_as_it_moves_the_fence_waits_for_its_commit_and_writes_nothing(write):
    """The fence check and the checkpoint are one statement (a read step) or open the write step's
    transaction: either waits for the sweeper's uncommitted fence, then sees it moved."""
    run = run_claim(api_work("steps:race", skill="harness.noop"), now=T0, dispatch=False).run
    assert store().lease_claim(run, worker="w1", now=T0, plain=False) is not None
    moved, commit = threading.Event(), threading.Event()
    outcome: list[str] = []

    def sweeper() -> None:
        try:
            with transaction.atomic():
                TaskRun.objects.filter(id=run.id).update(fence=F("fence") + 1)
                moved.set()
                commit.wait(JOIN_SECONDS)
        finally:
            connection.close()

    def step() -> None:
        try:
            run_step(context(run), "s", lambda: {"n": 1}, write=write)
            outcome.append("written")
        except LeaseLost:
            outcome.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=sweeper, daemon=True), threading.Thread(target=step, daemon=True)]
    threads[0].start()
    assert moved.wait(JOIN_SECONDS)
    threads[1].start()
    try:
        deadline = time.monotonic() + JOIN_SECONDS
        waited = False
        while not (waited or outcome) and time.monotonic() < deadline:
            waited = waiting_on_a_row_lock() > 0
            time.sleep(0.01)
        assert waited and not outcome, f"the step did not wait for the sweeper's row lock: {outcome}"
    finally:
        commit.set()
        for t in threads:
            t.join(JOIN_SECONDS)
    assert outcome == ["refused"]
    assert not RunStep.objects.filter(run=run).exists()
