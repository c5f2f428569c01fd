"""The start window at execution time: a scheduled run that could not start within its rule's window
after its slot (workers backlogged, deferred too long) is cancelled instead of running late."""

from datetime import datetime

from django.utils.dateparse import parse_datetime

from runs.models import TaskRun


def start_window_passed(*, run_id: int, now: datetime) -> bool:
    """Cancel a first attempt whose payload["start_by"] has passed; True if it was cancelled.

    Only first attempts: a retry is the same unit of work already started in time. The slot keeps
    its (cancelled) run, so it stays accounted for (invariant 3); explain shows the reason.
    """
    row = TaskRun.objects.filter(id=run_id).values_list("state", "attempts", "payload__start_by").first()
    if row is None or row[0] != TaskRun.State.PENDING or row[1] != 0 or not row[2]:
        return False
    start_by = parse_datetime(row[2]) if isinstance(row[2], str) else None
    if start_by is None or now <= start_by:
        return False
    # Compare-and-set: 0 rows means a worker claimed it (in time) or it changed meanwhile.
    return bool(
        TaskRun.objects.filter(id=run_id, state=TaskRun.State.PENDING, attempts=0).update(
            state=TaskRun.State.CANCELLED,
            finish_at=now,
            last_error=f"start window passed: it had to start by {start_by.isoformat()}",
            last_error_kind="start_window",
        )
    )
