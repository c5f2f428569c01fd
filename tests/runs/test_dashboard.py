# ruff: noqa: F811  (pytest fixtures imported from tests.support.desk are redefined as arguments)
"""The dashboard: right numbers on a small data set, a fixed number of queries on 20,000 runs.

The same number of queries with 10x the runs is tests/runs/test_query_counts.py; the figures at a
million runs are the benchmark's (tests/bench/goals.py --only 4), not a test's."""

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from runs.desk.dashboard import dashboard_build, percentile
from runs.engine.rollup import BIN_RATIO, BUCKETS, FILL_PER_SWEEP, rollup_refresh
from runs.models import Decision, SchedulerTick, TaskRun
from tests.support.desk import daily_report, make_failed_run, viewer, viewer_client  # noqa: F401

pytestmark = pytest.mark.django_db
BIG = 20_000
# Session + user, then the dashboard's own aggregates (see runs/desk/dashboard.py): a constant.
# 16 since flow control: two aggregates over pool slots and waiters (runs/desk/selectors.flow_saturation).
# 20: the desk reads each user's display zone (one indexed row) and counts undeliverable urgent alerts
# (the channel list and one count; deadletters/alert_health.py); worker heartbeats are one read of the
# workers' reports (runs/engine/workers.worker_health).
# 21: the slots decided without a run in 24 h, by reason (runs/desk/status.decisions_by_reason).
# 22: the recent incidents of the harness itself.
MAX_QUERIES = 22


def _runs(n: int, *, now, spread: timedelta) -> list[TaskRun]:
    states = ["succeeded"] * 7 + ["failed", "pending", "waiting_retry"]
    out = []
    for i in range(n):
        trigger = now - spread * (i / n)
        state = states[i % len(states)]
        started = trigger + timedelta(seconds=1 + i % 5) if state in ("succeeded", "failed") else None
        out.append(
            TaskRun(
                biz_key=f"bulk:{i}",
                skill="harness.noop",
                source="scheduler",
                trigger_at=trigger,
                run_after=trigger,
                state=state,
                start_at=started,
                finish_at=started + timedelta(seconds=2) if started else None,
                dedupe_hits=1 if i % 4 == 0 else 0,
                attempts=1 if started else 0,
            )
        )
    return out


def test_it_computes_the_dashboard_numbers():
    now = timezone.now()
    TaskRun.objects.bulk_create(_runs(100, now=now, spread=timedelta(hours=20)))
    TaskRun.objects.bulk_create(_runs(5, now=now - timedelta(days=3), spread=timedelta(hours=1)), ignore_conflicts=True)
    make_failed_run("dl:1", now=now)
    SchedulerTick.objects.create(name="scheduler", last_tick_at=now - timedelta(seconds=3))
    daily_report()
    d = dashboard_build(now=now)
    assert d.runs_24h == 101
    assert d.states == {"succeeded": 70, "failed": 11, "pending": 10, "waiting_retry": 10}
    assert sum(h["total"] for h in d.hours) == 101 and len(d.hours) in (24, 25)
    assert d.dedupe_hits_24h == 25 and round(d.dedupe_share, 4) == round(25 / 126, 4)
    assert (d.queue_due, d.queue_later, d.running) == (20, 0, 0)
    # Percentiles from the rollup's histograms: within one 5 % bin of percentile_cont (runs/engine/rollup.py).
    assert d.queue_delay["p50"] == pytest.approx(3.0, abs=1.0) and d.queue_delay["p99"] <= 5.0 * BIN_RATIO
    assert 3.0 <= d.latency["p50"] <= 7.0
    assert (d.deadletters_new_today, d.deadletters_open) == (1, 1)
    assert d.duplicate_biz_keys == 0
    assert d.scheduler["last_tick_age_seconds"] == pytest.approx(3.0)
    assert [r["name"] for r in d.next_fires] == ["daily-report"]


def test_it_counts_missed_and_decided_slots_of_the_last_24_hours(viewer_client):
    now = timezone.now()
    rule = daily_report()
    for hours, reason in ((1, "missed"), (2, "missed"), (3, "catchup_capped"), (4, "calendar"), (30, "missed")):
        Decision.objects.create(
            rule=rule, slot=now - timedelta(hours=hours), reason=reason, created_at=now - timedelta(hours=hours)
        )
    d = dashboard_build(now=now)
    assert d.missed_24h == 3 and d.decisions_24h == {"missed": 2, "catchup_capped": 1, "calendar": 1}
    page = viewer_client.get(reverse("harness-dashboard")).content.decode()
    assert 'id="dash-missed-count"' in page and ">3</a>" in page.split('id="dash-missed-count"')[1][:200]


def test_it_interpolates_percentiles_like_percentile_cont():
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile([10], 0.99) == 10
    assert percentile([0, 100], 0.95) == 95


def test_it_renders_the_dashboard_within_a_fixed_number_of_queries_on_20k_runs(
    viewer_client, django_assert_max_num_queries
):
    now = timezone.now()
    TaskRun.objects.bulk_create(_runs(BIG, now=now, spread=timedelta(hours=48)), batch_size=5000)
    for i in range(5):
        make_failed_run(f"dl:{i}", now=now)
    SchedulerTick.objects.create(name="scheduler", last_tick_at=now)
    for _ in range(BUCKETS // FILL_PER_SWEEP + 1):  # the sweeper's first minute: 10k runs exceed LIVE_ROWS
        rollup_refresh(now=now)
    url = reverse("harness-dashboard")
    viewer_client.get(url)  # warm caches (template loading), not measured
    with django_assert_max_num_queries(MAX_QUERIES):
        started = time.perf_counter()
        response = viewer_client.get(url)
        elapsed = time.perf_counter() - started
    assert response.status_code == 200
    # Half the runs lie in the last 24 h (a few slip out while the others are inserted).
    assert BIG // 2 - 1000 <= response.context["d"].runs_24h <= BIG // 2 + 5
    page = response.content.decode()
    assert 'id="dash-duplicates-count">0<' in page
    print(f"\ndashboard render with {BIG + 5:,} runs on {connection.vendor}: {elapsed * 1000:.0f} ms")


def test_it_asks_for_a_login():
    response = Client().get(reverse("harness-dashboard"))
    assert response.status_code == 302 and "/login/" in response["Location"]


@pytest.mark.django_db
def test_it_shows_the_queues_and_a_worker_that_is_not_responding(viewer_client):
    from runs.models import WorkerHeartbeat

    now = timezone.now()
    WorkerHeartbeat.objects.create(
        name="w1@h:7", hostname="w1@h", pid=7, started_at=now, beat_at=now - timedelta(seconds=30), progress_at=now
    )
    html = viewer_client.get("/admin/dashboard/").content.decode()
    assert 'id="dash-queue-celery"' in html and 'id="dash-queue-harness_control"' in html
    assert "w1@h:7" in html and "not responding" in html
