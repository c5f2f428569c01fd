"""Executing a run under its lease, retrying or dead-lettering it (invariants 2, 5, 6).

run_execute is called in-process with an explicit clock; no Celery worker is involved. The tests
are transactional so that on_commit hooks (dispatch messages, alert mails) really fire.
"""

import re
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from deadletters.alert_queue import alert_deliver_due
from deadletters.models import AlertChannel, DeadLetter
from deadletters.services import deadletter_open
from runs.engine.claims import run_claim
from runs.engine.executor import run_execute
from runs.engine.leases import LeaseLost, fenced
from runs.engine.store import store
from runs.engine.sweeper import sweep
from runs.models import Attempt, TaskRun
from tasks.models import DiagnosticRecord
from tasks.skills import builtin as builtin_skills
from tasks.skills.errors import classify
from tasks.skills.sdk import SkillContext, SkillError, registry
from tests.support.runs import api_work

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# Base 10 with jitter 0.5-1.5 makes the delay ranges of successive attempts disjoint: [5, 15), [50, 150).
POLICY = {
    "max_attempts": 3,
    "backoff_base_seconds": 10.0,
    "max_delay_seconds": 300,
    "max_retry_window_seconds": 3600,
    "jitter_min": 0.5,
    "jitter_max": 1.5,
    "lease_ttl_seconds": 60,
}
ADMIN_EMAIL = "oncall@example.com"

HOLD_SKILL = "tests.hold_first_attempt_then_record"
_gates: dict[str, tuple[threading.Event, threading.Event]] = {}


def _hold_first_attempt_then_record(ctx: SkillContext) -> dict:
    """Attempt 1 signals `entered` and waits for `release` (a stalled worker); then writes like harness.record."""
    gate = _gates.get(ctx.biz_key)
    if gate is not None and ctx.attempt == 1:
        entered, release = gate
        entered.set()
        if not release.wait(timeout=60):
            raise SkillError("timeout", "test never released the held attempt")
    return builtin_skills.record(ctx)


if HOLD_SKILL not in registry:
    registry.register(HOLD_SKILL, _hold_first_attempt_then_record)


@pytest.fixture(autouse=True)
def admins(settings):
    settings.ADMINS = [("On call", ADMIN_EMAIL)]
    # The default alert channel the data migration installs (transactional tests flush it).
    AlertChannel.objects.update_or_create(  # installed disabled while ADMINS is unset
        name="On-call email (ADMINS)", defaults={"kind": "email", "min_severity": "urgent", "enabled": True}
    )


def delivered(mailoutbox):
    """The mail outbox once every recorded alert is delivered, as the alerts worker would."""
    alert_deliver_due(now=T0 + timedelta(days=2))
    return mailoutbox


def make_run(skill: str, *, params=None, policy=None, biz_key="exec:2026-03-01", now=T0) -> TaskRun:
    work = api_work(biz_key, skill=skill, params=params, policy={**POLICY, **(policy or {})})
    return run_claim(work, now=now).run


def execute(run: TaskRun, at: datetime, worker: str = "w1"):
    return run_execute(run_id=run.id, worker=worker, clock=lambda: at)


def fresh(run: TaskRun) -> TaskRun:
    return TaskRun.objects.get(id=run.id)


def attempts(run: TaskRun) -> list[Attempt]:
    return list(Attempt.objects.filter(run_id=run.id).order_by("number"))


def assert_lease_cleared(run: TaskRun) -> None:
    assert (run.lease_owner, run.lease_expires_at) == ("", None)


def assert_alerted_once(mailoutbox, run: TaskRun) -> None:
    assert len(delivered(mailoutbox)) == 1
    mail = mailoutbox[0]
    assert mail.to == [ADMIN_EMAIL]
    assert f"run {run.id} " in mail.subject and run.biz_key in mail.subject
    assert re.search(rf"^run id:\s+{run.id}$", mail.body, re.MULTILINE)
    assert re.search(rf"^biz_key:\s+{re.escape(run.biz_key)}$", mail.body, re.MULTILINE)


# --- success and retries -----------------------------------------------------------------


def test_it_executes_a_run_and_records_the_attempt(mailoutbox):
    run = make_run("harness.noop")
    outcome = execute(run, T0)

    assert outcome.status == "succeeded"
    run = fresh(run)
    assert run.state == TaskRun.State.SUCCEEDED
    assert run.result == {"ok": True}
    assert (run.attempts, run.fence, run.executed_by) == (1, 1, "w1")
    assert (run.start_at, run.finish_at) == (T0, T0)
    assert_lease_cleared(run)
    [attempt] = attempts(run)
    assert (attempt.number, attempt.fence, attempt.worker) == (1, 1, "w1")
    assert (attempt.outcome, attempt.started_at, attempt.finished_at) == (Attempt.Outcome.SUCCEEDED, T0, T0)
    assert not DeadLetter.objects.exists()
    assert delivered(mailoutbox) == []


def test_it_retries_a_timeout_with_growing_jittered_delays_then_succeeds(mailoutbox):
    run = make_run("harness.fail", params={"error_kind": "timeout", "fail_attempts": 2})
    base, lo, hi = POLICY["backoff_base_seconds"], POLICY["jitter_min"], POLICY["jitter_max"]

    at = T0
    delays = []
    for number in (1, 2):
        assert execute(run, at).status == "retry"
        run = fresh(run)
        assert run.state == TaskRun.State.WAITING_RETRY
        assert_lease_cleared(run)
        assert (run.attempts, run.last_error_kind, run.first_failure_at) == (number, "timeout", T0)
        delay = (run.run_after - at).total_seconds()
        assert base**number * lo <= delay < base**number * hi
        delays.append(delay)
        # Not due yet: nobody may take it before run_after.
        assert execute(run, run.run_after - timedelta(milliseconds=1)).status == "not_claimable"
        at = run.run_after + timedelta(seconds=1)
    assert delays[1] > delays[0]

    assert execute(run, at).status == "succeeded"
    run = fresh(run)
    assert run.state == TaskRun.State.SUCCEEDED
    assert run.result == {"succeeded_on_attempt": 3}
    assert run.attempts == 3
    assert [a.outcome for a in attempts(run)] == ["retry", "retry", "succeeded"]
    assert [a.error_kind for a in attempts(run)] == ["timeout", "timeout", ""]
    assert not DeadLetter.objects.exists()
    assert delivered(mailoutbox) == []


# --- final failures: exactly one ticket and one alert -------------------------------------


def test_it_dead_letters_an_invalid_param_at_once(mailoutbox):
    run = make_run("harness.fail", params={"error_kind": "invalid_param"})
    outcome = execute(run, T0)

    assert outcome.status == "failed"
    run = fresh(run)
    assert (run.state, run.attempts, run.finish_at, run.last_error_kind) == ("failed", 1, T0, "invalid_param")
    assert_lease_cleared(run)
    [attempt] = attempts(run)
    assert attempt.outcome == Attempt.Outcome.FAILED
    [ticket] = DeadLetter.objects.all()
    assert (ticket.run_id, ticket.biz_key, ticket.attempts) == (run.id, run.biz_key, 1)
    assert ticket.error_kind == "invalid_param"
    assert ticket.last_error_digest == attempt.error_digest != ""
    assert ticket.state == DeadLetter.State.PENDING_MANUAL
    assert (ticket.first_failure_at, ticket.last_failure_at) == (T0, T0)
    assert ticket.raw_payload == run.payload
    assert_alerted_once(mailoutbox, run)


def test_it_dead_letters_an_unclassified_error(mailoutbox):
    run = make_run("harness.fail", params={"error_kind": "unclassified"})
    assert execute(run, T0).status == "failed"
    [ticket] = DeadLetter.objects.filter(run_id=run.id)
    assert ticket.error_kind == "unclassified"
    assert "RuntimeError" in ticket.last_error
    assert fresh(run).state == TaskRun.State.FAILED
    assert_alerted_once(mailoutbox, run)


def test_it_dead_letters_a_run_whose_skill_is_not_registered(mailoutbox):
    run = make_run("no.such.skill")
    assert execute(run, T0).status == "failed"
    [ticket] = DeadLetter.objects.filter(run_id=run.id)
    assert ticket.error_kind == "invalid_param"
    assert_alerted_once(mailoutbox, run)


def test_it_dead_letters_when_attempts_are_exhausted(mailoutbox):
    run = make_run("harness.fail", params={"error_kind": "timeout"}, policy={"max_attempts": 2})
    assert execute(run, T0).status == "retry"
    assert delivered(mailoutbox) == []
    second_at = fresh(run).run_after
    outcome = execute(run, second_at)

    assert outcome.status == "failed"
    assert "exhausted" in outcome.detail
    run = fresh(run)
    assert (run.state, run.attempts) == (TaskRun.State.FAILED, 2)
    assert [a.outcome for a in attempts(run)] == ["retry", "failed"]
    [ticket] = DeadLetter.objects.filter(run_id=run.id)
    assert (ticket.attempts, ticket.error_kind) == (2, "timeout")
    assert (ticket.first_failure_at, ticket.last_failure_at) == (T0, second_at)
    assert_alerted_once(mailoutbox, run)
    assert "attempts exhausted" in mailoutbox[0].body


def test_it_dead_letters_when_the_next_retry_would_fall_outside_the_window(mailoutbox):
    # Jitter 2 makes the first delay exactly 20s, past a 10s retry window.
    policy = {"max_retry_window_seconds": 10, "jitter_min": 2.0, "jitter_max": 2.0}
    run = make_run("harness.fail", params={"error_kind": "timeout"}, policy=policy)
    outcome = execute(run, T0)
    assert outcome.status == "failed"
    assert "window" in outcome.detail
    assert DeadLetter.objects.filter(run_id=run.id).count() == 1
    assert_alerted_once(mailoutbox, run)


def test_it_opens_one_ticket_when_a_final_failure_is_reported_twice(mailoutbox):
    run = make_run("harness.fail", params={"error_kind": "invalid_param"})
    execute(run, T0)
    run = fresh(run)
    error = classify(SkillError("invalid_param", "reported again by a redelivered message"))
    again = deadletter_open(run=run, error=error, reason="duplicate report", now=T0 + timedelta(minutes=1))

    assert DeadLetter.objects.filter(run_id=run.id).count() == 1
    assert again.id == DeadLetter.objects.get(run_id=run.id).id
    assert_alerted_once(mailoutbox, run)


# --- not claimable -----------------------------------------------------------------------


def test_it_does_not_claim_a_run_before_its_run_after():
    run = make_run("harness.noop", now=T0)
    TaskRun.objects.filter(id=run.id).update(run_after=T0 + timedelta(minutes=5))

    assert execute(run, T0 + timedelta(minutes=4)).status == "not_claimable"
    run = fresh(run)
    assert (run.state, run.attempts, run.fence) == (TaskRun.State.PENDING, 0, 0)
    assert attempts(run) == []
    assert execute(run, T0 + timedelta(minutes=5)).status == "succeeded"


def test_it_does_not_claim_a_run_another_worker_holds():
    run = make_run("harness.noop")
    assert store().lease_claim(TaskRun.objects.get(id=run.id), worker="A", now=T0, plain=False) is not None
    held = fresh(run)
    assert (held.state, held.lease_owner, held.lease_expires_at) == ("running", "A", T0 + timedelta(seconds=60))

    assert execute(run, T0 + timedelta(seconds=30), worker="B").status == "not_claimable"
    run = fresh(run)
    assert (run.lease_owner, run.fence, run.attempts) == ("A", held.fence, 1)
    assert [a.worker for a in attempts(run)] == ["A"]


@pytest.mark.parametrize(("skill", "params"), [("harness.noop", {}), ("harness.fail", {"error_kind": "invalid_param"})])
def test_it_does_not_claim_a_finished_run(skill, params):
    run = make_run(skill, params=params)
    first = execute(run, T0)
    assert first.status in ("succeeded", "failed")
    before = fresh(run)

    assert execute(run, T0 + timedelta(hours=1), worker="w2").status == "not_claimable"
    after = fresh(run)
    assert (after.state, after.attempts, after.fence, after.executed_by) == (
        before.state,
        before.attempts,
        before.fence,
        "w1",
    )
    assert len(attempts(run)) == 1


def test_it_does_not_claim_a_missing_run():
    assert run_execute(run_id=987654, worker="w1", clock=lambda: T0).status == "not_claimable"


# --- fencing -----------------------------------------------------------------------------


def test_a_worker_whose_lease_was_taken_cannot_commit():
    """A stalls inside the skill, its lease expires and is swept, B runs the run; A's writes are refused."""
    run = make_run(HOLD_SKILL, biz_key="fence:2026-03-01")
    entered, release = threading.Event(), threading.Event()
    _gates[run.biz_key] = (entered, release)
    a_outcome = []

    def worker_a() -> None:
        try:
            a_outcome.append(run_execute(run_id=run.id, worker="A", clock=lambda: T0))
        finally:
            connection.close()

    thread = threading.Thread(target=worker_a)
    thread.start()
    try:
        assert entered.wait(timeout=30), "worker A never started the skill"
        assert fresh(run).lease_owner == "A"

        swept = sweep(now=T0 + timedelta(seconds=POLICY["lease_ttl_seconds"] + 1), rand=lambda: 0.0)
        assert swept.expired == 1
        taken = fresh(run)
        assert (taken.state, taken.fence) == (TaskRun.State.WAITING_RETRY, 2)

        b_outcome = run_execute(run_id=run.id, worker="B", clock=lambda: taken.run_after)
        assert b_outcome.status == "succeeded"
    finally:
        release.set()
        thread.join(timeout=30)
        _gates.pop(run.biz_key, None)
    assert not thread.is_alive()

    assert [o.status for o in a_outcome] == ["fenced"]
    [record] = DiagnosticRecord.objects.filter(run_id=run.id)
    assert (record.worker, record.fence, record.attempt) == ("B", 3, 2)
    run = fresh(run)
    assert run.state == TaskRun.State.SUCCEEDED
    assert run.result == {"record_id": record.id}
    assert (run.fence, run.executed_by) == (3, "B")
    assert_lease_cleared(run)
    by_worker = {a.worker: a for a in attempts(run)}
    # A's attempt is closed as lost (by the sweeper) or fenced (by A itself), never as a success.
    assert by_worker["A"].outcome in (Attempt.Outcome.LEASE_EXPIRED, Attempt.Outcome.FENCED)
    assert by_worker["A"].error_kind == "lease_lost"
    assert by_worker["B"].outcome == Attempt.Outcome.SUCCEEDED
    assert not DeadLetter.objects.exists()


def test_fenced_refuses_a_write_once_the_fence_has_moved():
    run = make_run("harness.noop")
    assert store().lease_claim(TaskRun.objects.get(id=run.id), worker="A", now=T0, plain=False) is not None

    def write(fence: int) -> None:
        with fenced(run_id=run.id, fence=fence):
            DiagnosticRecord.objects.create(run_id=run.id, biz_key=run.biz_key, fence=fence, attempt=1, created_at=T0)

    write(1)  # the lease holder may write
    with pytest.raises(LeaseLost):
        write(0)
    sweep(now=T0 + timedelta(seconds=61), rand=lambda: 0.0)
    with pytest.raises(LeaseLost):
        write(1)  # the same holder, after its lease was taken back
    assert list(DiagnosticRecord.objects.filter(run_id=run.id).values_list("fence", flat=True)) == [1]


def test_the_lease_is_renewed_while_a_long_skill_runs():
    """With a 1 s lease, a 2.5 s skill survives a sweep only because the lease keeps being extended."""
    run = make_run("harness.sleep", params={"seconds": 2.5}, policy={"lease_ttl_seconds": 1}, now=timezone.now())
    outcome = []

    def worker() -> None:
        try:
            outcome.append(run_execute(run_id=run.id, worker="w1", clock=timezone.now))
        finally:
            connection.close()

    thread = threading.Thread(target=worker)
    thread.start()
    seen = []
    swept = []
    try:
        deadline = time.monotonic() + 10
        while thread.is_alive() and time.monotonic() < deadline:
            current = fresh(run)
            if current.state == TaskRun.State.RUNNING:
                seen.append(current.lease_expires_at)
                if current.start_at and timezone.now() - current.start_at > timedelta(seconds=1.8) and not swept:
                    swept.append(sweep(now=timezone.now()))
            time.sleep(0.05)
    finally:
        thread.join(timeout=30)

    assert [o.status for o in outcome] == ["succeeded"]
    assert len(swept) == 1 and swept[0].expired == 0
    assert seen, "never observed the run while it was running"
    start = fresh(run).start_at
    # Without renewal the lease would have stayed at start + 1 s.
    assert max(seen) > start + timedelta(seconds=2)
    assert len(set(seen)) >= 3
    run = fresh(run)
    assert (run.attempts, run.fence) == (1, 1)
    assert_lease_cleared(run)
