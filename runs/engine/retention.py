"""Bounded retention of decisions: the sweeper deletes those older than the configured period, and
counts what it deletes by rule and reason (DecisionTally), so the decision counters never go back."""

from collections import Counter
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F

from runs.engine.store import store
from runs.models import Decision, DecisionTally

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
    with transaction.atomic():
        # Locked, so two sweeps count each deleted decision once (PostgreSQL: the second waits and
        # finds the rows gone; SQLite: IMMEDIATE transactions run one at a time).
        gone = store().decisions_delete(ids)
        if not gone:
            return 0
        for (rule_name, reason), n in sorted(Counter(gone).items()):
            tally, _created = DecisionTally.objects.get_or_create(rule_name=rule_name, reason=reason)
            DecisionTally.objects.filter(pk=tally.pk).update(count=F("count") + n)
    return len(gone)
