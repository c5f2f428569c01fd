"""Sending "execute run R" messages. A message is a hint; the database row is the truth."""

from datetime import datetime

from django.db import transaction

from runs.models import TaskRun


def run_dispatch_on_commit(*, run_ids: list[int], now: datetime) -> None:
    """Mark the runs dispatched and enqueue them once the surrounding transaction commits,
    so a worker never receives a run it cannot see yet."""
    if not run_ids:
        return
    TaskRun.objects.filter(id__in=run_ids).update(dispatched_at=now)

    def send() -> None:
        from runs.jobs import run_execute_task

        for run_id in run_ids:
            run_execute_task.delay(run_id)

    transaction.on_commit(send)
