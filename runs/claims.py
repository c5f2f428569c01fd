"""Claiming a unit of work: one run per biz_key, ever (invariant 1)."""

from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F

from runs.dispatch import run_dispatch_on_commit
from runs.models import TaskRun


@dataclass(frozen=True)
class ClaimResult:
    run: TaskRun
    created: bool


def run_claim(
    *,
    biz_key: str,
    skill: str,
    source: str,
    triggered_by: str,
    now: datetime,
    payload: dict,
    rule=None,
    slot: datetime | None = None,
    run_after: datetime | None = None,
    dispatch: bool = True,
    is_trial: bool = False,
    identity: str = "",
    object_key: str = "",
    state: str | None = None,
) -> ClaimResult:
    """Insert the run, or count a dedupe hit on the run that already has this biz_key.

    Insert-and-catch-conflict, never check-then-insert: the unique constraint decides the winner
    even across processes. A dedupe hit is acknowledged (returned) and counted, never retried.
    """
    try:
        # A savepoint, so the conflict does not poison the caller's transaction.
        with transaction.atomic():
            run = TaskRun.objects.create(
                biz_key=biz_key,
                rule=rule,
                rule_name=rule.name if rule else "",
                rule_version=rule.version if rule else None,
                skill=skill,
                source=source,
                triggered_by=triggered_by,
                slot=slot,
                trigger_at=now,
                run_after=run_after or now,
                payload=payload,
                is_trial=is_trial,
                identity=identity,
                object_key=object_key,
                state=state or TaskRun.State.PENDING,
            )
    except IntegrityError:
        updated = TaskRun.objects.filter(biz_key=biz_key).update(dedupe_hits=F("dedupe_hits") + 1)
        if not updated:  # the conflict was not on biz_key: a real error
            raise
        return ClaimResult(run=TaskRun.objects.get(biz_key=biz_key), created=False)
    if dispatch and run.run_after <= now and run.state == TaskRun.State.PENDING:
        run_dispatch_on_commit(run_ids=[run.id], now=now)
    return ClaimResult(run=run, created=True)
