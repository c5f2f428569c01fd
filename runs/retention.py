"""Bounded retention of decisions: the sweeper deletes those older than the configured period."""

from datetime import datetime, timedelta

from django.conf import settings

from runs.models import Decision

# Deleted per sweep at most, so one sweep after a long pause stays short; the next continues.
RETENTION_BATCH = 5000


def decision_sweep(*, now: datetime, days: int | None = None) -> int:
    """Delete decisions created more than `days` (default: the setting) before `now`; returns how many."""
    days = settings.HARNESS["DECISION_RETENTION_DAYS"] if days is None else days
    cutoff = now - timedelta(days=days)
    # decision_sweep: served by decision_created_idx.
    ids = list(
        Decision.objects.filter(created_at__lt=cutoff)
        .order_by("created_at")
        .values_list("id", flat=True)[:RETENTION_BATCH]
    )
    if not ids:
        return 0
    deleted, _ = Decision.objects.filter(id__in=ids).delete()
    return deleted
