"""The run store's writes through the ORM, as plain functions: the whole of the SQLite store
(runs.engine.store.sqlite), and the operations the PostgreSQL store has no statement of its own for. Each
backend names every operation it takes from here, one line each, so none is inherited silently.
"""

from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Count, F, Q, Sum
from django.db.models.functions import Coalesce
from django.utils.dateparse import parse_datetime

from runs.engine.store.protocol import (
    Admit,
    AttemptEnd,
    BudgetPark,
    Failure,
    ForceRelease,
    Gate,
    Held,
    KeyedLeaseRenewal,
    NotPlain,
    PoolPair,
    Proposal,
    Replay,
    RunLeaseRenewal,
    Succeeded,
    Taken,
    Waiting,
)
from runs.models import (
    ActionProposal,
    Attempt,
    Decision,
    ExternalCall,
    Lease,
    PoolSlot,
    PoolWaiter,
    RunStep,
    SlotHold,
    TaskRun,
)
from tasks.agents.budgets import Spend
from tasks.models import Agent, TriggerRule

M = TypeVar("M", bound=models.Model)

# What a call's record learns from the call (the rest is written before it).
CALL_RESULT_FIELDS = (
    "status",
    "error_kind",
    "error_digest",
    "latency_ms",
    "prompt_tokens",
    "completion_tokens",
    "output_valid",
    "state",
)


def _db() -> BaseDatabaseWrapper:
    # The thread's own connection, looked up once: each attribute of django.db.connection is a
    # lookup in a context-local store.
    return connections[DEFAULT_DB_ALIAS]


# --- claims ---


def runs_insert(runs: list[TaskRun]) -> list[TaskRun]:
    """Insert the runs in one statement, skipping any whose biz_key is taken (invariant 1: the
    unique index decides, never a read first; of two runs with one key the first is inserted).
    Returns the runs inserted, which get their ids. A conflict on any other constraint raises."""
    return _insert_new(TaskRun, runs, unique=("biz_key",))


def decisions_insert(decisions: list[Decision]) -> list[Decision]:
    """Insert slot decisions, one per (rule, slot) (decision_one_per_slot decides: another
    tick's stands). Returns the ones inserted."""
    return _insert_new(Decision, decisions, unique=("rule_id", "slot"))


def dedupe_hit(biz_key: str) -> TaskRun | None:
    """Count a dedupe hit on the run holding `biz_key` and return it, in one statement."""
    quote = _db().ops.quote_name
    table = quote(TaskRun._meta.db_table)
    # Named columns, not `*`: a column a later release adds is none of this release's business.
    columns = ", ".join(quote(str(f.column)) for f in TaskRun._meta.concrete_fields)
    found = list(
        TaskRun.objects.raw(
            f"UPDATE {table} SET dedupe_hits = dedupe_hits + 1 WHERE biz_key = %s RETURNING {columns}", [biz_key]
        )
    )
    return found[0] if found else None


def dedupe_hits_add(taken: dict[str, int]) -> None:
    """Count `n` dedupe hits on the run holding each key."""
    by_count: dict[int, list[str]] = {}
    for key, n in taken.items():
        by_count.setdefault(n, []).append(key)
    for n, keys in by_count.items():
        TaskRun.objects.filter(biz_key__in=keys).update(dedupe_hits=F("dedupe_hits") + n)


def run_create(run: TaskRun) -> None:
    """Insert one run in a savepoint (it gets its id); any conflict raises IntegrityError, on its
    biz_key or on run_one_pending_per_object (a coalescing rule's one pending run per object), and
    leaves the caller's transaction usable."""
    with transaction.atomic():
        run.save(force_insert=True)


def coalesce_pending(*, rule_id: int, object_key: str, now: datetime) -> TaskRun | None:
    """Inside a transaction: the object's pending, never-started run of a coalescing rule, taken
    out of the way (state coalesced, its pool waiter row gone) and returned as it was; None: there
    is none, or it started meanwhile. Locked first, so a worker's compare-and-set claim and this
    update cannot both succeed: a run that started is never replaced."""
    head = (
        TaskRun.objects.select_for_update()
        .filter(rule_id=rule_id, object_key=object_key, coalesces=True, state=TaskRun.State.PENDING, attempts=0)
        .first()
    )
    if head is None:
        return None
    if not TaskRun.objects.filter(pk=head.pk, state=TaskRun.State.PENDING, attempts=0).update(
        state=TaskRun.State.COALESCED, finish_at=now
    ):
        return None
    PoolWaiter.objects.filter(run_id=head.pk).delete()
    return head


def run_note(run_id: int, *, last_error: str) -> None:
    """A finished run's last word (what replaced it)."""
    TaskRun.objects.filter(pk=run_id).update(last_error=last_error)


def decision_record(decision: Decision, *, replace: bool) -> Decision:
    """Insert a trigger's decision (one per rule and slot, or per rule and business key for a
    trigger without a slot), or, when it exists (another tick, a resend), count one more hit on it,
    with `replace` also taking the new reason and details. Returns the stored decision."""
    try:
        with transaction.atomic():
            decision.save(force_insert=True)
        return decision
    except IntegrityError:
        pass
    lookup: dict[str, Any] = {"rule_id": decision.rule_id, "slot": decision.slot}
    if decision.slot is None:
        lookup["biz_key"] = decision.biz_key
    fields: dict[str, Any] = {"hits": F("hits") + 1}
    if replace:
        fields.update(
            reason=decision.reason,
            details=decision.details,
            survivor_id=decision.survivor_id,
            created_at=decision.created_at,
        )
    Decision.objects.filter(**lookup).update(**fields)
    return Decision.objects.get(**lookup)


def decisions_delete(ids: list[int]) -> list[tuple[str, str]]:
    """Delete these decisions, locked first so two sweeps delete each once; the (rule name,
    reason) of each one deleted here."""
    gone = list(
        Decision.objects.select_for_update(of=("self",)).filter(id__in=ids).values_list("id", "rule__name", "reason")
    )
    Decision.objects.filter(id__in=[g[0] for g in gone]).delete()
    return [(rule_name, reason) for _, rule_name, reason in gone]


def hold_record(hold: SlotHold) -> bool:
    """Hold a slot for a later re-check; False: another tick holds it already."""
    try:
        with transaction.atomic():
            hold.save(force_insert=True)
        return True
    except IntegrityError:
        return False


def hold_recheck(hold_id: int, *, recheck_at: datetime | None, checks: int, details: dict[str, Any]) -> None:
    SlotHold.objects.filter(pk=hold_id).update(recheck_at=recheck_at, checks=checks, details=details)


def hold_release(hold_id: int) -> None:
    SlotHold.objects.filter(pk=hold_id).delete()


def runs_mark_dispatched(run_ids: list[int], *, now: datetime) -> list[tuple[int, str, str]]:
    """The runs marked sent at `now` (one more dispatch each); each one's (id, trace id, queue)."""
    runs = TaskRun.objects.filter(id__in=run_ids)
    rows = list(runs.values_list("id", "trace_id", "queue"))
    runs.update(dispatched_at=now, dispatches=F("dispatches") + 1)
    return rows


def rules_advance(rules: list[TriggerRule]) -> None:
    """Write each rule's last_slot_at and next_fire_at."""
    if rules:
        TriggerRule.objects.bulk_update(rules, ["last_slot_at", "next_fire_at"])


# --- the worker ---


def run_read(run_id: int) -> TaskRun | None:
    return TaskRun.objects.filter(id=run_id).first()


def run_take(run_id: int, *, worker: str, now: datetime) -> Taken:
    """Read the run only (claims_in_take False): the executor's full path claims it."""
    return Taken(run_read(run_id))


def lease_claim(run: TaskRun, *, worker: str, now: datetime, plain: bool) -> Attempt | None:
    """Take the run's lease and start its next attempt: compare-and-set on the state, attempt
    count and fence just read (None: another worker got there first, it is not due, or it
    changed). `plain` always raises NotPlain here, with nothing written (plain_admission False)."""
    if plain:
        raise NotPlain()
    attempt = next_attempt(run, worker=worker, now=now)
    changes = claim_changes(run, worker=worker, now=now)
    # savepoint=False: inside the executor's admission transaction this adds no SAVEPOINT pair.
    with transaction.atomic(savepoint=False):
        claimed = TaskRun.objects.filter(
            id=run.id, state__in=TaskRun.CLAIMABLE, run_after__lte=now, fence=run.fence, attempts=run.attempts
        ).update(**changes)
        if not claimed:
            return None
        attempt.save(force_insert=True)
    claimed_in_memory(run, changes)
    return attempt


def run_leases_renew(leases: list[RunLeaseRenewal]) -> set[int]:
    """Extend each (run id, fence, new expiry) lease while its fence holds it, and its attempt's
    pool slots with it; returns the run ids renewed (a missing one was lost)."""
    renewed = set()
    with transaction.atomic():
        for run_id, fence, expires_at in leases:
            if TaskRun.objects.filter(id=run_id, fence=fence, state=TaskRun.State.RUNNING).update(
                lease_expires_at=expires_at
            ):
                PoolSlot.objects.filter(run_id=run_id, fence=fence).update(expires_at=expires_at)
                renewed.add(run_id)
    return renewed


def fence_holds(*, run_id: int, fence: int) -> bool:
    """Inside a transaction: whether `fence` still holds the run's lease, with the row locked
    (PostgreSQL) or the write lock held (SQLite's IMMEDIATE transactions) until commit."""
    return TaskRun.objects.select_for_update().filter(id=run_id, fence=fence, state=TaskRun.State.RUNNING).exists()


def _fenced(run_id: int, held_by: int, /, **fields: Any) -> bool:
    """Write `fields` (a new fence among them, maybe) and release the lease, only if fence
    `held_by` still holds it (one statement)."""
    return bool(
        TaskRun.objects.filter(id=run_id, fence=held_by, state=TaskRun.State.RUNNING).update(
            lease_owner="", lease_expires_at=None, **fields
        )
    )


def run_succeed(run: TaskRun, attempt: Attempt, result: Any, *, now: datetime, release_worker: str | None) -> Succeeded:
    """The run done with `result` and the attempt succeeded, fenced; the slots stay (waiting None:
    releases_on_success False)."""
    with transaction.atomic():
        done = _fenced(
            run.id,
            run.fence,
            state=TaskRun.State.SUCCEEDED,
            finish_at=now,
            result=result,
            last_error="",
            last_error_kind="",
        )
        if done:
            Attempt.objects.filter(id=attempt.id).update(outcome=Attempt.Outcome.SUCCEEDED, finished_at=now)
    return Succeeded(done, None)


def slots_release(*, run_id: int, fence: int, worker: str | None) -> list[PoolPair]:
    """Give back the attempt's slots (only `worker`'s, when named); the freed (pool, key) pairs
    that a run waits for (a waiter recorded at this very moment is the sweeper's to wake)."""
    slots = PoolSlot.objects.filter(run_id=run_id, fence=fence)
    if worker is not None:
        slots = slots.filter(worker=worker)
    freed = list(slots.values_list("id", "pool_id", "key"))
    if not freed:
        return []
    PoolSlot.objects.filter(id__in=[i for i, _, _ in freed]).delete()
    waiting = set(
        PoolWaiter.objects.filter(reason=PoolWaiter.Reason.CONCURRENCY, pool_id__in=[p for _, p, _ in freed])
        .values_list("pool_id", "key")
        .distinct()
    )
    return [(p, k) for _, p, k in freed if (p, k) in waiting]


# --- admission: pool slots and waiters ---


def slots_drop_stale(*, run_id: int, fence: int) -> None:
    """An older attempt's slots, never released (a crash): gone before this attempt's admission."""
    PoolSlot.objects.filter(run_id=run_id).exclude(fence=fence).delete()


def admit(admit: Admit) -> None:
    """See Admit. Inside the admission's transaction, under the pool row locks."""
    if admit.held:
        PoolSlot.objects.filter(run_id=admit.run_id, fence=admit.fence).update(
            worker=admit.worker, expires_at=admit.expires_at
        )
    PoolSlot.objects.bulk_create(
        [
            PoolSlot(
                pool_id=pool_id,
                key=key,
                run_id=admit.run_id,
                fence=admit.fence,
                worker=admit.worker,
                acquired_at=admit.now,
                expires_at=admit.expires_at,
            )
            for pool_id, key in admit.slots
        ]
    )
    PoolWaiter.objects.filter(run_id=admit.run_id).delete()


def admission_refused(waiting: Waiting) -> list[PoolPair]:
    """See Waiting; the slots of the attempt's fence (fence + 1) given back, as (pool, key) pairs
    for the caller to hand on."""
    TaskRun.objects.filter(id=waiting.run_id, state__in=TaskRun.CLAIMABLE, fence=waiting.fence).update(
        run_after=waiting.run_after, dispatched_at=None
    )
    row = {
        "pool_id": waiting.pool_id,
        "key": waiting.key,
        "fair_key": waiting.fair_key,
        "reason": waiting.reason,
        "in_use": waiting.in_use,
        "limit": waiting.limit,
        "until": waiting.until,
        "checked_at": waiting.now,
    }
    # One waiter per run: its `since` is when it began to wait.
    waiter, created = PoolWaiter.objects.get_or_create(run_id=waiting.run_id, defaults={**row, "since": waiting.now})
    if not created:
        for name, value in row.items():
            setattr(waiter, name, value)
        waiter.save()
    slots = PoolSlot.objects.filter(run_id=waiting.run_id, fence=waiting.fence + 1)
    given_back = [(p, k) for p, k in slots.values_list("pool_id", "key")]
    slots.delete()
    return given_back


def hand_over(*, pool_id: int, key: str, runs: list[tuple[int, int]], now: datetime, expires_at: datetime) -> None:
    """Each (run id, fence) read gets a slot of the pool and key for its next attempt (fence + 1),
    held until `expires_at` for it to arrive, and is due now."""
    PoolSlot.objects.bulk_create(
        [
            PoolSlot(pool_id=pool_id, key=key, run_id=run_id, fence=fence + 1, acquired_at=now, expires_at=expires_at)
            for run_id, fence in runs
        ]
    )
    TaskRun.objects.filter(id__in=[r for r, _ in runs], state__in=TaskRun.CLAIMABLE).update(run_after=now)


def slots_expired_drop(*, now: datetime, limit: int) -> int:
    """Up to `limit` slots expired at `now` (killed workers, lost handovers) gone; how many."""
    expired = list(PoolSlot.objects.filter(expires_at__lte=now).values_list("id", flat=True)[:limit])
    PoolSlot.objects.filter(id__in=expired).delete()
    return len(expired)


def waiters_forget() -> int:
    """Waiter rows of runs that no longer wait (started, finished, cancelled) gone; how many."""
    forgotten, _ = PoolWaiter.objects.exclude(run__state__in=TaskRun.CLAIMABLE).delete()
    return forgotten


# --- outcomes ---


def _failure_fields(failure: Failure) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "first_failure_at": failure.first_failure_at,
        "last_error": failure.error.message,
        "last_error_kind": failure.error.kind,
    }
    if failure.take_lease:
        fields["fence"] = F("fence") + 1
    return fields


def _failure_write(failure: Failure, **fields: Any) -> bool:
    fields = {**_failure_fields(failure), **fields}
    if failure.fence is not None:
        return _fenced(failure.run_id, failure.fence, **fields)
    return bool(TaskRun.objects.filter(id=failure.run_id, state__in=failure.from_states).update(**fields))


def retry_later(failure: Failure, *, run_after: datetime) -> bool:
    """The run waits to be retried at `run_after`, its lease released (conditional: see Failure)."""
    return _failure_write(failure, state=TaskRun.State.WAITING_RETRY, run_after=run_after)


def fail(failure: Failure) -> bool:
    """The run failed for good (conditional: see Failure). Only runs.engine.outcome.run_fail calls it."""
    return _failure_write(failure, state=TaskRun.State.FAILED, finish_at=failure.now)


def attempt_end(end: AttemptEnd) -> bool:
    """Write how an attempt ended; False: no such attempt (or not in `only_from`)."""
    attempts = Attempt.objects.filter(run_id=end.run_id, number=end.number)
    if end.only_from:
        attempts = attempts.filter(outcome__in=end.only_from)
    fields: dict[str, Any] = {"outcome": end.outcome, "finished_at": end.now}
    if end.error is not None:
        fields.update(error_kind=end.error.kind, error_digest=end.error.digest, error=end.error.message)
    elif end.error_kind is not None:
        fields["error_kind"] = end.error_kind
    return bool(attempts.update(**fields))


def park_for_approval(run: TaskRun, attempt: Attempt, proposal: Proposal, *, now: datetime) -> bool:
    """Fenced: the run awaits approval, its lease released, the attempt parked, the proposal
    recorded once per (run, step). False: fenced out, nothing written."""
    with transaction.atomic():
        if not _fenced(run.id, run.fence, state=TaskRun.State.AWAITING_APPROVAL, last_error="", last_error_kind=""):
            return False
        Attempt.objects.filter(id=attempt.id).update(outcome=Attempt.Outcome.PARKED, finished_at=now)
        ActionProposal.objects.get_or_create(
            run_id=run.id,
            step=proposal.step,
            defaults={
                "action": proposal.action,
                "risk": proposal.risk,
                "args": proposal.args,
                "proposed_at": now,
                "expires_at": proposal.expires_at,
            },
        )
    return True


def park_for_budget(run: TaskRun, attempt: Attempt, park: BudgetPark) -> bool:
    """Fenced: the run waits until `park.until`, its lease released and its attempt taken back
    (deleted, count decremented). False: fenced out, nothing written."""
    with transaction.atomic():
        written = _fenced(
            run.id,
            run.fence,
            state=TaskRun.State.WAITING_RETRY,
            run_after=park.until,
            attempts=F("attempts") - 1,
            last_error=park.message,
            last_error_kind=park.kind,
        )
        if written:
            Attempt.objects.filter(id=attempt.id).delete()
    return written


def cancel_late(run_id: int, *, now: datetime, message: str, kind: str) -> bool:
    """Cancel a run still pending and never attempted (compare-and-set: False when a worker
    claimed it meanwhile, or it changed)."""
    return bool(
        TaskRun.objects.filter(id=run_id, state=TaskRun.State.PENDING, attempts=0).update(
            state=TaskRun.State.CANCELLED, finish_at=now, last_error=message, last_error_kind=kind
        )
    )


def push_back(run_id: int, *, run_after: datetime) -> bool:
    """A claimable run due again at `run_after`, for a later dispatch (a run executing elsewhere is
    left alone: False)."""
    return bool(
        TaskRun.objects.filter(id=run_id, state__in=TaskRun.CLAIMABLE).update(run_after=run_after, dispatched_at=None)
    )


def expiring(run_id: int, *, fence: int, now: datetime) -> TaskRun | None:
    """Inside a transaction: the running run whose lease under `fence` expired before `now`, locked
    until commit (skipped when another sweeper holds it); None: renewed, finished or taken."""
    return (
        TaskRun.objects.select_for_update(skip_locked=True)
        .filter(id=run_id, fence=fence, state=TaskRun.State.RUNNING, lease_expires_at__lt=now)
        .first()
    )


def slots_drop(*, run_id: int, fence: int) -> None:
    """The slots of an attempt whose lease was taken away: gone with it (pool_sweep wakes waiters)."""
    PoolSlot.objects.filter(run_id=run_id, fence=fence).delete()


# --- operators ---


def replay(replay: Replay) -> bool:
    """Compare-and-set on the state read: due now, pending. Raises IntegrityError when a newer
    pending run of the same coalescing object exists (run_one_pending_per_object)."""
    fields: dict[str, Any] = {"state": TaskRun.State.PENDING, "run_after": replay.now, "finish_at": None}
    if replay.from_state == TaskRun.State.FAILED:
        # A fresh retry window for the new attempt; the attempt cap still counts every attempt.
        fields["first_failure_at"] = None
    with transaction.atomic():
        return bool(TaskRun.objects.filter(id=replay.run_id, state=replay.from_state).update(**fields))


def cancel(run_id: int, *, from_state: str, now: datetime) -> bool:
    """Compare-and-set on the state read: cancelled (the executor claims only pending/waiting runs)."""
    return bool(
        TaskRun.objects.filter(id=run_id, state=from_state).update(state=TaskRun.State.CANCELLED, finish_at=now)
    )


def force_release(release: ForceRelease) -> bool:
    """See ForceRelease. False: finished or renewed under a new fence meanwhile, nothing written."""
    with transaction.atomic():
        released = TaskRun.objects.filter(id=release.run_id, fence=release.fence, state=TaskRun.State.RUNNING).update(
            state=TaskRun.State.WAITING_RETRY,
            run_after=release.now,
            fence=F("fence") + 1,
            lease_owner="",
            lease_expires_at=None,
            last_error=release.message,
            last_error_kind=release.error_kind,
        )
        if not released:
            return False
        Attempt.objects.filter(run_id=release.run_id, fence=release.fence, outcome=Attempt.Outcome.RUNNING).update(
            outcome=Attempt.Outcome.FENCED,
            finished_at=release.now,
            error_kind=release.error_kind,
            error=release.message,
        )
        slots_drop(run_id=release.run_id, fence=release.fence)
    return True


def keyed_lease_force_release(lease_id: int, *, owner: str, token: int, now: datetime) -> bool:
    """Expire a keyed lease now and bump its token (compare-and-set on the owner and token read)."""
    return bool(
        Lease.objects.filter(id=lease_id, token=token, owner=owner).update(
            owner="", expires_at=now, token=F("token") + 1
        )
    )


def approve(run_id: int, *, now: datetime) -> bool:
    """A run parked for an action's approval, due now (compare-and-set on awaiting_approval)."""
    return bool(
        TaskRun.objects.filter(id=run_id, state=TaskRun.State.AWAITING_APPROVAL).update(
            state=TaskRun.State.PENDING, run_after=now
        )
    )


def reject(run_id: int, *, now: datetime, message: str, kind: str) -> bool:
    """A run parked for an action's approval, cancelled (compare-and-set on awaiting_approval)."""
    return bool(
        TaskRun.objects.filter(id=run_id, state=TaskRun.State.AWAITING_APPROVAL).update(
            state=TaskRun.State.CANCELLED, finish_at=now, last_error=message, last_error_kind=kind
        )
    )


def _gated(gate: Gate) -> models.QuerySet[TaskRun]:
    # Only runs gated before their first attempt: the same state is used by runs parked for an
    # action approval, which have attempts and are approved elsewhere.
    return TaskRun.objects.filter(
        id__in=gate.run_ids, state=TaskRun.State.AWAITING_APPROVAL, source__in=gate.sources, attempts=0
    )


def gate_release(gate: Gate, *, run_after: datetime) -> bool:
    """The gated runs released, due at `run_after` (compare-and-set: False when decided meanwhile)."""
    return bool(
        _gated(gate).update(
            state=TaskRun.State.PENDING,
            run_after=run_after,
            approved_by=gate.approved_by[:150],
            approved_at=gate.now,
            dispatched_at=None,
        )
    )


def gate_reject(gate: Gate, *, message: str) -> int:
    """The gated runs cancelled; how many (a run decided meanwhile is not counted)."""
    return _gated(gate).update(
        state=TaskRun.State.CANCELLED,
        finish_at=gate.now,
        approved_by=gate.approved_by[:150],
        approved_at=gate.now,
        last_error=message,
    )


# --- keyed leases ---


def keyed_lease_acquire(
    *, key: str, owner: str, expires_at: datetime, now: datetime, run_id: int | None
) -> Held | None:
    """Take the lease if it is free or expired, bumping its token in the same statement; None when
    someone else holds it. A missing row is inserted (a unique-key conflict means another owner
    inserted it first: the update is tried once more)."""
    for _ in range(2):
        # Compare-and-set: a row count of 0 means the lease is held by someone else (or absent).
        taken = Lease.objects.filter(Q(owner="") | Q(expires_at__isnull=True) | Q(expires_at__lte=now), key=key).update(
            owner=owner, token=F("token") + 1, acquired_at=now, expires_at=expires_at, run_id=run_id
        )
        if taken:
            token = Lease.objects.filter(key=key, owner=owner).values_list("token", flat=True).first()
            return Held(key, owner, token, expires_at) if token is not None else None
        if Lease.objects.filter(key=key).exists():
            return None
        try:
            with transaction.atomic():
                Lease.objects.create(
                    key=key, owner=owner, token=1, acquired_at=now, expires_at=expires_at, run_id=run_id
                )
            return Held(key, owner, 1, expires_at)
        except IntegrityError:
            continue  # inserted by another owner meanwhile: it may already have released it
    return None


def keyed_lease_renew(held: Held, *, expires_at: datetime, now: datetime) -> Held | None:
    """Extend the lease while it is still `held` (same owner and token, not expired); None: lost."""
    renewed = Lease.objects.filter(key=held.key, owner=held.owner, token=held.token, expires_at__gt=now).update(
        expires_at=expires_at
    )
    return Held(held.key, held.owner, held.token, expires_at) if renewed else None


def keyed_lease_release(held: Held) -> bool:
    """Give the lease back; False if it had already been taken by someone else (nothing changed)."""
    return bool(
        Lease.objects.filter(key=held.key, owner=held.owner, token=held.token).update(
            owner="", expires_at=None, run_id=None
        )
    )


def keyed_leases_renew(leases: list[KeyedLeaseRenewal]) -> set[str]:
    """Extend each (key, owner, token, now, new expiry) keyed lease still held by that owner and
    token and not expired at `now`; returns the keys renewed."""
    renewed = set()
    with transaction.atomic():
        for key, owner, token, now, expires_at in leases:
            if Lease.objects.filter(key=key, owner=owner, token=token, expires_at__gt=now).update(
                expires_at=expires_at
            ):
                renewed.add(key)
    return renewed


# --- steps: checkpoints under the run's fence ---


def step_read(run_id: int, name: str) -> RunStep | None:
    """The run's checkpoint of step `name`; None: not done yet (runstep_unique_name)."""
    return RunStep.objects.filter(run_id=run_id, name=name).order_by("id").first()


def steps_read(run_id: int) -> dict[str, RunStep]:
    """Every checkpoint of the run, by step name (an attempt reads them once: runs.engine.steps)."""
    found: dict[str, RunStep] = {}
    for step in RunStep.objects.filter(run_id=run_id).order_by("id"):
        found.setdefault(step.name, step)
    return found


def step_fence(*, run_id: int, fence: int, name: str) -> tuple[RunStep | None, bool]:
    """Inside a write step's transaction: the step's checkpoint (None: not done), and whether
    `fence` still holds the run, locked until commit as in fence_holds (False once done: a done
    step writes nothing, so its fence is not asked)."""
    done = step_read(run_id, name)
    return done, done is None and fence_holds(run_id=run_id, fence=fence)


def step_insert(step: RunStep) -> None:
    """Inside a fenced transaction: the checkpoint. A second one for the same (run, name) raises."""
    step.save(force_insert=True)


def step_checkpoint(step: RunStep, *, fence: int) -> bool:
    """The checkpoint written only while `fence` holds the run (False: fenced out, nothing written)."""
    with transaction.atomic():
        if not fence_holds(run_id=step.run_id, fence=fence):
            return False
        step_insert(step)
    return True


# --- model calls: records and the agents' budgets ---


def agent_read(name: str) -> Agent | None:
    return Agent.objects.filter(name=name).first()


def call_record(call: ExternalCall) -> None:
    """Write a call's record: inserted (it gets its id), or, when the budget counted it before
    the call, updated with what the call returned."""
    if call.pk is None:
        call.save(force_insert=True)
    else:
        ExternalCall.objects.filter(id=call.pk).update(**{f: getattr(call, f) for f in CALL_RESULT_FIELDS})


def call_delete(call_id: int) -> None:
    ExternalCall.objects.filter(id=call_id).delete()


def call_mark_lost(run_id: int) -> int:
    """A run's calls still "sent" once its lease expired: their worker is gone (served by call_sent_idx)."""
    return ExternalCall.objects.filter(run_id=run_id, state=ExternalCall.State.SENT).update(
        state=ExternalCall.State.LOST
    )


def call_mark_output(call_id: int, *, valid: bool) -> None:
    ExternalCall.objects.filter(id=call_id).update(output_valid=valid)


def agent_limits_lock(agent_id: int) -> tuple[int | None, int | None]:
    """Inside a transaction: the agent's (max calls, max tokens) per hour, its row locked until
    commit, so budget counts under it are taken one at a time ((None, None): no such agent)."""
    limits = (
        Agent.objects.select_for_update()
        .filter(id=agent_id)
        .values_list("max_calls_per_hour", "max_tokens_per_hour")
        .first()
    )
    return limits or (None, None)


def agent_spend(*, agent_id: int, start: datetime, end: datetime) -> Spend:
    """Calls and tokens the agent used in [start, end) (served by call_agent_window_idx)."""
    row = ExternalCall.objects.filter(agent_id=agent_id, started_at__gte=start, started_at__lt=end).aggregate(
        calls=Count("id"),
        tokens=Coalesce(Sum("prompt_tokens"), 0) + Coalesce(Sum("completion_tokens"), 0),
    )
    return Spend(calls=row["calls"], tokens=row["tokens"] or 0)


def call_insert_counting(call: ExternalCall, *, start: datetime, end: datetime) -> Spend:
    """Under agent_limits_lock: insert the call's record and return the agent's spend in
    [start, end) before it. The caller rolls the transaction back when the spend refuses it."""
    assert call.agent_id is not None, "a budget counts an agent's calls"
    spend = agent_spend(agent_id=call.agent_id, start=start, end=end)
    call_record(call)
    return spend


# --- shared by both backends ---


def next_attempt(run: TaskRun, *, worker: str, now: datetime) -> Attempt:
    return Attempt(run=run, number=run.attempts + 1, fence=run.fence + 1, worker=worker, started_at=now)


def claim_changes(run: TaskRun, *, worker: str, now: datetime) -> dict[str, Any]:
    return {
        "state": TaskRun.State.RUNNING,
        "attempts": run.attempts + 1,
        "fence": run.fence + 1,
        "lease_owner": worker,
        "lease_expires_at": now + timedelta(seconds=run.lease_ttl_seconds),
        "start_at": run.start_at or now,
        "executed_by": worker,
    }


def claimed_in_memory(run: TaskRun, changes: dict[str, Any]) -> None:
    """The claim's changes, in memory: the attempt needs no second read of the row."""
    for name, value in changes.items():
        setattr(run, name, value)


def _insert_new(model: type[M], objs: list[M], *, unique: tuple[str, ...]) -> list[M]:
    """Insert `objs` in one INSERT ... ON CONFLICT DO NOTHING RETURNING (SQLite 3.35+), skipping
    any whose `unique` columns are taken; the inserted ones get their ids."""
    if not objs:
        return []
    db = _db()
    qn = db.ops.quote_name
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    columns = ", ".join(qn(c) for c in unique)
    sql = (
        f"INSERT INTO {qn(model._meta.db_table)} ({', '.join(qn(str(f.column)) for f in fields)}) "
        f"VALUES {', '.join([one] * len(objs))} ON CONFLICT ({columns}) DO NOTHING RETURNING {qn('id')}, {columns}"
    )
    params = [f.get_db_prep_save(f.pre_save(obj, True), db) for obj in objs for f in fields]
    with db.cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    return keyed_created(model, objs, unique, rows, alias=db.alias)


def keyed_created(
    model: type[M], objs: list[M], unique: tuple[str, ...], rows: list[tuple[Any, ...]], *, alias: str
) -> list[M]:
    """The objects an INSERT ... RETURNING id, <unique columns> inserted, given their ids; of two
    objects with one key, the first."""
    key_fields = [cast("models.Field[Any, Any]", model._meta.get_field(c.removesuffix("_id"))) for c in unique]
    ids = {tuple(key_value(f, v) for f, v in zip(key_fields, row[1:], strict=True)): row[0] for row in rows}
    created = []
    for obj in objs:
        key = tuple(key_value(f, getattr(obj, f.attname)) for f in key_fields)
        if key in ids:
            obj.pk = ids.pop(key)  # popped: a later object with the same key was not inserted
            obj._state.adding, obj._state.db = False, alias
            created.append(obj)
    return created


def key_value(field: "models.Field[Any, Any]", value: Any) -> Any:
    """A key column as returned by either database, comparable with the object's value: SQLite
    returns instants as text or naive UTC datetimes."""
    if not isinstance(field, models.DateTimeField) or value is None:
        return value
    if isinstance(value, str):
        value = parse_datetime(value)
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value
