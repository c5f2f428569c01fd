"""The dashboard's rollup (runs/engine/rollup.py): the rollup-backed dashboard says what the runs say.

Counts are exact; percentiles within one histogram bin (5 %) of percentile_cont over the same runs.
Real database, `now` passed explicitly; the sweeper's refresh is called as the sweep calls it.
"""

import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from runs.desk.dashboard import QUANTILES, dashboard_build, percentile
from runs.engine import rollup
from runs.engine.rollup import (
    BIN_RATIO,
    BUCKET,
    BUCKETS,
    FILL_PER_SWEEP,
    REFRESH_PER_SWEEP,
    ROW_FIELDS,
    _summarize_in_postgres,
    bin_of,
    bucket_of,
    histogram_percentile,
    rolled_buckets,
    rollup_refresh,
    summarize,
)
from runs.models import RunRollup, TaskRun

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 1, 12, 3, 17, 250_000, tzinfo=UTC)  # mid-bucket, mid-minute
STATES = ["succeeded"] * 6 + ["failed", "pending", "waiting_retry", "running", "cancelled"]


def make_runs(n: int, *, now=NOW, span=timedelta(hours=30), seed=7) -> None:
    rng = random.Random(seed)
    runs = []
    for i in range(n):
        trigger = now - span * rng.random()
        state = rng.choice(STATES)
        start = trigger + timedelta(seconds=rng.expovariate(1 / 2.0)) if state not in ("pending", "cancelled") else None
        finish = start + timedelta(seconds=rng.expovariate(1 / 5.0)) if start and state != "running" else None
        runs.append(
            TaskRun(
                biz_key=f"roll:{i}",
                skill="harness.noop",
                source=rng.choice(["scheduler", "scheduler", "api", "backfill"]),
                trigger_at=trigger,
                run_after=trigger,
                state=state,
                start_at=start,
                finish_at=finish,
                dedupe_hits=rng.choice([0, 0, 0, 1, 3]),
                is_trial=rng.random() < 0.1,
                lease_owner="w" if state == "running" else "",
                lease_expires_at=now + timedelta(minutes=5) if state == "running" else None,
            )
        )
    TaskRun.objects.bulk_create(runs, batch_size=2000)


def truth(now=NOW) -> dict:
    """The dashboard's 24 h figures computed straight from the runs, exactly."""
    return truth_since(now - timedelta(hours=24))


def truth_since(since: datetime) -> dict:
    """The dashboard's figures over the runs triggered from `since` on, exactly."""
    rows = list(
        TaskRun.objects.filter(trigger_at__gte=since).values_list(
            "trigger_at", "state", "dedupe_hits", "is_trial", "start_at", "finish_at", "source"
        )
    )
    hours: dict = {}
    for trigger, state, *_ in rows:
        hour = trigger.replace(minute=0, second=0, microsecond=0)
        hours.setdefault(hour, Counter())[state] += 1
    started = [r for r in rows if r[4] is not None and r[6] != "backfill"]
    delays = [(r[4] - r[0]).total_seconds() for r in started]
    latencies = [(r[5] - r[0]).total_seconds() for r in started if r[1] == "succeeded" and r[5] is not None]
    return {
        "states": dict(Counter(r[1] for r in rows)),
        "hits": sum(r[2] for r in rows),
        "trials": sum(1 for r in rows if r[3]),
        "hours": {h: dict(c) for h, c in hours.items()},
        "delay": [percentile(delays, q) for q in QUANTILES],
        "latency": [percentile(latencies, q) for q in QUANTILES],
    }


def assert_dashboard_is_the_truth(now=NOW) -> None:
    d, t = dashboard_build(now=now), truth(now)
    assert d.states == t["states"]
    assert d.runs_24h == sum(t["states"].values())
    assert (d.dedupe_hits_24h, d.trials_24h) == (t["hits"], t["trials"])
    assert {h["hour"]: h["by_state"] for h in d.hours if h["by_state"]} == t["hours"]
    for shown, exact in ((d.queue_delay, t["delay"]), (d.latency, t["latency"])):
        for value, want in zip(shown.values(), exact, strict=True):
            assert abs(value - want) <= want * (BIN_RATIO - 1) + 0.001, (shown, exact)


def refresh_all(now=NOW) -> None:
    for _ in range(BUCKETS // FILL_PER_SWEEP + 1):
        rollup_refresh(now=now)


def test_before_any_refresh_the_dashboard_reads_the_runs_and_is_the_truth():
    make_runs(3000)
    assert not RunRollup.objects.exists()
    assert_dashboard_is_the_truth()


def test_before_any_refresh_the_dashboard_reads_the_newest_runs_only_and_says_what_it_left_out(monkeypatch):
    # A new deployment with more runs in the last 24 h than a render reads (rollup.LIVE_ROWS, made
    # small here): the newest whole buckets are exact, the rest is counted as not summarised yet.
    monkeypatch.setattr(rollup, "LIVE_ROWS", 200)
    make_runs(3000)
    since = NOW - timedelta(hours=24)
    newest = TaskRun.objects.filter(trigger_at__gte=since).order_by("-trigger_at").values_list("trigger_at", flat=True)
    cut = bucket_of(newest[200])  # the bucket of the first run past the budget: possibly cut short
    exact = truth_since(cut + BUCKET)

    d = dashboard_build(now=NOW)

    assert d.states == exact["states"] and d.runs_24h < 200
    assert {h["hour"]: h["by_state"] for h in d.hours if h["by_state"]} == exact["hours"]
    assert d.unsummarised_minutes == 5 * ((cut - bucket_of(since)) // BUCKET + 1)
    refresh_all()
    d = dashboard_build(now=NOW)
    assert d.unsummarised_minutes == 0  # the sweeper filled the rollup: the whole 24 h again
    assert_dashboard_is_the_truth()


def test_the_dashboard_says_when_part_of_the_day_is_not_summarised_yet(admin_client, monkeypatch):
    monkeypatch.setattr(rollup, "LIVE_ROWS", 50)
    make_runs(500, now=timezone.now())
    page = admin_client.get(reverse("harness-dashboard")).content.decode()
    assert 'id="dash-unsummarised"' in page and "leave them out" in page


def test_after_the_sweeper_filled_the_rollup_the_dashboard_is_still_the_truth():
    make_runs(3000)
    refresh_all()
    first, last = rolled_buckets(NOW)
    assert RunRollup.objects.count() == (last - first) // timedelta(minutes=5)
    assert_dashboard_is_the_truth()


def test_a_new_run_shows_at_once_and_an_old_runs_change_within_one_refresh_cycle():
    make_runs(2000)
    refresh_all()
    # The newest minutes are read live: a run triggered a second ago counts at once.
    TaskRun.objects.create(
        biz_key="roll:new",
        skill="harness.noop",
        source="api",
        trigger_at=NOW - timedelta(seconds=1),
        run_after=NOW,
        state="pending",
    )
    assert_dashboard_is_the_truth()
    # A run from 6 hours ago finishes now (a long retry): its bucket says so after a refresh cycle.
    old = TaskRun.objects.filter(trigger_at__lt=NOW - timedelta(hours=6), state="waiting_retry").first()
    TaskRun.objects.filter(pk=old.pk).update(state="failed", dedupe_hits=old.dedupe_hits + 5)
    assert dashboard_build(now=NOW).states != truth()["states"]  # stale: as last summarised
    later = NOW
    for _ in range(BUCKETS // REFRESH_PER_SWEEP + 1):
        later += timedelta(seconds=1)
        rollup_refresh(now=later)
    # Each row was recomputed once in the cycle; judged at the instant of the last sweep.
    assert_dashboard_is_the_truth(now=later)


def test_rows_past_the_window_are_dropped():
    make_runs(500)
    refresh_all()
    day_later = NOW + timedelta(hours=24)
    rollup_refresh(now=day_later)
    first, _last = rolled_buckets(day_later)
    assert not RunRollup.objects.filter(bucket__lt=first).exists()


def test_the_dashboard_reads_the_same_statements_with_ten_times_the_runs():
    make_runs(300, seed=1)
    refresh_all()
    with CaptureQueriesContext(connection) as few:
        dashboard_build(now=NOW)
    TaskRun.objects.all().delete()
    make_runs(3000, seed=2)
    refresh_all()
    with CaptureQueriesContext(connection) as many:
        dashboard_build(now=NOW)
    assert len(many) == len(few)


def test_the_database_summarises_buckets_as_python_does():
    make_runs(3000)
    first, last = rolled_buckets(NOW)
    buckets = [first + timedelta(minutes=5) * i for i in range((last - first) // timedelta(minutes=5))]
    rows = TaskRun.objects.filter(trigger_at__gte=first, trigger_at__lt=last).values_list(*ROW_FIELDS)
    want = summarize(rows, key=bucket_of)
    got = _summarize_in_postgres(buckets) if connection.vendor == "postgresql" else want
    assert {b: s.as_json() for b, s in got.items()} == {b: s.as_json() for b, s in want.items()}


@pytest.mark.parametrize("seed", range(20))
def test_a_histogram_percentile_is_within_one_bin_of_percentile_cont(seed):
    rng = random.Random(seed)
    scale = rng.choice([0.002, 0.5, 3, 600])
    values = [rng.expovariate(1 / scale) + 0.001 for _ in range(rng.randint(1, 400))]
    hist = Counter(bin_of(v) for v in values)
    for q in (0.0, 0.5, 0.95, 0.99, 1.0):
        exact = percentile(values, q)
        assert abs(histogram_percentile(hist, q) - exact) <= exact * (BIN_RATIO - 1)
