"""A run whose worker cannot reach the database is handed back with one log line, never a traceback
from Celery's trace: the row stays as it was, for the sweeper to send again."""

import logging

import pytest
from django.db import connection
from django.utils import timezone

from runs.claims import run_claim
from runs.jobs import DB_UNAVAILABLE, run_execute_task
from runs.models import TaskRun
from tests.support.runs import api_work

pytestmark = pytest.mark.django_db(transaction=True)


def _unreachable() -> dict:
    """Point this thread's connection at a database that refuses it; returns what to restore."""
    saved = dict(connection.settings_dict)
    if connection.vendor == "postgresql":
        connection.settings_dict["PORT"] = 1  # nothing listens there: connection refused
    else:
        connection.settings_dict["NAME"] = "/nonexistent/harness/unreachable.sqlite3"
    connection.close()
    return saved


def test_a_refused_connection_hands_the_run_back_with_one_line(caplog):
    run = run_claim(api_work("handback:1"), now=timezone.now(), dispatch=False).run
    saved = _unreachable()
    try:
        with caplog.at_level(logging.WARNING, logger="harness.executor"):
            assert run_execute_task.run(run.id) == DB_UNAVAILABLE
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
    lines = [r.getMessage() for r in caplog.records if r.name == "harness.executor"]
    assert len(lines) == 1 and lines[0].startswith(f"run {run.id} handed back: database unavailable"), lines
    assert all(r.exc_info is None for r in caplog.records)
    row = TaskRun.objects.get(id=run.id)
    assert (row.state, row.attempts, row.fence) == (TaskRun.State.PENDING, 0, 0)  # untouched: sent again later
