"""Sending "execute run R" messages. A message is a hint; the database row is the truth."""

from datetime import datetime

from celery import current_app
from django.db import transaction

from harness_site import tracing
from harness_site.broker import DISPATCHED_HEADER, RUN_HEADER, publish_in_one_round_trip, queue_declare_list
from runs.engine.store import store
from tasks.skills.sdk import DEFAULT_QUEUE

EXECUTE_TASK = "runs.execute"


def run_dispatch_on_commit(*, run_ids: list[int], now: datetime) -> None:
    """Mark the runs dispatched and enqueue them once the surrounding transaction commits,
    so a worker never receives a run it cannot see yet. Sent by task name (runs/jobs.py).

    Each message is in its run's own trace, not the sender's (a sweep, a pool release): whatever
    sends it, the worker's lines about the run belong to the run's trace."""
    if not run_ids:
        return
    rows = store().runs_mark_dispatched(run_ids, now=now)
    traces = {run_id: trace for run_id, trace, _queue in rows}
    queues = {run_id: queue for run_id, _trace, queue in rows}
    run_send_on_commit(run_ids=run_ids, dispatched_at=now, traces=traces, queues=queues)


def run_send_on_commit(
    *,
    run_ids: list[int],
    dispatched_at: datetime,
    traces: dict[int, str] | None = None,
    queues: dict[int, str] | None = None,
) -> None:
    """Enqueue runs whose dispatched_at and dispatch count the caller already wrote (a claim sets
    them in its INSERT). `traces`: each run's own trace, when the caller is not inside it (a batch,
    a sweep). `queues`: each run's queue (TaskRun.queue); the default queue for a run not in it."""
    if not run_ids:
        return
    # The run id and its dispatched_at in headers too: the sweeper reads the queue without decoding
    # bodies, and tells a queued message from a lost one (runs/engine/sweeper.py). The trace of the trigger
    # (or the sweep) sending them is taken now: on commit it has ended.
    headers = {DISPATCHED_HEADER: dispatched_at.timestamp(), **tracing.outgoing_headers()}
    per_run = {run_id: tracing.headers_for(trace) for run_id, trace in (traces or {}).items() if trace}
    queues = queues or {}

    def send() -> None:
        # One producer (one broker connection) for the whole batch, taken once, and on Redis one
        # round trip: a tick's thousand messages cost what a few did.
        app = current_app
        with app.producer_or_acquire() as producer, publish_in_one_round_trip(producer):
            for run_id in run_ids:
                queue = queues.get(run_id) or DEFAULT_QUEUE
                app.send_task(
                    EXECUTE_TASK,
                    args=[run_id],
                    # Celery would compute both with its safe repr, a sixth of a send's CPU.
                    argsrepr=f"[{run_id}]",
                    kwargsrepr="{}",
                    headers={**headers, **per_run.get(run_id, {}), RUN_HEADER: run_id},
                    queue=queue,
                    declare=queue_declare_list(app, producer, queue),
                    producer=producer,
                )

    transaction.on_commit(send)
