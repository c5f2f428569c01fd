"""Backpressure at intake: is a trigger's scope above its high watermark of pending runs?

Every sheddable claim (runs.engine.claims.run_claim with recomputable work) asks `pressure_check`. The
pending count is a count by index (run_pending_idx), measured at most once a second per scope and
process (HARNESS["BACKPRESSURE_CACHE_SECONDS"]) plus the runs this process admitted since, so a
burst within one tick or one second is still seen. The shedding state lives on the Backpressure
row and flips with a compare-and-set, so all processes agree and hysteresis holds across them.
"""

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings

from harness_site.audit.models import AuditEntry
from harness_site.audit.services import Actor, audit_record
from runs.models import Backpressure, TaskRun
from tasks.models import Pool, TriggerRule
from tasks.models.pool import GLOBAL_POOL
from tasks.rules import backpressure

log = logging.getLogger("harness.backpressure")


@dataclass(frozen=True)
class Pressure:
    """A scope that is shedding, as the decision records it."""

    pool: str  # the pool whose watermark is crossed (global: every pending run)
    pending: int
    high_watermark: int | None
    low_watermark: int | None
    shedding_since: datetime | None

    def as_details(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "pending": self.pending,
            "high_watermark": self.high_watermark,
            "low_watermark": self.low_watermark,
            "shedding_since": self.shedding_since.isoformat() if self.shedding_since else None,
        }


@dataclass
class _Gauge:
    measured_at: datetime
    pending: int
    admitted: int = field(default=0)

    @property
    def estimate(self) -> int:
        return self.pending + self.admitted


@dataclass
class _Marks:
    """The rows with a high watermark, and the pools of each rule asked about, as read at `at`."""

    at: datetime
    rows: dict[int, Backpressure]  # pool id -> row
    rule_pools: dict[int, list[int]] = field(default_factory=dict)


# Process-local, refreshed once a second: measurements and watermarks, never the state itself.
_gauges: dict[int, _Gauge] = {}
_marks: list[_Marks] = []


def pressure_cache_clear() -> None:
    """Forget what this process read (tests, and an operator edit in this process)."""
    _gauges.clear()
    _marks.clear()


def pending_count(pool: Pool) -> int:
    """Pending runs in a pool's scope: all of them for the global pool, else those of the rules
    that name the pool. Served by run_pending_idx (partial on state = pending, by rule)."""
    pending = TaskRun.objects.filter(state=TaskRun.State.PENDING)
    if pool.name != GLOBAL_POOL:
        pending = pending.filter(rule__pools=pool)
    return pending.count()


def pressure_check(rule: TriggerRule | None, *, now: datetime) -> Pressure | None:
    """The first of the rule's scopes (global pool first, then the rule's pools) that is shedding
    now, or None when all admit.

    Flips a scope's stored state when its pending estimate crosses a watermark (compare-and-set on
    the old state: two processes crossing together flip it once).
    """
    for row in _scopes(rule, now=now):
        gauge = _gauge(row, now=now)
        marks = backpressure.Watermarks(high=row.high_watermark, low=row.low_watermark)
        shedding = backpressure.shedding_next(gauge.estimate, shedding=row.shedding, marks=marks)
        if shedding != row.shedding:
            flipped = Backpressure.objects.filter(pk=row.pk, shedding=row.shedding).update(
                shedding=shedding, changed_at=now, pending_at_change=gauge.estimate
            )
            if flipped:
                log.warning(
                    "backpressure %s: %s at %d pending (high %s, low %s)",
                    row.pool.name,
                    "shedding recomputable triggers" if shedding else "admitting again",
                    gauge.estimate,
                    row.high_watermark,
                    row.low_watermark,
                )
            row.shedding, row.changed_at, row.pending_at_change = shedding, now, gauge.estimate
        if row.shedding:
            return Pressure(row.pool.name, gauge.estimate, row.high_watermark, row.low_watermark, row.changed_at)
    return None


def pressure_note_admitted(rule: TriggerRule | None) -> None:
    """Count one admitted run against this process's measurements, until the next measurement."""
    if not _marks:
        return
    marks = _marks[0]
    pools = {pool_id for pool_id, row in marks.rows.items() if row.pool.name == GLOBAL_POOL}
    pools.update(marks.rule_pools.get(rule.pk, ()) if rule is not None else ())
    for pool_id in pools:
        if pool_id in _gauges:
            _gauges[pool_id].admitted += 1


def _fresh(at: datetime, *, now: datetime) -> bool:
    return 0 <= (now - at).total_seconds() < settings.HARNESS["BACKPRESSURE_CACHE_SECONDS"]


def _scopes(rule: TriggerRule | None, *, now: datetime) -> list[Backpressure]:
    if not _marks or not _fresh(_marks[0].at, now=now):
        rows = Backpressure.objects.select_related("pool").filter(high_watermark__isnull=False)
        _marks[:] = [_Marks(at=now, rows={r.pool_id: r for r in rows})]
    marks = _marks[0]
    if not marks.rows:
        return []
    scopes = [r for r in marks.rows.values() if r.pool.name == GLOBAL_POOL]
    if rule is not None:
        if rule.pk not in marks.rule_pools:
            marks.rule_pools[rule.pk] = list(rule.pools.values_list("id", flat=True))
        scopes += [marks.rows[p] for p in marks.rule_pools[rule.pk] if p in marks.rows]
    return list(dict.fromkeys(scopes))


def _gauge(row: Backpressure, *, now: datetime) -> _Gauge:
    gauge = _gauges.get(row.pool_id)
    if gauge is not None and _fresh(gauge.measured_at, now=now):
        return gauge
    gauge = _Gauge(measured_at=now, pending=pending_count(row.pool))
    _gauges[row.pool_id] = gauge
    return gauge


def watermarks_set(
    *, row: Backpressure, actor: Actor, now: datetime, reason: str = "", before: dict[str, Any] | None = None
) -> None:
    """Save an operator's watermark edit with an audit row; intake reads it within the cache time."""
    row.save()
    after = {"high_watermark": row.high_watermark, "low_watermark": row.low_watermark}
    audit_record(
        actor=actor,
        action=AuditEntry.Action.WATERMARK_CHANGE,
        target=row,
        now=now,
        reason=reason,
        details={"before": before or {}, "after": after},
        label=f"backpressure {row.pool.name}",
    )
    pressure_cache_clear()
