"""A database and a broker outage, lived through by two real workers: each is recorded, once over, as
exactly one incident of its kind whose span is the outage (seen from the workers' heartbeats and
queue looks), paged once. The PostgreSQL and Redis servers are the test's own, stopped by it."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from tests.e2e.helpers import private_env
from tests.support.processes import wait_for
from tests.support.servers import PG_BIN

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.backend,
    pytest.mark.one_pass("postgresql"),  # Redis: only the PostgreSQL pass has it
    pytest.mark.skipif(PG_BIN is None, reason="needs PostgreSQL's server binaries"),
]

HEARTBEAT = 1.0  # seconds: an outage is two heartbeats of failures
DOWN = 6.0  # seconds each server is down
SLACK = timedelta(seconds=3)  # a heartbeat, a probe's timeout and a loaded machine


def _incidents(pg, kind: str):
    return pg.rows("SELECT id, started_at, ended_at FROM runs_incident WHERE kind = %s", kind)


def _seen_by_both(procs, kind: str) -> bool:
    return all(f"{kind} unreachable for" in p.log() for p in procs)


def test_two_workers_record_one_incident_per_database_and_broker_outage(harness, servers, tmp_path):
    pg, rd = servers
    env = private_env(harness, pg, rd, HARNESS_WORKER_HEARTBEAT_SECONDS=str(HEARTBEAT))
    procs = [harness.worker("w1", concurrency=1, extra_env=env), harness.worker("w2", concurrency=1, extra_env=env)]
    wait_for(
        lambda: pg.rows("SELECT count(*) FROM runs_workerheartbeat WHERE queues <> ''")[0][0] == 2,
        timeout=90,
        what="both workers reporting",
    )
    connection.close()  # the test's own database is not the workers': nothing of it is held open

    outages = {}
    for kind, server in (("database", pg), ("broker", rd)):
        time.sleep(3 * HEARTBEAT)  # a few good heartbeats and looks first
        down_at = datetime.now(UTC)
        server.restart(down=DOWN)
        up_at = datetime.now(UTC)
        wait_for(lambda kind=kind: _seen_by_both(procs, kind), timeout=60, what=f"both workers recording {kind}")
        outages[kind] = (down_at, up_at)

    for kind, (down_at, up_at) in outages.items():
        [(incident_id, started_at, ended_at)] = _incidents(pg, kind)  # one, not one per worker
        print(
            f"\n[e2e outages] {kind}: down {down_at:%H:%M:%S.%f} up {up_at:%H:%M:%S.%f}; "
            f"incident {started_at:%H:%M:%S.%f} to {ended_at:%H:%M:%S.%f}"
        )
        # A beat's instant is read before its write or probe: the look that first fails may have begun
        # up to one heartbeat before the server went down.
        assert down_at - timedelta(seconds=HEARTBEAT) <= started_at <= down_at + SLACK, (kind, down_at, started_at)
        assert up_at - SLACK <= ended_at <= up_at + SLACK, (kind, up_at, ended_at)
        assert (ended_at - started_at).total_seconds() >= DOWN - 1
        pages = pg.rows(
            "SELECT count(*) FROM deadletters_alert WHERE channel_id IS NULL AND kind = 'incident_closed' "
            "AND (payload->>'incident_id')::int = %s",
            incident_id,
        )[0][0]
        assert pages == 1, (kind, pages)
    assert [p.name for p in procs if p.popen.poll() is None] == ["w1", "w2"]
