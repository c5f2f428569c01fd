"""The lease renewer keeps a healthy worker's lease through a dropped database connection (invariant 2).

Reported: one dropped connection killed the renewer thread, the lease expired, the sweeper handed the
run to another worker and the same run executed twice at once. Here the server closes every
connection of the running worker (pg_terminate_backend) in the middle of a run; the run must still
execute exactly once, under one attempt, with its lease renewed throughout.
"""

import time

import pytest
from django.db import connection
from django.utils import timezone

from runs.models import Attempt, TaskRun
from tasks.models import DiagnosticRecord
from tests.e2e.helpers import next_whole_second, recording_rule, wait_finished, wait_run_of, wait_ticking

pytestmark = [pytest.mark.e2e, pytest.mark.backend]


def _drop_other_connections() -> int:
    """Close every server connection to the test database but this one: the worker's, the beat's."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="drops server connections: PostgreSQL only")
def test_a_dropped_connection_mid_run_neither_loses_the_lease_nor_runs_the_run_twice(harness):
    harness.worker("w1", concurrency=1)
    harness.worker("w2", concurrency=1)  # a second worker, ready to take the run if the lease were lost
    harness.beat()
    wait_ticking()
    # Renewed every second (ttl / 3); the run works for 8 s, so it outlives its first lease twice over.
    rule = recording_rule(
        "renew-through-a-drop",
        kind="once",
        run_at=next_whole_second(timezone.now(), plus=1),
        params={"seconds": 8},
        lease_ttl_seconds=3,
        max_attempts=3,
        backoff_base_seconds=1,
        max_delay_seconds=2,
    )
    run = wait_run_of(rule, state="running")
    time.sleep(1.5)
    dropped = 0
    for _ in range(3):  # drop them again as they come back, for about two seconds
        dropped += _drop_other_connections()
        time.sleep(0.7)
    assert dropped > 0, "no worker connection was dropped; the test proves nothing"

    run = wait_finished(run)
    attempts = list(Attempt.objects.filter(run=run).order_by("number"))
    records = list(DiagnosticRecord.objects.filter(run_id=run.id))
    print(f"\n[e2e renewal] dropped {dropped} connections; attempts {[(a.number, a.outcome) for a in attempts]}")
    assert run.state == TaskRun.State.SUCCEEDED, run.last_error
    assert [a.outcome for a in attempts] == [Attempt.Outcome.SUCCEEDED]
    assert run.attempts == 1
    assert len(records) == 1 and records[0].fence == run.fence
    assert not harness.crashed()
