"""A run whose worker cannot reach the database is handed back with one log line, never a traceback
from Celery's trace: the row stays as it was, for the sweeper to send again."""

import logging
from datetime import timedelta

import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from deadletters.models import DeadLetter
from runs.engine.claims import run_claim
from runs.engine.sweeper import sweep
from runs.jobs import DB_UNAVAILABLE, run_execute_task
from runs.models import TaskRun
from tasks.skills.sdk import ErrorKind, SkillContext, registry
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


DROPPED_SKILL = "tests.database_dropped_mid_skill"


def _database_dropped(ctx: SkillContext) -> dict:
    """The database restarted while the skill read its checkpoint (the server ended the session)."""
    raise OperationalError("terminating connection due to administrator command")


if DROPPED_SKILL not in registry:
    registry.register(DROPPED_SKILL, _database_dropped)


def test_a_database_dropped_inside_the_skill_hands_the_run_back_for_a_retry_not_a_dead_letter():
    """The harness's own database failing is not the skill failing: the attempt is handed back like
    a lost worker's (its lease runs out, the sweeper retries it), never failed for good as an
    unclassified error (a PostgreSQL restart dead-lettered 1 of 500 agent runs so)."""
    policy = {"lease_ttl_seconds": 5, "max_attempts": 3, "backoff_base_seconds": 1.0}
    run = run_claim(api_work("handback:dropped", skill=DROPPED_SKILL, policy=policy), now=timezone.now()).run

    assert run_execute_task.run(run.id) == DB_UNAVAILABLE

    row = TaskRun.objects.get(id=run.id)
    assert (row.state, row.attempts) == (TaskRun.State.RUNNING, 1)  # its lease stands until it runs out
    assert not DeadLetter.objects.filter(run_id=run.id).exists()
    sweep(now=row.lease_expires_at + timedelta(seconds=1))
    row = TaskRun.objects.get(id=run.id)
    assert (row.state, row.last_error_kind) == (TaskRun.State.WAITING_RETRY, ErrorKind.LEASE_LOST)
