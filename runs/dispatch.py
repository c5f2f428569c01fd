"""Sending "execute run R" messages. A message is a hint; the database row is the truth."""

from datetime import datetime

from celery import current_app
from django.db import transaction

from runs.models import TaskRun

EXECUTE_TASK = "runs.execute"


def run_dispatch_on_commit(*, run_ids: list[int], now: datetime) -> None:
    """Mark the runs dispatched and enqueue them once the surrounding transaction commits,
    so a worker never receives a run it cannot see yet. Sent by task name (runs/jobs.py)."""
    if not run_ids:
        return
    TaskRun.objects.filter(id__in=run_ids).update(dispatched_at=now)
    run_send_on_commit(run_ids=run_ids)


def run_send_on_commit(*, run_ids: list[int]) -> None:
    """Enqueue runs whose dispatched_at the caller already wrote (a claim sets it in its INSERT)."""
    if not run_ids:
        return

    def send() -> None:
        for run_id in run_ids:
            current_app.send_task(EXECUTE_TASK, args=[run_id])

    transaction.on_commit(send)
