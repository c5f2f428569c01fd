"""Dashboard selectors: a fixed, small number of queries, whatever the number of runs.

Every query is bounded by an index (rollup rows and recent runs by trigger_at, claimable runs by
run_after, open tickets) or is a single aggregate. The 24 h figures (runs by hour and state, dedupe
hits, percentiles) read the sweeper's rollup for whole 5-minute buckets and the runs for the newest
minutes (runs/engine/rollup.py): 288 rows instead of a day of runs. Percentiles come from its histograms,
within one 5 % bin of percentile_cont, the same on PostgreSQL and SQLite.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypedDict

from django.db.models import Count, F, Q
from django.utils.translation import gettext as _

from deadletters.models import DeadLetter
from runs.desk.objectives import objective_counts
from runs.desk.selectors import flow_saturation, scheduler_health
from runs.desk.status import decisions_by_reason, missed_of, next_runs, reason_items
from runs.engine.rollup import BIN_RATIO, BUCKET, LIVE, REFRESH_CYCLE, Summary, histogram_percentile, rollup_read
from runs.engine.store import database
from runs.models import Incident, TaskRun
from tasks.models import TriggerRule

WINDOW = timedelta(hours=24)
QUANTILES = (0.5, 0.95, 0.99)
# Runs older than this many recent succeeded ones do not move a skill's p99 (rule lint).
DURATION_SAMPLE = 500
NEXT_FIRES = 10
RECENT_INCIDENTS = 5


@dataclass
class Dashboard:
    now: datetime
    hours: list[dict] = field(default_factory=list)  # [{"hour", "total", "by_state": {state: n}}]
    states: dict[str, int] = field(default_factory=dict)
    runs_24h: int = 0
    dedupe_hits_24h: int = 0
    trials_24h: int = 0
    queue_due: int = 0
    queue_later: int = 0
    running: int = 0
    queue_delay: dict[str, float | None] = field(default_factory=dict)
    latency: dict[str, float | None] = field(default_factory=dict)
    percentile_method: str = ""
    deadletters_new_today: int = 0
    deadletters_open: int = 0
    duplicate_biz_keys: int = 0
    scheduler: dict = field(default_factory=dict)
    next_fires: list = field(default_factory=list)
    flow: dict = field(default_factory=dict)
    objectives: dict = field(default_factory=dict)  # open slots by objective status
    rollup_refreshed_at: datetime | None = None  # the oldest summary read from the rollup
    unsummarised_minutes: int = 0  # of the 24 h, not yet summarised by the sweeper and left out (runs/engine/rollup.py)
    decisions_24h: dict[str, int] = field(default_factory=dict)  # slots and triggers decided, by reason
    missed_24h: int = 0  # slots missed beyond the catch-up window or its max count
    incidents: list = field(default_factory=list)  # the most recent incidents of the harness itself

    @property
    def decided_items(self) -> list[tuple[str, str, int]]:
        return reason_items(self.decisions_24h)

    @property
    def decided_total(self) -> int:
        return sum(self.decisions_24h.values())

    @property
    def dedupe_share(self) -> float:
        """Share of triggers that found their run already there."""
        triggers = self.runs_24h + self.dedupe_hits_24h
        return self.dedupe_hits_24h / triggers if triggers else 0.0


def dashboard_build(*, now: datetime) -> Dashboard:
    """Everything the dashboard shows, in a fixed number of queries (about ten)."""
    since = now - WINDOW
    d = Dashboard(now=now)
    recent = TaskRun.objects.filter(trigger_at__gte=since)

    # 1. Runs per hour and state, dedupe hits, trials and the percentiles' histograms: whole buckets
    # from the sweeper's rollup, the newest minutes and the window's edge from the runs (2 queries).
    read = rollup_read(now=now)
    by_hour, d.rollup_refreshed_at = read.by_hour, read.refreshed_at
    d.unsummarised_minutes = int(read.unread * BUCKET.total_seconds() // 60)
    window = Summary()
    for summary in by_hour.values():
        window.add(summary)
    d.states = dict(window.states)
    d.runs_24h = sum(window.states.values())
    d.dedupe_hits_24h, d.trials_24h = window.hits, window.trials
    start = since.replace(minute=0, second=0, microsecond=0)
    d.hours = [
        {"hour": h, "by_state": dict(by_hour[h].states) if h in by_hour else {}, "total": 0}
        for h in (start + timedelta(hours=i) for i in range(25))
        if h <= now
    ]
    for h in d.hours:
        h["total"] = sum(h["by_state"].values())

    # 3. Queue depth (run_due_idx): due now, waiting for a later run_after, running.
    q = TaskRun.objects.filter(state__in=[*TaskRun.CLAIMABLE, TaskRun.State.RUNNING]).aggregate(
        due=Count("id", filter=Q(state__in=TaskRun.CLAIMABLE, run_after__lte=now)),
        later=Count("id", filter=Q(state__in=TaskRun.CLAIMABLE, run_after__gt=now)),
        running=Count("id", filter=Q(state=TaskRun.State.RUNNING)),
    )
    d.queue_due, d.queue_later, d.running = q["due"], q["later"], q["running"]

    # 4. Queue delay (first start - trigger) and end-to-end latency (finish - trigger) percentiles,
    # from the same histograms. Backfills are paced on purpose, so their delay says nothing of the queue.
    names = [f"p{round(q * 100)}" for q in QUANTILES]
    d.queue_delay = {n: histogram_percentile(window.delay, q) for n, q in zip(names, QUANTILES, strict=True)}
    d.latency = {n: histogram_percentile(window.latency, q) for n, q in zip(names, QUANTILES, strict=True)}
    d.percentile_method = _(
        "over every run of the last 24 h, to within %(bin)s%% (histogram bins); runs older than"
        " %(live)s minutes as the sweeper last summarised them, about %(cycle)s s ago at most"
    ) % {
        "bin": round((BIN_RATIO - 1) * 100),
        "live": int(LIVE.total_seconds() // 60),
        "cycle": int(REFRESH_CYCLE.total_seconds()),
    }

    # 5. Dead letters: new today (UTC) and the open backlog (deadletter_open_idx).
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    dl = DeadLetter.objects.aggregate(
        new=Count("id", filter=Q(created_at__gte=midnight)),
        open=Count("id", filter=Q(state=DeadLetter.State.PENDING_MANUAL)),
    )
    d.deadletters_new_today, d.deadletters_open = dl["new"], dl["open"]

    # 6. biz_keys with more than one run: the unique constraint makes this 0; the dashboard proves it.
    d.duplicate_biz_keys = _duplicate_biz_keys(recent)

    # 7. Scheduler liveness (2 queries) and the next fires (rule_due_idx).
    d.scheduler = scheduler_health(now=now)
    d.next_fires = list(
        TriggerRule.objects.filter(enabled=True, next_fire_at__isnull=False)
        .order_by("next_fire_at")
        .values("id", "name", "timezone", "next_fire_at")[:NEXT_FIRES]
    )
    # The next *run* of rules a calendar or window may skip, as the preview says it (2 queries).
    runs_next = next_runs([r["id"] for r in d.next_fires])
    for r in d.next_fires:
        r["next_run"] = runs_next.get(r["id"], r["next_fire_at"])

    # 8. Flow control: saturated and paused pools, runs waiting for a pool (2 queries).
    d.flow = flow_saturation(now=now)

    # 9. Slots decided without a run, by reason, and the missed ones among them (decision_created_idx).
    d.decisions_24h = decisions_by_reason(since=since)
    d.missed_24h = missed_of(d.decisions_24h)
    # 10. Freshness objectives: open slots at risk, breached and on track, as the last pass saw them.
    d.objectives = objective_counts()
    # Incidents of the harness itself, newest first (incident_recent_idx).
    d.incidents = list(Incident.objects.order_by("-started_at", "-id")[:RECENT_INCIDENTS])
    return d


def _duplicate_biz_keys(recent) -> int:
    """0 by construction while the unique index behind run_unique_biz_key is valid: on PostgreSQL the
    catalog says so in one row (pg_index). Counting duplicates over every run was a scan of the
    whole table, spilling to disk at a million runs. Where the catalog cannot say (SQLite, or an
    index left invalid by a failed concurrent build), the runs of the last 24 h are counted."""
    if database.biz_key_unique_valid():
        return 0
    return recent.values("biz_key").annotate(n=Count("id")).filter(n__gt=1).order_by().count()


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks, as PostgreSQL's percentile_cont."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def skill_duration_p99s(skills: list[str]) -> dict[str, float | None]:
    """p99 of (finish - first start) over each skill's most recent succeeded runs; None: none yet.

    One query per distinct skill on run_skill_done_idx, each reading at most DURATION_SAMPLE rows.
    """
    out: dict[str, float | None] = {}
    for skill in sorted(set(skills)):
        durations = [
            (f - s).total_seconds()
            for s, f in TaskRun.objects.filter(skill=skill, state=TaskRun.State.SUCCEEDED, start_at__isnull=False)
            .exclude(finish_at=None)
            .order_by("-finish_at")
            .values_list("start_at", "finish_at")[:DURATION_SAMPLE]
            if s is not None and f is not None  # the query's filters, for the type checker
        ]
        out[skill] = percentile(durations, 0.99) if durations else None
    return out


class BacklogRow(TypedDict):
    """One group of open tickets: its key (a rule name, an error kind) and how many."""

    key: str
    n: int


class FingerprintRow(BacklogRow):
    kind: str  # the error kind of the fingerprint's tickets


class Backlog(TypedDict):
    rule: list[BacklogRow]
    error_kind: list[BacklogRow]
    fingerprint: list[FingerprintRow]


def deadletter_backlog(*, limit: int = 20) -> Backlog:
    """Open tickets counted by rule, by error kind and by error fingerprint (deadletter_open_idx)."""
    open_ = DeadLetter.objects.filter(state=DeadLetter.State.PENDING_MANUAL)
    return {
        "rule": list(open_.values(key=F("rule_name")).annotate(n=Count("id")).order_by("-n", "key")[:limit]),
        "error_kind": list(open_.values(key=F("error_kind")).annotate(n=Count("id")).order_by("-n", "key")[:limit]),
        "fingerprint": list(
            open_.values(key=F("last_error_digest"))
            .annotate(n=Count("id"), kind=F("error_kind"))
            .order_by("-n", "key")[:limit]
        ),
    }
