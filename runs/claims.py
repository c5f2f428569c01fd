"""Claiming a unit of work: one run per biz_key, ever (invariant 1)."""

from dataclasses import dataclass, field
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F

from runs.dispatch import run_dispatch_on_commit
from runs.models import TaskRun
from tasks.models import TriggerRule
from tasks.rules import keys


@dataclass(frozen=True)
class Work:
    """What one trigger asks to be run, assembled by tasks.triggers.work for every trigger kind.

    `identity` is the executing identity ("" for an unrestricted rule), `object_key` the object the
    run is serialized on ("" for none); `payload` carries the rule's snapshot as it was at trigger
    time; `start_by` the latest start of a first attempt (the rule's start window), if any.
    """

    biz_key: str
    skill: str
    source: str
    triggered_by: str
    payload: dict = field(hash=False)
    rule: TriggerRule | None = None  # None: a run from the API or a test, with no rule behind it
    identity: str = ""
    object_key: str = ""
    slot: datetime | None = None
    run_after: datetime | None = None
    start_by: datetime | None = None
    is_trial: bool = False


@dataclass(frozen=True)
class ClaimResult:
    run: TaskRun
    created: bool


def run_claim(work: Work, *, now: datetime, dispatch: bool = True, state: str | None = None) -> ClaimResult:
    """Insert the run for `work`, or count a dedupe hit on the run that already has its biz_key.

    Insert-and-catch-conflict, never check-then-insert: the unique constraint decides the winner
    even across processes. A dedupe hit is acknowledged (returned) and counted, never retried.
    `state` other than pending (awaiting approval) is for runs that must not start on their own.
    Raises ValueError for a key outside the rule's namespaces (keys.in_namespace): keys are scoped
    by construction (tasks.triggers.work), and this is the one door every run comes through.
    """
    if not keys.in_namespace(work.biz_key, work.rule.pk if work.rule else None):
        raise ValueError(f"biz_key {work.biz_key!r} is outside the namespace of its rule")
    payload = dict(work.payload)
    if work.start_by is not None:
        payload["start_by"] = work.start_by.isoformat()
    rule = work.rule
    try:
        # A savepoint, so the conflict does not poison the caller's transaction.
        with transaction.atomic():
            run = TaskRun.objects.create(
                biz_key=work.biz_key,
                rule=rule,
                rule_name=rule.name if rule else "",
                rule_version=rule.version if rule else None,
                skill=work.skill,
                source=work.source,
                triggered_by=work.triggered_by,
                slot=work.slot,
                trigger_at=now,
                run_after=work.run_after or now,
                payload=payload,
                is_trial=work.is_trial,
                identity=work.identity,
                object_key=work.object_key,
                state=state or TaskRun.State.PENDING,
            )
    except IntegrityError:
        updated = TaskRun.objects.filter(biz_key=work.biz_key).update(dedupe_hits=F("dedupe_hits") + 1)
        if not updated:  # the conflict was not on biz_key: a real error
            raise
        return ClaimResult(run=TaskRun.objects.get(biz_key=work.biz_key), created=False)
    if dispatch and run.run_after <= now and run.state == TaskRun.State.PENDING:
        run_dispatch_on_commit(run_ids=[run.id], now=now)
    return ClaimResult(run=run, created=True)
