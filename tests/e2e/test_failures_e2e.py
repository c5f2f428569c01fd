"""Lost workers, paused workers and failing skills with real processes (invariants 2, 5, 6)."""

from datetime import timedelta
from itertools import pairwise

import pytest
from django.utils import timezone

from deadletters.models import DeadLetter
from runs.models import Attempt, SchedulerTick, TaskRun
from tasks.skills.sdk import ErrorKind
from tests.e2e.helpers import (
    RUN_TIMEOUT,
    make_rule,
    next_whole_second,
    pause_quiescent,
    wait_finished,
    wait_run_of,
    wait_ticking,
)
from tests.support.processes import wait_for

pytestmark = pytest.mark.e2e

# Small retry policy: a lost lease is noticed within seconds and retried within two.
FAST_RETRY = {"max_attempts": 3, "backoff_base_seconds": 1, "max_delay_seconds": 2}


def _once(name: str, **fields):
    return make_rule(name, kind="once", run_at=next_whole_second(timezone.now(), plus=1), **fields)


def _attempts(run: TaskRun) -> list[Attempt]:
    return list(Attempt.objects.filter(run=run).order_by("number"))


def test_a_run_whose_worker_is_killed_is_retried_by_another_worker(harness):
    w1 = harness.worker("w1")
    harness.beat()
    wait_ticking()
    rule = _once("sleep-kill9", skill="harness.sleep", params={"seconds": 6}, lease_ttl_seconds=3, **FAST_RETRY)
    run = wait_run_of(rule, state="running")
    assert _attempts(run)[0].worker.startswith("w1@")

    w1.kill9()
    killed_at = timezone.now()
    harness.worker("w2")
    run = wait_finished(run)

    first, second = attempts = _attempts(run)
    print(
        f"\n[e2e kill -9] lease expired {(first.finished_at - killed_at).total_seconds():.2f}s after the kill, "
        f"attempt 2 started {(second.started_at - killed_at).total_seconds():.2f}s after, "
        f"run done {(run.finish_at - killed_at).total_seconds():.2f}s after"
    )
    assert run.state == TaskRun.State.SUCCEEDED, run.last_error
    assert run.attempts == 2 and len(attempts) == 2
    assert first.outcome == Attempt.Outcome.LEASE_EXPIRED
    assert first.error_kind == ErrorKind.LEASE_LOST
    assert first.worker.startswith("w1@")
    assert second.outcome == Attempt.Outcome.SUCCEEDED
    assert second.worker.startswith("w2@") and run.executed_by == second.worker
    assert second.fence == run.fence > first.fence
    assert second.started_at >= first.finished_at
    assert not DeadLetter.objects.filter(run=run).exists()


def test_a_paused_worker_cannot_commit_after_its_lease_was_taken(harness):
    # Ticks and sweeps go to a worker of their own: A, serving runs only, is never frozen inside a
    # sweep's transaction, so the first pause sticks (CI: three tries took as long as the skill).
    harness.worker("control", concurrency=1, args=("--queues=harness_control",))
    worker_a = harness.worker("wA", args=("--queues=celery",))
    harness.beat()
    wait_ticking()
    rule = _once("sleep-fenced", skill="harness.sleep", params={"seconds": 5}, lease_ttl_seconds=2, **FAST_RETRY)
    run = wait_run_of(rule, state="running")
    assert _attempts(run)[0].worker.startswith("wA@")

    # Freeze A (and its lease renewer) mid-skill; the sweeper takes the lease back and B runs it.
    pause_quiescent(worker_a)
    first = _attempts(run)[0]
    assert first.outcome != Attempt.Outcome.SUCCEEDED, "A finished its skill before it could be frozen"
    harness.worker("wB", args=("--queues=celery",))
    run = wait_finished(run)
    assert run.state == TaskRun.State.SUCCEEDED, run.last_error
    b_attempt = _attempts(run)[-1]
    assert b_attempt.worker.startswith("wB@") and b_attempt.outcome == Attempt.Outcome.SUCCEEDED
    before = TaskRun.objects.filter(pk=run.pk).values().get()

    # A wakes up, finishes its sleep and tries to commit with its old fencing token.
    worker_a.resume()
    discarded = f"run {run.id} attempt 1 lost its lease; outcome discarded"
    wait_for(lambda: discarded in worker_a.log(), timeout=30, what="worker A to try to commit and be fenced out")

    after = TaskRun.objects.filter(pk=run.pk).values().get()
    attempts = _attempts(run)
    print(
        f"\n[e2e fencing] attempts {[(a.number, a.worker.split('@')[0], a.outcome, a.fence) for a in attempts]}; "
        f"run fence {after['fence']}"
    )
    assert after == before, "the fenced worker changed the run"
    assert [a.outcome for a in attempts].count(Attempt.Outcome.SUCCEEDED) == 1
    a_attempt = attempts[0]
    assert a_attempt.worker.startswith("wA@")
    # The sweeper ended it as lease_expired; A's refused commit turns it into "fenced".
    assert a_attempt.outcome == Attempt.Outcome.FENCED
    assert a_attempt.error_kind == ErrorKind.LEASE_LOST
    assert a_attempt.fence < b_attempt.fence == after["fence"]
    assert after["executed_by"] == b_attempt.worker
    assert len(attempts) == 2, "A's late return must not start another attempt"


@pytest.mark.one_pass("postgresql")
def test_a_timeout_is_retried_with_growing_jittered_delays_then_succeeds(harness):
    harness.worker()
    harness.beat()
    wait_ticking()
    policy = {
        "max_attempts": 3,
        "backoff_base_seconds": 2,
        "max_delay_seconds": 10,
        "jitter_min": 0.5,
        "jitter_max": 1.5,
    }
    rule = _once("fail-twice", skill="harness.fail", params={"error_kind": "timeout", "fail_attempts": 2}, **policy)
    run = wait_finished(wait_run_of(rule), timeout=RUN_TIMEOUT)

    attempts = _attempts(run)
    waits = [(b.started_at - a.finished_at).total_seconds() for a, b in pairwise(attempts)]
    starts = [(b.started_at - a.started_at).total_seconds() for a, b in pairwise(attempts)]
    print(
        f"\n[e2e retry] waits after failed attempts {[round(w, 3) for w in waits]}s "
        f"(jittered ranges [1, 3) and [2, 6)), gaps between attempt starts {[round(s, 3) for s in starts]}s"
    )
    assert run.state == TaskRun.State.SUCCEEDED, run.last_error
    assert run.result == {"succeeded_on_attempt": 3}
    assert [a.outcome for a in attempts] == ["retry", "retry", "succeeded"]
    assert [a.error_kind for a in attempts] == ["timeout", "timeout", ""]
    # Delay after attempt n: 2^n x a jitter factor in [0.5, 1.5), capped at 10 s. The run may not
    # start before it (run_after); it should start within a sweep period or two after it.
    dispatch_slack = 4.0
    for n, wait in enumerate(waits, start=1):
        low, high = 2**n * 0.5, min(2**n * 1.5, 10)
        assert low <= wait <= high + dispatch_slack, f"wait after attempt {n} was {wait:.3f}s, range [{low}, {high})"
    # Strictly growing gaps are not asserted: the jittered ranges overlap ([1, 3) and [2, 6)), so
    # about one run in 16 draws a second delay shorter than the first. Their bounds grow, as checked.
    assert not DeadLetter.objects.filter(run=run).exists()


@pytest.mark.one_pass("postgresql")
@pytest.mark.parametrize("error_kind", [ErrorKind.INVALID_PARAM, ErrorKind.UNCLASSIFIED])
def test_a_non_retryable_failure_fails_at_once_with_one_dead_letter(harness, error_kind):
    harness.worker()
    harness.beat()
    wait_ticking()
    rule = _once(
        f"fail-{error_kind}".replace("_", "-"), skill="harness.fail", params={"error_kind": error_kind}, **FAST_RETRY
    )
    run = wait_finished(wait_run_of(rule))
    # A few more sweeps and ticks, so a wrongly scheduled retry would show.
    wait_for(
        lambda: SchedulerTick.objects.filter(last_tick_at__gte=run.finish_at + timedelta(seconds=3)).exists(),
        timeout=30,
        what="three more seconds of ticks",
    )

    run.refresh_from_db()
    attempts = _attempts(run)
    tickets = list(DeadLetter.objects.filter(run=run))
    print(
        f"\n[e2e {error_kind}] failed {(run.finish_at - run.start_at).total_seconds():.3f}s after start, "
        f"{len(attempts)} attempt(s), {len(tickets)} dead letter(s)"
    )
    assert run.state == TaskRun.State.FAILED
    assert run.attempts == 1 and len(attempts) == 1
    assert attempts[0].outcome == Attempt.Outcome.FAILED and attempts[0].error_kind == error_kind
    assert run.last_error_kind == error_kind
    assert len(tickets) == 1
    ticket = tickets[0]
    assert ticket.state == DeadLetter.State.PENDING_MANUAL
    assert (ticket.biz_key, ticket.error_kind, ticket.attempts) == (run.biz_key, error_kind, 1)
