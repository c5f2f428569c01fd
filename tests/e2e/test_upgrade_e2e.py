"""Upgrade while it runs (invariant 9): a release's additive migrations never stop a running worker.
A real worker executes runs while another session changes the schema the way the next release's
migrations would; every run succeeds exactly once (one attempt, one side effect)."""

from collections import Counter

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from runs.claims import run_claim
from runs.models import Attempt, TaskRun
from tasks.models import DiagnosticRecord
from tests.support.processes import wait_for
from tests.support.runs import api_work

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements are PostgreSQL's"),
]

RUN_TIMEOUT = 120
# What the next release's expand migrations may do, run by another session while the worker works.
EXPAND = [
    "ALTER TABLE runs_taskrun ADD COLUMN upgrade_probe text NULL",
    "ALTER TABLE runs_runstep ADD COLUMN upgrade_probe text NULL",
    "ALTER TABLE tasks_agent ADD COLUMN upgrade_probe text NULL",
    "CREATE TABLE upgrade_probe_table (id bigserial PRIMARY KEY, note text NOT NULL DEFAULT '')",
    "CREATE INDEX CONCURRENTLY upgrade_probe_idx ON runs_taskrun (created_at, id)",
]
CONTRACT = [
    "DROP INDEX CONCURRENTLY IF EXISTS upgrade_probe_idx",
    "DROP TABLE IF EXISTS upgrade_probe_table",
    "ALTER TABLE tasks_agent DROP COLUMN IF EXISTS upgrade_probe",
    "ALTER TABLE runs_runstep DROP COLUMN IF EXISTS upgrade_probe",
    "ALTER TABLE runs_taskrun DROP COLUMN IF EXISTS upgrade_probe",
]


def other_session() -> psycopg.Connection:
    return psycopg.connect(**connection.get_connection_params(), autocommit=True)


def claim_batch(prefix: str, n: int, *, seconds: float = 0.3) -> list[int]:
    """n runs of harness.record (a write step: one DiagnosticRecord per execution), sent to the worker."""
    works = [api_work(f"{prefix}:{i}", skill="harness.record", params={"seconds": seconds}) for i in range(n)]
    return [run_claim(work, now=timezone.now()).run.id for work in works]


def wait_succeeded_once(run_ids: list[int], *, timeout: float = RUN_TIMEOUT) -> None:
    """Every run succeeded, on its first attempt, and its side effect happened once."""

    def done():
        return TaskRun.objects.filter(id__in=run_ids, state__in=TaskRun.FINISHED).count() == len(run_ids)

    try:
        wait_for(done, timeout=timeout, what=f"{len(run_ids)} runs to finish")
    finally:
        rows = list(TaskRun.objects.filter(id__in=run_ids).values_list("id", "state", "attempts", "last_error"))
        states = Counter(r[1] for r in rows)
        not_once = [r for r in rows if r[1] != TaskRun.State.SUCCEEDED or r[2] != 1]
        assert not not_once, f"not succeeded exactly once: {not_once[:5]} (states {states})"
    assert Attempt.objects.filter(run_id__in=run_ids).count() == len(run_ids)
    records = list(DiagnosticRecord.objects.filter(run_id__in=run_ids).values_list("run_id", flat=True))
    assert sorted(records) == sorted(run_ids)


def test_a_worker_keeps_executing_runs_while_columns_a_table_and_an_index_are_added(harness):
    worker = harness.worker("w1", concurrency=2)
    # The worker's connections prepare their statements on the schema as it is.
    wait_succeeded_once(claim_batch("upgrade:before", 6))
    ddl = other_session()
    try:
        batches = []
        for i, statement in enumerate(EXPAND):
            batches += claim_batch(f"upgrade:during{i}", 4)  # in flight while the schema changes
            ddl.execute(statement)
        batches += claim_batch("upgrade:after", 8)
        wait_succeeded_once(batches)
    finally:
        for statement in CONTRACT:
            ddl.execute(statement)
        ddl.close()
    assert "handed back" not in worker.log()
    assert "unexpected" not in worker.log()
