"""Rules against one time axis: rows are rules, columns are time buckets, so an outage is one band.

`grid_window` (pure) chooses the axis for a zoom level; `grid_build` counts each rule's slots per
bucket in the database (two queries whatever the number of rules and slots: one conditional count
per bucket), and keeps the rules that cost most.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, F, Q

from runs.engine.outages import slot_grace
from runs.models import Decision, TaskRun

COLUMNS = 48
ZOOMS = {"1h": timedelta(hours=1), "6h": timedelta(hours=6), "1d": timedelta(days=1), "7d": timedelta(days=7)}
GRID_ROWS = 200  # rules shown, those with most missed slots first
MISSED = ("missed", "superseded", "catchup_capped")  # runs.engine.incidents.MISSED_REASONS, as stored


@dataclass(frozen=True)
class Window:
    zoom: str
    start: datetime
    bucket: timedelta

    @property
    def end(self) -> datetime:
        return self.start + self.bucket * COLUMNS

    def edges(self) -> list[datetime]:
        return [self.start + self.bucket * i for i in range(COLUMNS + 1)]


def grid_window(*, started_at: datetime, ended_at: datetime | None, now: datetime, zoom: str | None) -> Window:
    """The axis for `zoom` (one of ZOOMS; None or unknown: the narrowest that holds the incident with
    room around it). The incident starts an eighth of the way in, so the time before it shows too."""
    span = (ended_at or now) - started_at
    if zoom not in ZOOMS:
        zoom = next((z for z, width in ZOOMS.items() if width >= span * 1.5), "7d")
    width = ZOOMS[zoom]
    return Window(zoom=zoom, start=started_at - width / 8, bucket=width / COLUMNS)


def cell_state(*, missed: int, late: int, ran: int, other: int) -> str:
    """What one cell shows, worst first: a missed slot, a slot caught up late, slots run, slots decided
    otherwise (calendar, window, paused...), or nothing due."""
    if missed:
        return "missed"
    if late:
        return "late"
    if ran:
        return "ran"
    if other:
        return "other"
    return ""


def grid_build(window: Window) -> dict[str, Any]:
    """Rows of (rule name, [cell state per bucket], missed total), GRID_ROWS at most, most missed first."""
    edges = window.edges()
    buckets = [Q(slot__gte=edges[i], slot__lt=edges[i + 1]) for i in range(COLUMNS)]
    miss = Q(reason__in=MISSED)
    decided = (
        Decision.objects.filter(created_at__gte=window.start, slot__gte=window.start, slot__lt=window.end)
        .values("rule_id", "rule__name")
        .annotate(
            **{f"m{i}": Count("id", filter=b & miss) for i, b in enumerate(buckets)},
            **{f"o{i}": Count("id", filter=b & ~miss) for i, b in enumerate(buckets)},
        )
        .order_by()
    )
    late = Q(trigger_at__gt=F("slot") + slot_grace())
    ran = (
        TaskRun.objects.filter(
            trigger_at__gte=window.start, slot__gte=window.start, slot__lt=window.end, rule__isnull=False
        )
        .values("rule_id", "rule_name")
        .annotate(
            **{f"r{i}": Count("id", filter=b) for i, b in enumerate(buckets)},
            **{f"l{i}": Count("id", filter=b & late) for i, b in enumerate(buckets)},
        )
        .order_by()
    )
    counts: dict[int, dict[str, Any]] = {}
    for row in decided:
        counts[row["rule_id"]] = {"name": row["rule__name"], **row}
    for run_row in ran:
        counts.setdefault(run_row["rule_id"], {"name": run_row["rule_name"]}).update(run_row)
    rows = []
    for rule_id, c in counts.items():
        cells = [
            cell_state(missed=c.get(f"m{i}", 0), late=c.get(f"l{i}", 0), ran=c.get(f"r{i}", 0), other=c.get(f"o{i}", 0))
            for i in range(COLUMNS)
        ]
        rows.append({"rule_id": rule_id, "name": c["name"], "cells": cells, "missed": cells.count("missed")})
    rows.sort(key=lambda r: (-r["missed"], r["name"]))
    return {
        "window": window,
        "columns": edges[:-1],
        "rows": rows[:GRID_ROWS],
        "more": max(len(rows) - GRID_ROWS, 0),
        "zooms": list(ZOOMS),
    }
