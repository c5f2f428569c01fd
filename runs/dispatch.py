"""Sending "execute run R" messages. A message is a hint; the database row is the truth."""

from datetime import datetime

from celery import current_app
from django.db import transaction

from harness_site import tracing
from runs.models import TaskRun

EXECUTE_TASK = "runs.execute"


def run_dispatch_on_commit(*, run_ids: list[int], now: datetime) -> None:
    """Mark the runs dispatched and enqueue them once the surrounding transaction commits,
    so a worker never receives a run it cannot see yet. Sent by task name (runs/jobs.py)."""
    if not run_ids:
        return
    TaskRun.objects.filter(id__in=run_ids).update(dispatched_at=now)
    # The trace of the trigger (or the sweep) sending them, taken now: on commit it has ended.
    trace = {"headers": headers} if (headers := tracing.outgoing_headers()) else {}

    def send() -> None:
        for run_id in run_ids:
            current_app.send_task(EXECUTE_TASK, args=[run_id], **trace)

    transaction.on_commit(send)
