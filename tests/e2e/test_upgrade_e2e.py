"""Upgrade while it runs (invariant 9): a release's additive migrations never stop a running worker.
A real worker executes runs while another session changes the schema the way the next release's
migrations would; every run succeeds exactly once (one attempt, one side effect)."""

import psycopg
import pytest
from django.db import connection

from tests.support.upgrade import claim_batch, wait_succeeded_once

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements are PostgreSQL's"),
]

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
