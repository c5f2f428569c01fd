"""The previous release keeps working against this release's schema (N-1, invariant 9), and this
release's worker refuses a schema that lacks its migrations.

The previous release is the commit recorded in harness_site/release.py (docs/upgrading.md says how
it is chosen); the test checks it out in a detached git worktree and starts a worker from it, with
this venv and this environment."""

import pytest
from django.db import connection

from harness_site.worker_watch import EXIT_UNMIGRATED
from tests.support.upgrade import (  # noqa: F401 - previous_checkout: a fixture
    claim_batch,
    migrate_forward,
    migrate_to_previous_release,
    previous_checkout,
    wait_succeeded_once,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the production database: the PostgreSQL pass"),
]


def test_the_previous_release_s_worker_keeps_executing_runs_while_this_release_migrates(harness, previous_checkout):  # noqa: F811
    try:
        undone = migrate_to_previous_release(harness)
        assert undone, "this release adds no migration: nothing to apply under the previous release's worker"
        harness.worker("previous", concurrency=2, cwd=previous_checkout)
        wait_succeeded_once(claim_batch("n1:before", 6))
        in_flight = claim_batch("n1:during", 8, seconds=0.5)
        migrate_forward(harness)  # this release's migrations, while the previous release's worker works
        wait_succeeded_once(in_flight + claim_batch("n1:after", 8))
    finally:
        migrate_forward(harness)


def test_this_release_s_worker_refuses_to_start_on_the_schema_before_its_migrations(harness):
    try:
        migrate_to_previous_release(harness)
        worker = harness.worker("unmigrated")
        assert worker.popen.wait(timeout=120) == EXIT_UNMIGRATED
        worker.stopped = True
        lines = [line for line in worker.log().splitlines() if "worker not started" in line]
        assert len(lines) == 1 and "run manage.py migrate" in lines[0], worker.log()[-2000:]
    finally:
        migrate_forward(harness)
