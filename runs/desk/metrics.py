"""Prometheus metrics, derived from the database at scrape time (docs/observability.md).

Every value is read from the tables, not from one process's memory, so any web process (or the
separate metrics server, `manage.py metrics_serve`) answers the same for the whole deployment,
however many workers and beats run on however many machines. A scrape costs a fixed number of
queries (SCRAPE_QUERIES), whatever the number of rules, runs or pools; each is one aggregate.

Counters (`_total`) count rows that are never deleted (runs, attempts, tickets, event counts) and
so only grow; gauges are the state now. The two histograms count every started run ever, in
cumulative buckets, so `rate()` and `histogram_quantile()` work as for any Prometheus histogram.
"""

from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import Count, Min, Q, Sum
from django.db.models.functions import TruncSecond
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from deadletters.models import Alert, DeadLetter
from runs.desk.selectors import scheduler_health
from runs.desk.status import MISSED_REASONS
from runs.engine.store import database
from runs.engine.workers import silent_after
from runs.models import (
    Attempt,
    Decision,
    DecisionTally,
    Incident,
    PoolSlot,
    PoolWaiter,
    SlotObjective,
    TaskRun,
    WorkerHeartbeat,
)
from tasks.models import EventMetric, Pool

# Seconds. Queue delay (trigger to first start) is usually under a second; end-to-end latency
# (trigger to success) spans a no-op's milliseconds to a model call's minutes.
QUEUE_DELAY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
LATENCY_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)
# Seconds past a slot's freshness objective at its finish (0: met in time).
LATENESS_BUCKETS = (0, 60, 300, 900, 1800, 3600, 4 * 3600, 24 * 3600)
# Event outcomes that are not refusals (tasks.triggers.events); every other outcome is a refusal reason.
EVENT_ADMITTED = frozenset({"accepted", "duplicate", "redelivery", "shed", "coalesced"})
NEW_WINDOW = timedelta(hours=24)
# What one scrape costs, asserted by tests/runs/test_metrics.py.
SCRAPE_QUERIES = 20


class HarnessCollector(Collector):
    """Collects the harness metrics with `clock()` as now (a test passes its own)."""

    def __init__(self, clock=None):
        self.clock = clock or timezone.now

    def collect(self):
        now = self.clock()
        yield from _runs(now)
        yield from _latency()
        yield from _attempts()
        yield from _deadletters(now)
        yield from _decisions()
        yield from _scheduler(now)
        yield from _events()
        yield from _alerts()
        yield from _pools(now)
        yield from _workers(now)
        yield from _objectives()
        yield from _incidents()


def metrics_registry(clock=None) -> CollectorRegistry:
    """A registry holding only the harness collector: no process metrics of the web process that
    happens to answer, which would say nothing about the deployment."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HarnessCollector(clock))
    return registry


def _runs(now: datetime):
    # 1. Runs by rule and state, and the dedupe hits they absorbed (one grouped scan).
    runs = GaugeMetricFamily("harness_runs", "Runs by rule and state.", labels=["rule", "state"])
    hits = CounterMetricFamily(
        "harness_dedupe_hits", "Triggers that found their run already there (one run per biz_key).", labels=["rule"]
    )
    hits_by_rule: dict[str, int] = defaultdict(int)
    rows = TaskRun.objects.values("rule_name", "state").annotate(n=Count("id"), hits=Sum("dedupe_hits")).order_by()
    for row in rows:
        runs.add_metric([row["rule_name"], row["state"]], row["n"])
        hits_by_rule[row["rule_name"]] += row["hits"] or 0
    for rule, n in sorted(hits_by_rule.items()):
        hits.add_metric([rule], n)
    yield runs
    yield hits
    # 2. Runs due now and not started (run_due_idx): the queue a worker should be taking from.
    due = TaskRun.objects.filter(state__in=TaskRun.CLAIMABLE, run_after__lte=now).aggregate(
        n=Count("id"), oldest=Min("run_after")
    )
    yield GaugeMetricFamily("harness_runs_due", "Claimable runs whose run_after has come.", value=due["n"])
    yield GaugeMetricFamily(
        "harness_oldest_due_run_age_seconds",
        "How long the oldest due, unstarted run has waited (0: none).",
        value=(now - due["oldest"]).total_seconds() if due["oldest"] else 0.0,
    )
    yield from _start_peaks(now)


# The window the busiest second of starts is looked for in, behind and ahead of now.
START_PEAK_WINDOW = timedelta(minutes=5)


def _start_peaks(now: datetime):
    """The most runs started in one second lately, and the most planned to start in one second
    ahead (spread starts, retries): a cluster shows here before a provider answers it with 429s."""
    # 3. Started lately, by second (run_recent_idx: a run starts after its trigger).
    started = (
        TaskRun.objects.filter(trigger_at__gte=now - START_PEAK_WINDOW, start_at__gte=now - START_PEAK_WINDOW)
        .annotate(second=TruncSecond("start_at"))
        .values("second")
        .annotate(n=Count("id"))
        .order_by()
    )
    yield GaugeMetricFamily(
        "harness_run_starts_peak_per_second",
        "The most runs that started in one second during the last 5 minutes.",
        value=max((row["n"] for row in started), default=0),
    )
    # 4. Planned ahead, by second (run_due_idx).
    planned = (
        TaskRun.objects.filter(state__in=TaskRun.CLAIMABLE, run_after__gt=now, run_after__lte=now + START_PEAK_WINDOW)
        .annotate(second=TruncSecond("run_after"))
        .values("second")
        .annotate(n=Count("id"))
        .order_by()
    )
    yield GaugeMetricFamily(
        "harness_planned_starts_peak_per_second",
        "The most runs due to start in one second during the next 5 minutes (spread, retries).",
        value=max((row["n"] for row in planned), default=0),
    )


def _latency():
    # 3. Both histograms in one pass over started runs, each difference computed once per row
    # (reports.sql, run_latency: native date arithmetic on each backend, to the millisecond).
    # Backfills are paced on purpose, so their delay says nothing about the queue (as on the dashboard).
    [row] = database.report("run_latency", latency_params())
    d_n, d_sum, l_n, l_sum, *counts = row
    n_delay = len(QUEUE_DELAY_BUCKETS)
    yield _histogram(
        "harness_run_queue_delay_seconds",
        "Trigger to first start of a run (backfills excluded).",
        QUEUE_DELAY_BUCKETS,
        counts[:n_delay],
        count=d_n,
        total=d_sum,
    )
    yield _histogram(
        "harness_run_latency_seconds",
        "Trigger to success of a run, end to end (backfills excluded).",
        LATENCY_BUCKETS,
        counts[n_delay:],
        count=l_n,
        total=l_sum,
    )


def latency_params() -> dict[str, object]:
    """run_latency's parameters: the states it reads and each histogram bound, in order."""
    return {
        "succeeded": TaskRun.State.SUCCEEDED,
        "backfill": TaskRun.Source.BACKFILL,
        **{f"delay_{i}": float(b) for i, b in enumerate(QUEUE_DELAY_BUCKETS)},
        **{f"latency_{i}": float(b) for i, b in enumerate(LATENCY_BUCKETS)},
    }


def _histogram(name, documentation, bounds, counts, *, count: int, total) -> HistogramMetricFamily:
    buckets = [(_le(b), int(n or 0)) for b, n in zip(bounds, counts, strict=True)] + [("+Inf", count)]
    return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=float(total or 0))


def _le(bound: float) -> str:
    return repr(float(bound))


def _attempts():
    # 4. Finished attempts by outcome and error kind. A running attempt is not counted until it ends
    # (it is harness_runs{state="running"}); a budget wait takes its attempt back, so it never counts.
    attempts = CounterMetricFamily(
        "harness_attempts", "Finished attempts by outcome and error kind.", labels=["outcome", "error_kind"]
    )
    rows = (
        Attempt.objects.exclude(outcome=Attempt.Outcome.RUNNING)
        .values("outcome", "error_kind")
        .annotate(n=Count("id"))
        .order_by("outcome", "error_kind")
    )
    for row in rows:
        attempts.add_metric([row["outcome"], row["error_kind"]], row["n"])
    yield attempts


def _deadletters(now: datetime):
    # 5. Tickets: the open backlog by rule and error kind, every ticket ever (rate() = new), and new in 24 h.
    backlog = GaugeMetricFamily(
        "harness_deadletters_open", "Open dead-letter tickets (pending manual action).", labels=["rule", "error_kind"]
    )
    total = CounterMetricFamily("harness_deadletters", "Dead-letter tickets ever opened.", labels=["rule"])
    new = GaugeMetricFamily("harness_deadletters_new_24h", "Tickets opened in the last 24 h.", labels=["rule"])
    opened: dict[str, int] = defaultdict(int)
    recent: dict[str, int] = defaultdict(int)
    rows = (
        DeadLetter.objects.values("rule_name", "error_kind", "state")
        .annotate(n=Count("id"), new=Count("id", filter=Q(created_at__gte=now - NEW_WINDOW)))
        .order_by("rule_name", "error_kind", "state")
    )
    for row in rows:
        opened[row["rule_name"]] += row["n"]
        recent[row["rule_name"]] += row["new"]
        if row["state"] == DeadLetter.State.PENDING_MANUAL:
            backlog.add_metric([row["rule_name"], row["error_kind"]], row["n"])
    for rule in sorted(opened):
        total.add_metric([rule], opened[rule])
        new.add_metric([rule], recent[rule])
    yield backlog
    yield total
    yield new


def _decisions():
    # 6-7. Every decision ever recorded ("did not run", invariant 3) by rule and reason: the rows kept
    # plus those retention deleted (DecisionTally), so the counter never goes back. Missed slots on
    # their own: missed beyond the catch-up window or its max count.
    counted: dict[tuple[str, str], int] = defaultdict(int)
    for rule, reason, n in (
        Decision.objects.values_list("rule__name", "reason")
        .annotate(n=Count("id"))
        .order_by()
        .values_list("rule__name", "reason", "n")
    ):
        counted[(rule, reason)] += n
    for rule, reason, n in DecisionTally.objects.values_list("rule_name", "reason", "count"):
        counted[(rule, reason)] += n
    decisions = CounterMetricFamily(
        "harness_decisions", "Slots and triggers decided without a run, by rule and reason.", labels=["rule", "reason"]
    )
    missed = CounterMetricFamily(
        "harness_missed_slots", "Slots missed beyond the catch-up window or its max count, by rule.", labels=["rule"]
    )
    missed_by_rule: dict[str, int] = defaultdict(int)
    for (rule, reason), n in sorted(counted.items()):
        decisions.add_metric([rule, reason], n)
        if reason in MISSED_REASONS:
            missed_by_rule[rule] += n
    for rule, n in sorted(missed_by_rule.items()):
        missed.add_metric([rule], n)
    yield decisions
    yield missed


def _scheduler(now: datetime):
    # 8-10. The last tick, the oldest due run and the oldest unclaimed slot (runs.desk.selectors: 3 queries).
    health = scheduler_health(now=now)
    age = health["last_tick_age_seconds"]
    yield GaugeMetricFamily(
        "harness_scheduler_tick_age_seconds",
        "Seconds since the last scheduler tick (-1: no tick yet).",
        value=age if age is not None else -1.0,
    )
    yield GaugeMetricFamily(
        "harness_scheduler_healthy", "1 while /healthz would say the scheduler is ok.", value=int(health["ok"])
    )
    slot = GaugeMetricFamily(
        "harness_oldest_unclaimed_slot_age_seconds",
        "How long the oldest due slot of an enabled rule has waited for a tick (0: none).",
        labels=["rule"],
    )
    if health["oldest_unclaimed_slot_rule"] is not None:
        slot.add_metric([health["oldest_unclaimed_slot_rule"]], health["oldest_unclaimed_slot_age_seconds"])
    else:
        slot.add_metric([""], 0.0)
    yield slot


def _events():
    # 11. Event intake by source and outcome; refusals (every outcome that is a reason) on their own.
    events = CounterMetricFamily("harness_events", "Event intake outcomes by source.", labels=["source", "outcome"])
    refusals = CounterMetricFamily(
        "harness_event_refusals",
        "Refused events (webhook, queue, file, Python) by reason.",
        labels=["source", "reason"],
    )
    for source, outcome, n in EventMetric.objects.order_by("source_name", "outcome").values_list(
        "source_name", "outcome", "count"
    ):
        events.add_metric([source, outcome], n)
        if outcome not in EVENT_ADMITTED:
            refusals.add_metric([source, outcome], n)
    yield events
    yield refusals


def _alerts():
    # 12. The alert outbox: deliveries waiting to be sent (or retried), and those that gave up.
    backlog = GaugeMetricFamily(
        "harness_alert_outbox",
        "Alert deliveries by channel and state (pending: the backlog).",
        labels=["channel", "state"],
    )
    rows = (
        Alert.objects.filter(channel__isnull=False, state__in=[Alert.State.PENDING, Alert.State.FAILED])
        .values("channel__name", "state")
        .annotate(n=Count("id"))
        .order_by("channel__name", "state")
    )
    for row in rows:
        backlog.add_metric([row["channel__name"], row["state"]], row["n"])
    yield backlog


def _pools(now: datetime):
    # 13-14. Pool saturation: slots in use on the busiest key against the limit, runs waiting.
    pools = {p.id: p for p in Pool.objects.only("id", "name", "enabled", "max_concurrency", "paused_until")}
    busiest: dict[int, int] = defaultdict(int)
    in_use: dict[int, int] = defaultdict(int)
    for row in PoolSlot.objects.filter(expires_at__gt=now).values("pool_id", "key").annotate(n=Count("id")).order_by():
        in_use[row["pool_id"]] += row["n"]
        busiest[row["pool_id"]] = max(busiest[row["pool_id"]], row["n"])
    waiting = dict(
        PoolWaiter.objects.values("pool_id").annotate(n=Count("run_id")).order_by().values_list("pool_id", "n")
    )
    used = GaugeMetricFamily("harness_pool_slots_in_use", "Live slots held in the pool (all keys).", labels=["pool"])
    limit = GaugeMetricFamily(
        "harness_pool_limit", "The pool's concurrency limit per key (absent: unlimited).", labels=["pool"]
    )
    saturation = GaugeMetricFamily(
        "harness_pool_saturation", "Slots on the busiest key over the limit (1: saturated).", labels=["pool"]
    )
    waiters = GaugeMetricFamily("harness_pool_waiting_runs", "Runs waiting for the pool.", labels=["pool"])
    paused = GaugeMetricFamily("harness_pool_paused", "1 while the provider paused the pool (429).", labels=["pool"])
    for pool in sorted(pools.values(), key=lambda p: p.name):
        used.add_metric([pool.name], in_use[pool.id])
        waiters.add_metric([pool.name], waiting.get(pool.id, 0))
        paused.add_metric([pool.name], int(bool(pool.paused_until and pool.paused_until > now)))
        if pool.max_concurrency:
            limit.add_metric([pool.name], pool.max_concurrency)
            saturation.add_metric([pool.name], busiest[pool.id] / pool.max_concurrency if pool.enabled else 0.0)
    yield used
    yield limit
    yield saturation
    yield waiters
    yield paused


def _workers(now: datetime):
    # 15. Each responding worker process as its last heartbeat reported it (runs/engine/workers.py): runs in
    # flight, and where its runs share a connection pool (a threads worker), the pool's use and waits.
    labels = ["worker", "queues", "pool"]
    in_flight = GaugeMetricFamily(
        "harness_worker_runs_in_flight", "Tasks running in the worker process.", labels=labels
    )
    waiting = GaugeMetricFamily(
        "harness_worker_tasks_waiting", "Tasks the worker received and has not started.", labels=labels
    )
    concurrency = GaugeMetricFamily(
        "harness_worker_concurrency", "Tasks the worker runs at once (pool processes or threads).", labels=labels
    )
    in_use = GaugeMetricFamily(
        "harness_worker_db_connections_in_use",
        "Pooled database connections lent out now (or being opened for a thread that asked).",
        labels=labels,
    )
    size = GaugeMetricFamily(
        "harness_worker_db_connections_max", "The worker's connection pool size limit.", labels=labels
    )
    waiters = GaugeMetricFamily(
        "harness_worker_db_connection_waiters", "Threads waiting for a pooled connection now.", labels=labels
    )
    wait = CounterMetricFamily(
        "harness_worker_db_connection_wait_seconds",
        "Time threads spent waiting for a pooled connection, since the pool started.",
        labels=labels,
    )
    requests = CounterMetricFamily(
        "harness_worker_db_connection_requests", "Connections asked of the pool, since it started.", labels=labels
    )
    rows = WorkerHeartbeat.objects.filter(beat_at__gte=now - silent_after()).order_by("name")
    for w in rows.only("name", "queues", "pool", "concurrency", "active", "waiting", "db_pool"):
        key = [w.name, w.queues, w.pool]
        in_flight.add_metric(key, w.active)
        waiting.add_metric(key, w.waiting)
        concurrency.add_metric(key, w.concurrency)
        stats = w.db_pool
        if stats:
            in_use.add_metric(key, stats.get("in_use", 0))
            size.add_metric(key, stats.get("pool_max", 0))
            waiters.add_metric(key, stats.get("requests_waiting", 0))
            wait.add_metric(key, stats.get("requests_wait_ms", 0) / 1000)
            requests.add_metric(key, stats.get("requests_num", 0))
    yield from (in_flight, waiting, concurrency, in_use, size, waiters, wait, requests)


def _objectives():
    # 16. Freshness objectives (runs/engine/objectives.py): slots by rule, status and closed, with the lateness
    # buckets of the finished ones, in one grouped scan of the retained slots (35 days). A slot closed
    # without finishing (never ran) has no lateness: it is counted apart, not as CLOSE_AFTER late.
    finished = Q(finished_at__isnull=False)
    buckets = {
        f"le{i}": Count("id", filter=finished & Q(lateness_seconds__lte=b)) for i, b in enumerate(LATENESS_BUCKETS)
    }
    rows = (
        SlotObjective.objects.values("rule__name", "status", "closed")
        .annotate(
            n=Count("id"),
            done=Count("id", filter=finished),
            late=Sum("lateness_seconds", filter=finished),
            **buckets,
        )
        .order_by("rule__name")
    )
    at_risk = GaugeMetricFamily(
        "harness_objective_at_risk", "Open slots expected to miss their freshness objective.", labels=["rule"]
    )
    breached = GaugeMetricFamily(
        "harness_objective_breached",
        "Slots that missed their freshness objective (finished late, or not done by it), last 35 days.",
        labels=["rule"],
    )
    met = GaugeMetricFamily(
        "harness_objective_met", "Slots done by their freshness objective, last 35 days.", labels=["rule"]
    )
    unfinished = GaugeMetricFamily(
        "harness_objective_unfinished",
        "Slots closed as breached without ever finishing (never ran, or failed for good), last 35 days.",
        labels=["rule"],
    )
    per_rule: dict[str, dict] = defaultdict(
        lambda: {"risk": 0, "breached": 0, "met": 0, "unfinished": 0, "n": 0, "sum": 0.0, "le": None}
    )
    for row in rows:
        r = per_rule[row["rule__name"]]
        if row["status"] == "at_risk" and not row["closed"]:
            r["risk"] += row["n"]
        if row["status"] == "breached":
            r["breached"] += row["n"]
        if row["status"] == "met":
            r["met"] += row["n"]
        if row["closed"] and row["status"] == "breached":
            r["unfinished"] += row["n"] - row["done"]
        if row["closed"] and row["status"] in ("met", "breached") and row["done"]:
            counts = [row[f"le{i}"] for i in range(len(LATENESS_BUCKETS))]  # type: ignore[literal-required]
            r["le"] = counts if r["le"] is None else [a + b for a, b in zip(r["le"], counts, strict=True)]
            r["n"] += row["done"]
            r["sum"] += row["late"] or 0.0
    lateness = HistogramMetricFamily(
        "harness_objective_lateness_seconds",
        "Seconds past the freshness objective at each finished slot's end (0: in time), last 35 days.",
        labels=["rule"],
    )
    for rule, r in sorted(per_rule.items()):
        at_risk.add_metric([rule], r["risk"])
        breached.add_metric([rule], r["breached"])
        met.add_metric([rule], r["met"])
        unfinished.add_metric([rule], r["unfinished"])
        if r["le"] is not None:
            buckets_out = [(_le(b), int(n)) for b, n in zip(LATENESS_BUCKETS, r["le"], strict=True)]
            lateness.add_metric([rule], [*buckets_out, ("+Inf", r["n"])], sum_value=float(r["sum"]))
    yield at_risk
    yield breached
    yield met
    yield unfinished
    yield lateness


def _incidents():
    # Incidents of the harness itself by kind: open now, and ever recorded (one grouped scan; few rows).
    open_now = GaugeMetricFamily("harness_incidents_open", "Incidents open now, by kind.", labels=["kind"])
    total = CounterMetricFamily("harness_incidents", "Incidents ever recorded, by kind.", labels=["kind"])
    found: dict[str, tuple[int, int]] = {
        row["kind"]: (row["open"], row["n"])
        for row in Incident.objects.values("kind")
        .annotate(n=Count("id"), open=Count("id", filter=Q(ended_at=None)))
        .order_by()
    }
    for kind in Incident.Kind.values:  # every kind, 0 included, so an alert rule has a series to watch
        n_open, n = found.get(kind, (0, 0))
        open_now.add_metric([kind], n_open)
        total.add_metric([kind], n)
    yield open_now
    yield total
