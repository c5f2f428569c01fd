"""The dashboard's rollup: per 5-minute bucket of trigger_at, what the dashboard shows of the last
24 h (runs by state, dedupe hits, trials, histograms of queue delay and end-to-end latency).

The sweeper refreshes it (rollup_refresh, a few buckets per sweep); the dashboard reads it for whole
buckets older than LIVE and reads the runs themselves for the rest (the newest buckets, where states
still change, the window's partial first bucket, any bucket without a row yet; the newest LIVE_ROWS
runs at most, so a render before the first refresh is bounded, and says what it left out). Buckets and live
runs are summarised by the same function (summarize), so the two halves cannot disagree on a rule.
A row is at most one refresh cycle old (about REFRESH_CYCLE): a run that changes state hours after
its trigger, or a late dedupe hit on it, shows within that.

Percentiles come from histograms whose bins are BIN_RATIO wide (5 %): within one bin of the exact
percentile_cont, on PostgreSQL and SQLite alike, in time that does not grow with the runs.
"""

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias, TypeVar

from django.db import transaction
from django.db.models import Q

from runs.engine.store import database
from runs.models import RunRollup, TaskRun

WINDOW = timedelta(hours=24)
BUCKET = timedelta(minutes=5)
# The newest buckets the dashboard reads live: their runs are still starting and finishing.
LIVE = 3 * BUCKET
REFRESH_PER_SWEEP = (
    1  # the row refreshed longest ago, recomputed by each sweep (a sweep stays short: ticks share its worker)
)
FILL_PER_SWEEP = 24  # buckets without a row, computed per sweep (newest first): a new deployment fills in a minute
BUCKETS = int(WINDOW / BUCKET)
# The dashboard reads at most this many runs itself, newest first: the live minutes and any bucket
# the sweeper has not summarised yet (a new deployment, a stopped sweeper). Buckets beyond it are
# left out and counted (RollupRead.unread), so a render's work does not grow with the runs.
LIVE_ROWS = 5_000
# With a sweep a second, every row is recomputed this often.
REFRESH_CYCLE = timedelta(seconds=BUCKETS / REFRESH_PER_SWEEP)

BIN_BASE = 0.001  # bin 0 holds [0, 1 ms) (and any negative clock skew); bin i >= 1 [BASE·R^(i-1), BASE·R^i)
BIN_RATIO = 1.05
_LOG_RATIO = math.log(BIN_RATIO)
ROW_FIELDS = ("trigger_at", "state", "dedupe_hits", "is_trial", "start_at", "finish_at", "source")
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
# The end of the open range of the LIVE buckets (runs triggered from `last` on).
OPEN_END = datetime(9999, 12, 31, tzinfo=UTC)
# [start, end) of trigger_at.
Range: TypeAlias = tuple[datetime, datetime]
# One run as ROW_FIELDS reads it.
RunRow: TypeAlias = tuple[datetime, str, int, bool, datetime | None, datetime | None, str]
_K = TypeVar("_K")


def bin_of(seconds: float) -> int:
    if seconds < BIN_BASE:
        return 0
    return 1 + int(math.log(seconds / BIN_BASE) / _LOG_RATIO)


def bin_edges(i: int) -> tuple[float, float]:
    if i == 0:
        return 0.0, BIN_BASE
    return BIN_BASE * BIN_RATIO ** (i - 1), BIN_BASE * BIN_RATIO**i


def bucket_of(at: datetime) -> datetime:
    """The start of the 5-minute bucket holding `at` (UTC)."""
    return EPOCH + BUCKET * ((at - EPOCH) // BUCKET)


@dataclass
class Summary:
    """Runs by state, their dedupe hits and trials; delay (first start - trigger, backfills left out:
    paced on purpose) and latency (finish - trigger, succeeded runs) as histograms {bin: runs}."""

    states: Counter[str] = field(default_factory=Counter)
    hits: int = 0
    trials: int = 0
    delay: Counter[int] = field(default_factory=Counter)
    latency: Counter[int] = field(default_factory=Counter)

    def add(self, other: "Summary") -> None:
        self.states.update(other.states)
        self.hits += other.hits
        self.trials += other.trials
        self.delay.update(other.delay)
        self.latency.update(other.latency)

    def as_json(self) -> dict[str, Any]:
        return {
            "states": dict(self.states),
            "hits": self.hits,
            "trials": self.trials,
            "delay": {str(k): v for k, v in self.delay.items()},
            "latency": {str(k): v for k, v in self.latency.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Summary":
        return cls(
            states=Counter(data.get("states", {})),
            hits=data.get("hits", 0),
            trials=data.get("trials", 0),
            delay=Counter({int(k): v for k, v in data.get("delay", {}).items()}),
            latency=Counter({int(k): v for k, v in data.get("latency", {}).items()}),
        )


# Summaries by bucket, the runs read, and the oldest bucket among them (None: no runs).
Summaries: TypeAlias = tuple[dict[datetime, Summary], int, datetime | None]


def summarize(rows: Iterable[RunRow], *, key: Callable[[datetime], _K]) -> dict[_K, Summary]:
    """Summaries of runs (ROW_FIELDS tuples), grouped by key(trigger_at)."""
    out: dict[_K, Summary] = {}
    for trigger_at, state, hits, is_trial, start_at, finish_at, source in rows:
        k = key(trigger_at)
        s = out.get(k)
        if s is None:
            s = out[k] = Summary()
        s.states[state] += 1
        s.hits += hits
        s.trials += 1 if is_trial else 0
        if start_at is not None and source != TaskRun.Source.BACKFILL:
            s.delay[bin_of((start_at - trigger_at).total_seconds())] += 1
            if state == TaskRun.State.SUCCEEDED and finish_at is not None:
                s.latency[bin_of((finish_at - trigger_at).total_seconds())] += 1
    return out


def histogram_percentile(hist: Counter[int], q: float) -> float | None:
    """The q-quantile as percentile_cont computes it (between the values of ranks floor and ceil
    of (n-1)·q, linearly), each value placed within its bin as if the bin's runs were spread
    evenly across it: so within BIN_RATIO of percentile_cont. None: no runs."""
    n = sum(hist.values())
    if not n:
        return None
    rank = (n - 1) * q
    lo_rank, hi_rank = math.floor(rank), math.ceil(rank)
    lo, hi, seen = None, None, 0
    for i in sorted(hist):
        count = hist[i]
        left, right = bin_edges(i)
        if lo is None and lo_rank < seen + count:
            lo = left + (right - left) * (lo_rank - seen + 0.5) / count
        if hi_rank < seen + count:
            hi = left + (right - left) * (hi_rank - seen + 0.5) / count
            break
        seen += count
    assert lo is not None and hi is not None
    return lo + (hi - lo) * (rank - lo_rank)


def rolled_buckets(now: datetime) -> tuple[datetime, datetime]:
    """[first, last): the whole buckets of the window that the rollup serves. Before `first` is the
    window's partial first bucket; from `last` on, the LIVE buckets."""
    since = now - WINDOW
    first = bucket_of(since)
    if first < since:
        first += BUCKET
    return first, bucket_of(now) - LIVE + BUCKET


def _ranges(buckets: Iterable[datetime]) -> list[Range]:
    """The buckets as [start, end) ranges of trigger_at, consecutive ones merged (run_recent_idx)."""
    return _merged((b, b + BUCKET) for b in buckets)


def _merged(ranges: Iterable[Range]) -> list[Range]:
    """Ranges sorted, those that touch or overlap merged: disjoint, so no run is read twice."""
    out: list[Range] = []
    for start, end in sorted(ranges):
        if start >= end:
            continue
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _ranges_q(ranges: Iterable[Range]) -> Q:
    """trigger_at within any of the ranges."""
    q = Q(pk__in=[])
    for start, end in ranges:
        q |= Q(trigger_at__gte=start, trigger_at__lt=end)
    return q


def rollup_refresh(*, now: datetime) -> int:
    """Recompute the rollup's buckets without a row (newest first, FILL_PER_SWEEP at most) and the
    REFRESH_PER_SWEEP rows refreshed longest ago; drop rows past the window. Returns rows written.
    Idempotent; two sweepers at once write the same figures (the last write wins)."""
    first, last = rolled_buckets(now)
    have = dict(RunRollup.objects.filter(bucket__gte=first, bucket__lt=last).values_list("bucket", "refreshed_at"))
    wanted = [last - BUCKET * (i + 1) for i in range(int((last - first) / BUCKET))]
    todo = [b for b in wanted if b not in have][:FILL_PER_SWEEP]
    todo += sorted(have, key=have.__getitem__)[:REFRESH_PER_SWEEP]
    with transaction.atomic():
        RunRollup.objects.filter(bucket__lt=first).delete()
        if not todo:
            return 0
        found, _read, _oldest = _summaries(_ranges(todo))
        RunRollup.objects.bulk_create(
            [
                RunRollup(bucket=b, summary=found.get(b, Summary()).as_json(), refreshed_at=now)
                for b in sorted(set(todo))
            ],
            update_conflicts=True,
            unique_fields=["bucket"],
            update_fields=["summary", "refreshed_at"],
        )
    return len(set(todo))


def _summaries(ranges: list[Range], *, limit: int | None = None) -> Summaries:
    """summarize(runs, key=bucket_of) of the runs triggered within the ranges (disjoint), the newest
    `limit` of them (None: all); the runs read, and the oldest bucket among them (None: no runs).
    PostgreSQL summarises in SQL (a few rows per bucket come back instead of every run)."""
    if not ranges:
        return {}, 0, None
    if database.summarizes_in_sql():
        return _summarize_in_postgres_ranges(ranges, limit)
    rows = TaskRun.objects.filter(_ranges_q(ranges)).values_list(*ROW_FIELDS)
    found = list(rows if limit is None else rows.order_by("-trigger_at")[:limit])
    oldest = min((bucket_of(r[0]) for r in found), default=None)
    return summarize(found, key=bucket_of), len(found), oldest


def _summarize_in_postgres(buckets: list[datetime]) -> dict[datetime, Summary]:
    """The buckets' summaries computed by PostgreSQL (tests/runs/test_rollup.py compares them with Python's)."""
    ranges = _ranges(buckets)
    return _summarize_in_postgres_ranges(ranges, None)[0] if ranges else {}


def _summarize_in_postgres_ranges(ranges: list[Range], limit: int | None) -> Summaries:
    """_summaries in SQL (reports.sql, rollup_summaries), by the same rules as summarize."""
    out: dict[datetime, Summary] = {}
    read, oldest = 0, None
    for b, kind, key, n, hits, trials in database.report("rollup_summaries", summaries_params(ranges, limit)):
        if kind == "n":
            read, oldest = n, (EPOCH + BUCKET * b if b is not None else None)
            continue
        s = out.setdefault(EPOCH + BUCKET * b, Summary())
        if kind == "s":
            s.states[key] += n
            s.hits += hits
            s.trials += trials
        else:
            (s.delay if kind == "d" else s.latency)[int(key)] += n
    return out, read, oldest


def summaries_params(ranges: list[Range], limit: int | None) -> dict[str, object]:
    """rollup_summaries' parameters: the ranges as two arrays, the bucket and bin sizes, the states."""
    return {
        "starts": [start for start, _ in ranges],
        "ends": [end for _, end in ranges],
        "limit": limit,
        "epoch": EPOCH,
        "bucket_seconds": BUCKET.total_seconds(),
        "bin_base": BIN_BASE,
        "bin_ratio": BIN_RATIO,
        "succeeded": TaskRun.State.SUCCEEDED,
        "backfill": TaskRun.Source.BACKFILL,
    }


@dataclass
class RollupRead:
    """The window's summaries by hour; the oldest refresh among the rollup rows read (None: none);
    and `unread`, the window's 5-minute buckets in neither the rollup nor the runs read (LIVE_ROWS
    reached before the sweeper summarised them): the figures leave those out."""

    by_hour: dict[datetime, Summary]
    refreshed_at: datetime | None
    unread: int = 0


def rollup_read(*, now: datetime) -> RollupRead:
    """The window's summaries by hour: rolled buckets from the rollup, the rest from the runs, the
    newest LIVE_ROWS at most (two queries, bounded work whatever the number of runs)."""
    first, last = rolled_buckets(now)
    since = now - WINDOW
    rolled = {}
    oldest_refresh = None
    for bucket, summary, refreshed_at in RunRollup.objects.filter(bucket__gte=first, bucket__lt=last).values_list(
        "bucket", "summary", "refreshed_at"
    ):
        rolled[bucket] = Summary.from_json(summary)
        oldest_refresh = refreshed_at if oldest_refresh is None else min(oldest_refresh, refreshed_at)
    missing = [b for b in (first + BUCKET * i for i in range(int((last - first) / BUCKET))) if b not in rolled]
    live = _merged([(since, first), *_ranges(missing), (last, OPEN_END)])
    found, read, oldest = _summaries(live, limit=LIVE_ROWS + 1)
    unread = 0
    if read > LIVE_ROWS and oldest is not None:
        # The oldest bucket read may be cut short: it and every older bucket the rollup did not serve are left out.
        found = {b: s for b, s in found.items() if b > oldest}
        edge = [bucket_of(since)] if first > since else []
        live_buckets = [*edge, *missing, *(last + BUCKET * i for i in range(int((bucket_of(now) - last) / BUCKET) + 1))]
        unread = sum(1 for b in live_buckets if b <= oldest)
    by_hour: dict[datetime, Summary] = {}
    for bucket, s in [*found.items(), *rolled.items()]:
        by_hour.setdefault(_hour_of(bucket), Summary()).add(s)
    return RollupRead(by_hour, oldest_refresh, unread)


def _hour_of(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
