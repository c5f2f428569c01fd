"""The sweeper: takes back expired leases (invariant 2), retries or dead-letters them (5, 6), and
re-dispatches due runs whose message may be lost. Real database, `now` passed explicitly."""

import threading
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from django.db import connection

from deadletters.alert_queue import alert_deliver_due
from deadletters.models import AlertChannel, DeadLetter
from harness_site.broker import QueueProbe
from runs.engine.claims import run_claim
from runs.engine.executor import run_execute
from runs.engine.store import store
from runs.engine.sweeper import redispatch_after, sweep
from runs.models import Attempt, TaskRun
from tests.support.runs import api_work

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TTL = timedelta(seconds=60)
POLICY = {
    "max_attempts": 3,
    "backoff_base_seconds": 10.0,
    "max_delay_seconds": 300,
    "max_retry_window_seconds": 3600,
    "jitter_min": 0.5,
    "jitter_max": 1.5,
    "lease_ttl_seconds": int(TTL.total_seconds()),
}
ADMIN_EMAIL = "oncall@example.com"
# The broker as the sweeper sees it: nothing queued, nothing held (a message sent and not there is lost).
EMPTY_QUEUE = QueueProbe(queue="celery", depth=0, oldest_age=None, queued_runs=frozenset())


class FakeCelery:
    """The Celery app at the boundary runs.engine.dispatch uses: a producer taken from the pool once per
    batch, and "execute run R" messages sent by name through it. Records the run ids sent."""

    # No queue known: each message declares its queue, Celery's default (runs/engine/dispatch.py).
    amqp = SimpleNamespace(queues={})

    def __init__(self) -> None:
        self.sent: list[int] = []
        self._producer: object | None = None

    @contextmanager
    def producer_or_acquire(self, producer=None):
        self._producer = producer or SimpleNamespace(name="fake producer")
        try:
            yield self._producer
        finally:
            self._producer = None

    def send_task(self, name, args, *, producer=None, **_options):
        assert producer is not None and producer is self._producer, "sent outside the batch's producer"
        self.sent.append(args[0])


@pytest.fixture
def sent(monkeypatch) -> list[int]:
    """Run ids of the "execute run" messages sent to Celery (the boundary, not our storage)."""
    app = FakeCelery()
    monkeypatch.setattr("runs.engine.dispatch.current_app", app)
    return app.sent


@pytest.fixture
def sweep_committed(django_capture_on_commit_callbacks):
    """sweep(), with its on-commit hooks (messages, alerts) run as if its transaction committed."""

    def run(now: datetime, **kwargs):
        kwargs.setdefault("probe", lambda _queue: EMPTY_QUEUE)
        with django_capture_on_commit_callbacks(execute=True):
            return sweep(now=now, **kwargs)

    return run


def make_run(*, skill="harness.noop", params=None, policy=None, biz_key="sweep:2026-03-01", now=T0, **kwargs):
    options = {k: kwargs.pop(k) for k in ("dispatch", "state") if k in kwargs}
    work = api_work(biz_key, skill=skill, params=params, policy={**POLICY, **(policy or {})}, **kwargs)
    return run_claim(work, now=now, **options).run


def held_by(worker: str, **kwargs) -> TaskRun:
    """A run claimed by `worker` at T0 whose worker then went silent (no renewal, no outcome)."""
    run = make_run(dispatch=False, **kwargs)
    assert store().lease_claim(TaskRun.objects.get(id=run.id), worker=worker, now=T0, plain=False) is not None
    return TaskRun.objects.get(id=run.id)


def fresh(run: TaskRun) -> TaskRun:
    return TaskRun.objects.get(id=run.id)


# --- expired leases ----------------------------------------------------------------------


@pytest.mark.django_db
def test_it_leaves_a_live_lease_alone():
    run = held_by("A")
    assert run.lease_expires_at == T0 + TTL
    for now in (T0 + TTL - timedelta(seconds=1), T0 + TTL):
        assert sweep(now=now).expired == 0
    run = fresh(run)
    assert (run.state, run.lease_owner, run.fence) == (TaskRun.State.RUNNING, "A", 1)
    assert Attempt.objects.get(run=run).outcome == Attempt.Outcome.RUNNING


@pytest.mark.django_db
def test_it_takes_back_an_expired_lease_and_schedules_a_retry():
    run = held_by("A")
    now = T0 + TTL + timedelta(seconds=1)
    result = sweep(now=now, rand=lambda: 0.0)

    assert result.expired == 1
    run = fresh(run)
    assert run.state == TaskRun.State.WAITING_RETRY
    assert run.fence == 2  # bumped: A's fence 1 can never commit again
    assert (run.lease_owner, run.lease_expires_at) == ("", None)
    assert run.run_after == now + timedelta(seconds=POLICY["backoff_base_seconds"] ** 1 * POLICY["jitter_min"])
    assert (run.first_failure_at, run.last_error_kind) == (now, "lease_lost")
    assert "A" in run.last_error
    attempt = Attempt.objects.get(run=run)
    assert (attempt.outcome, attempt.finished_at, attempt.error_kind) == ("lease_expired", now, "lease_lost")
    assert not DeadLetter.objects.exists()

    # The retry is an ordinary attempt 2 under a new fence.
    assert run_execute(run_id=run.id, worker="B", clock=lambda: run.run_after).status == "succeeded"
    run = fresh(run)
    assert (run.state, run.attempts, run.fence, run.executed_by) == ("succeeded", 2, 3, "B")


@pytest.mark.django_db
def test_it_dead_letters_an_expired_lease_when_attempts_are_exhausted(settings, mailoutbox, sweep_committed):
    settings.ADMINS = [("On call", ADMIN_EMAIL)]
    AlertChannel.objects.update_or_create(  # installed disabled while ADMINS is unset
        name="On-call email (ADMINS)", defaults={"kind": "email", "min_severity": "urgent", "enabled": True}
    )
    run = held_by("A", policy={"max_attempts": 1})
    now = T0 + TTL + timedelta(seconds=1)

    assert sweep_committed(now).expired == 1
    run = fresh(run)
    assert (run.state, run.finish_at, run.fence) == (TaskRun.State.FAILED, now, 2)
    assert (run.lease_owner, run.lease_expires_at) == ("", None)
    assert Attempt.objects.get(run=run).outcome == Attempt.Outcome.LEASE_EXPIRED
    [ticket] = DeadLetter.objects.filter(run=run)
    assert (ticket.biz_key, ticket.attempts, ticket.error_kind) == (run.biz_key, 1, "lease_lost")
    assert ticket.state == DeadLetter.State.PENDING_MANUAL
    alert_deliver_due(now=now)  # what the alerts worker does (the default email channel: ADMINS)
    assert len(mailoutbox) == 1 and str(run.id) in mailoutbox[0].subject

    assert sweep_committed(now + timedelta(minutes=5)).expired == 0
    assert DeadLetter.objects.filter(run=run).count() == 1
    alert_deliver_due(now=now + timedelta(minutes=5))
    assert len(mailoutbox) == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_sweepers_take_an_expired_lease_back_once():
    run = held_by("A", policy={"max_attempts": 1})
    now = T0 + TTL + timedelta(seconds=1)
    sweepers = 4
    barrier = threading.Barrier(sweepers)
    results, errors = [], []

    def body() -> None:
        try:
            connection.ensure_connection()
            barrier.wait(timeout=30)
            results.append(sweep(now=now))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=body) for _ in range(sweepers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert sum(r.expired for r in results) == 1
    run = fresh(run)
    assert (run.state, run.fence) == (TaskRun.State.FAILED, 2)
    assert DeadLetter.objects.filter(run=run).count() == 1


# --- dispatching due runs ----------------------------------------------------------------


@pytest.mark.django_db
def test_it_dispatches_a_due_retry_once_and_not_again_within_the_grace(sent, sweep_committed):
    run = make_run(skill="harness.fail", params={"error_kind": "timeout"})
    assert run_execute(run_id=run.id, worker="w1", clock=lambda: T0).status == "retry"
    due = fresh(run).run_after
    assert due > T0

    assert sweep_committed(due - timedelta(milliseconds=1)).dispatched == 0
    assert sent == []
    assert sweep_committed(due).dispatched == 1
    assert sent == [run.id]
    assert fresh(run).dispatched_at == due

    for later in (due + timedelta(seconds=1), due + redispatch_after()):
        assert sweep_committed(later).dispatched == 0
    assert sent == [run.id]

    # No worker took it for longer than the grace: the message may be lost, so send it again.
    again = due + redispatch_after() + timedelta(seconds=1)
    assert sweep_committed(again).dispatched == 1
    assert sent == [run.id, run.id]
    assert fresh(run).dispatched_at == again


@pytest.mark.django_db
def test_it_dispatches_a_pending_run_that_was_never_dispatched(sent, sweep_committed):
    run = make_run(dispatch=False)
    assert fresh(run).dispatched_at is None

    assert sweep_committed(T0).dispatched == 1
    assert sent == [run.id]
    assert fresh(run).dispatched_at == T0
    assert sweep_committed(T0 + timedelta(seconds=1)).dispatched == 0
    assert sent == [run.id]


@pytest.mark.django_db
def test_it_dispatches_a_pending_run_only_once_it_is_due(sent, sweep_committed):
    run = make_run(run_after=T0 + timedelta(minutes=5))
    assert fresh(run).dispatched_at is None  # not due at claim time, so no message then

    assert sweep_committed(T0 + timedelta(minutes=4)).dispatched == 0
    assert sweep_committed(T0 + timedelta(minutes=5)).dispatched == 1
    assert sent == [run.id]


@pytest.mark.django_db
def test_it_does_not_redispatch_a_run_dispatched_at_claim_time_within_the_grace(sent, sweep_committed):
    run = make_run()  # due at once: the claim marked it dispatched
    assert fresh(run).dispatched_at == T0
    assert sweep_committed(T0 + redispatch_after()).dispatched == 0
    assert sweep_committed(T0 + redispatch_after() + timedelta(seconds=1)).dispatched == 1
    assert sent == [run.id]


@pytest.mark.django_db
def test_the_redispatch_delay_is_a_setting(sent, sweep_committed, settings):
    settings.HARNESS = {**settings.HARNESS, "REDISPATCH_SECONDS": 3}
    run = make_run()
    assert sweep_committed(T0 + timedelta(seconds=3)).dispatched == 0
    assert sweep_committed(T0 + timedelta(seconds=4)).dispatched == 1
    assert sent == [run.id]


@pytest.mark.django_db
def test_it_never_dispatches_running_or_finished_runs(sent, sweep_committed):
    held = held_by("A", biz_key="running")
    done = make_run(biz_key="done", dispatch=False)
    assert run_execute(run_id=done.id, worker="w1", clock=lambda: T0).status == "succeeded"

    assert sweep_committed(T0 + timedelta(seconds=30)).dispatched == 0
    assert sent == []
    assert fresh(held).dispatched_at is None


# --- lost messages: only a message neither queued nor held is sent again ----------------------


def dispatched_long_ago(biz_key: str) -> TaskRun:
    """A pending run whose message was sent at T0 (and that no worker has started)."""
    return make_run(biz_key=biz_key)


@pytest.mark.django_db
def test_it_never_resends_a_message_that_is_still_queued_however_old(sent, sweep_committed):
    queued = dispatched_long_ago("queued")
    lost = dispatched_long_ago("lost")
    probe = QueueProbe(queue="celery", depth=1, oldest_age=3600, queued_runs=frozenset({queued.id}))

    result = sweep_committed(T0 + timedelta(hours=1), probe=lambda _queue: probe)
    assert (result.dispatched, result.resent) == (1, 1)
    assert sent == [lost.id]
    assert (fresh(queued).dispatches, fresh(lost).dispatches) == (1, 2)


@pytest.mark.django_db
def test_on_redis_a_run_dispatched_no_earlier_than_the_old_end_of_the_queue_counts_as_queued(sent, sweep_committed):
    early = dispatched_long_ago("early")
    later = make_run(biz_key="later", now=T0 + timedelta(seconds=5))
    probe = QueueProbe(
        queue="celery", depth=40, oldest_age=100, oldest_dispatched_at=(T0 + timedelta(seconds=5)).timestamp()
    )

    assert sweep_committed(T0 + timedelta(minutes=5), probe=lambda _queue: probe).resent == 1
    assert sent == [early.id]  # `later` may still be queued: not sent again
    assert fresh(later).dispatches == 1


@pytest.mark.django_db
def test_it_never_resends_a_message_a_worker_holds_while_the_worker_responds(sent, sweep_committed):
    from runs.models import WorkerHeartbeat

    held = dispatched_long_ago("held")
    just_received = dispatched_long_ago("just-received")
    now = T0 + timedelta(minutes=5)
    WorkerHeartbeat.objects.create(
        name="w1@h:1", hostname="w1@h", pid=1, started_at=T0, beat_at=now, progress_at=now, held=[held.id]
    )
    # The broker says a consumer took `just_received` 1 s ago: no heartbeat has had time to list it.
    probe = QueueProbe(queue="celery", depth=0, oldest_age=None, queued_runs=frozenset(), held={just_received.id: 1.0})

    assert sweep_committed(now, probe=lambda _queue: probe).resent == 0
    assert sent == []

    # The worker goes silent (frozen, killed): what it held is lost, and sent again.
    later = now + timedelta(seconds=30)
    stale = QueueProbe(queue="celery", depth=0, oldest_age=None, queued_runs=frozenset(), held={just_received.id: 31.0})
    assert sweep_committed(later, probe=lambda _queue: stale).resent == 2
    assert sorted(sent) == sorted([held.id, just_received.id])


@pytest.mark.django_db
def test_it_resends_nothing_when_it_cannot_look_into_the_queue(sent, sweep_committed):
    dispatched_long_ago("unknown")
    never = make_run(biz_key="never", dispatch=False)
    result = sweep_committed(T0 + timedelta(hours=1), probe=lambda _queue: None)
    assert (result.dispatched, result.resent) == (1, 0)
    assert sent == [never.id]  # a run with no message at all is still sent
