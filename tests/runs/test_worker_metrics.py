# ruff: noqa: F811  (pytest fixtures imported from tests.support.desk are redefined as arguments)
"""Runs in flight per worker and its connection pool (in use, waiting, time waited): from the worker's
heartbeat to /metrics (read back with prometheus_client's parser) and the dashboard."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.urls import reverse
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runs.desk.metrics import metrics_registry
from runs.engine.store import database
from runs.engine.workers import WorkerReport, pool_report, worker_beat
from tests.support.desk import oncall, oncall_client  # noqa: F401

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# psycopg_pool's get_stats() of a pool of 4 with 3 lent out, 2 threads waiting; counters since start
# (requests_errors never counted yet, so absent).
STATS = {
    "pool_min": 1,
    "pool_max": 4,
    "pool_size": 4,
    "pool_available": 1,
    "requests_waiting": 2,
    "requests_num": 120,
    "requests_queued": 9,
    "requests_wait_ms": 4500,
    "usage_ms": 99,
}


def beat(name: str, *, pool: str, active: int, db_pool=None, at: datetime = NOW) -> None:
    report = WorkerReport(
        name=name,
        hostname=name.split(":")[0],
        pid=int(name.split(":")[1]),
        queues="agents" if pool == "thread" else "celery,harness_control",
        pool=pool,
        concurrency=16 if pool == "thread" else 2,
        started_at=at,
        progress_at=at,
        accepted=active,
        active=active,
        waiting=0,
        held=[],
        stall_seconds=60,
        db_pool=db_pool,
    )
    worker_beat(report, now=at)


def scrape() -> dict[str, dict[str, float]]:
    """{sample name: {worker: value}} as Prometheus reads the page."""
    text = generate_latest(metrics_registry(lambda: NOW)).decode()
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "worker" in s.labels:
                out.setdefault(s.name, {})[s.labels["worker"]] = s.value
    return out


def test_metrics_show_runs_in_flight_per_worker_and_a_threads_workers_pool():
    beat("agents@a:10", pool="thread", active=12, db_pool=pool_report(STATS))
    beat("worker@a:11", pool="prefork", active=2)
    beat("gone@b:12", pool="thread", active=5, db_pool=pool_report(STATS), at=NOW - timedelta(minutes=1))

    m = scrape()

    # A worker silent for a minute says nothing about now: it is not shown.
    assert m["harness_worker_runs_in_flight"] == {"agents@a:10": 12, "worker@a:11": 2}
    assert m["harness_worker_concurrency"] == {"agents@a:10": 16, "worker@a:11": 2}
    # Only the worker whose runs share a pool has pool figures (prefork's children each have their own).
    assert m["harness_worker_db_connections_in_use"] == {"agents@a:10": 3}
    assert m["harness_worker_db_connections_max"] == {"agents@a:10": 4}
    assert m["harness_worker_db_connection_waiters"] == {"agents@a:10": 2}
    assert m["harness_worker_db_connection_wait_seconds_total"] == {"agents@a:10": 4.5}
    assert m["harness_worker_db_connection_requests_total"] == {"agents@a:10": 120}


def test_a_heartbeat_keeps_what_it_needs_of_the_pools_stats():
    assert pool_report(None) is None
    kept = pool_report({"pool_max": 2, "pool_size": 2, "pool_available": 2})
    assert kept is not None
    assert kept["in_use"] == 0 and kept["requests_wait_ms"] == 0  # counters absent until counted
    assert "usage_ms" not in (pool_report(STATS) or {})


@pytest.mark.django_db(transaction=True)
def test_the_store_reads_a_real_pools_stats_and_none_without_a_pool():
    if connection.vendor != "postgresql":
        assert database.pool_stats() is None  # SQLite: one connection per thread, no pool
        return
    assert database.pool_stats() is None  # no HARNESS_DB_POOL_MAX in the tests
    original = connection.settings_dict
    connection.close()
    # A fixed size, filled before the look: a pool that grows counts a connection being opened too.
    options = {**original.get("OPTIONS", {}), "pool": {"min_size": 2, "max_size": 2, "timeout": 10}}
    connection.settings_dict = {**original, "CONN_MAX_AGE": 0, "OPTIONS": options}
    try:
        connection.pool.open(wait=True, timeout=10)  # both connections ready before the look
        connection.ensure_connection()  # this thread holds one
        held = pool_report(database.pool_stats())
        connection.close()  # given back
        returned = pool_report(database.pool_stats())
    finally:
        connection.close()
        connection.close_pool()
        connection.settings_dict = original
    assert held is not None and returned is not None
    assert (held["pool_max"], held["in_use"]) == (2, 1)
    assert returned["in_use"] == 0 and returned["requests_num"] >= 1


def test_the_dashboard_shows_a_workers_pool(oncall_client):
    from django.utils import timezone

    now = timezone.now()
    beat("agents@a:10", pool="thread", active=12, db_pool=pool_report(STATS), at=now)
    beat("worker@a:11", pool="prefork", active=2, at=now)

    page = oncall_client.get(reverse("harness-dashboard")).content.decode()

    assert "connections: 3 of 4 in use, 2 waiting; 4.5s waited in all" in page
    assert page.count('class="db-pool"') == 1  # the prefork worker has no pool line
