"""Admission: may this run start now, given the pools it draws from?

A run takes a slot in every pool it draws from (the global pool, its rule's pools, its agent's
pool) before it takes its run lease. Limits are enforced across all workers and machines by the
database: the counted check runs under a row lock on each limited Pool row (`select_for_update`
on PostgreSQL; SQLite's IMMEDIATE transactions serialize writers), so two admissions of one pool
never both see the last free slot. Pools without a limit take no lock, only a slot row, so that a
limit set later counts the runs already in. Limits are read from the locked row at every
admission: an admin edit applies to the next admission, with no cache and no restart.

A run that gets no slot holds no worker and no lease: it stays pending (no attempt counted) with a
PoolWaiter row saying why. When a slot is released, the next waiting run, in round-robin order
across fair keys, is handed the slot and dispatched; the sweeper repeats that for safety and
reclaims the slots of killed workers (a slot expires with the run lease it is tied to by fence).
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Min, Q, QuerySet

from runs.engine.dispatch import run_dispatch_on_commit
from runs.engine.store import Admit, NotPlain, Waiting, store
from runs.engine.store.protocol import PoolPair
from runs.models import Attempt, PoolKey, PoolSlot, PoolWaiter, TaskRun
from tasks.models import GLOBAL_POOL, Pool
from tasks.rules.flow import Bucket, FairGroup, Take, bucket_take, fair_order, pool_key_render
from tasks.rules.keys import KeyTemplateError

log = logging.getLogger("harness.admission")

# A handed-over slot waits this long for its run to arrive (a lost message: the sweeper re-dispatches).
HANDOFF_TTL = timedelta(seconds=30)
# A run waiting for a concurrency slot is woken by a release; this is only the safety net.
WAIT_RECHECK = timedelta(seconds=60)
WAKE_BATCH = 100
SWEEP_KEYS = 200

Reason = PoolWaiter.Reason


@dataclass(frozen=True)
class Refusal:
    """Why a run may not start yet: the pool (and key) it waits for."""

    pool: str
    key: str
    reason: str
    in_use: int | None = None
    limit: int | None = None
    until: datetime | None = None

    def __str__(self) -> str:
        where = f"pool {self.pool}" + (f" [{self.key}]" if self.key else "")
        if self.reason == Reason.CONCURRENCY:
            return f"{where}: {self.in_use} of {self.limit} in use"
        if self.reason == Reason.RATE:
            return f"{where}: rate limit, next token at {self.until:%H:%M:%S}"
        return f"{where}: paused by the provider until {self.until:%H:%M:%S}"


@dataclass(frozen=True)
class Admission:
    run_id: int
    fence: int
    refusal: Refusal | None = None
    # Another worker already admitted this very attempt (a duplicate message): nothing was taken.
    elsewhere: bool = False

    @property
    def admitted(self) -> bool:
        return self.refusal is None and not self.elsewhere


def run_pool_values(run: TaskRun) -> dict[str, str]:
    """What a pool key template may use (tasks.rules.flow.POOL_KEY_PLACEHOLDERS)."""
    return {
        "object_key": run.object_key,
        "rule": run.rule_name,
        "source": run.source,
        "triggered_by": run.triggered_by,
        "identity": run.identity,
        "skill": run.skill,
    }


def run_pools(run: TaskRun) -> tuple[list[Pool], set[int]]:
    """The enabled pools the run draws from, in id order: global, its rule's pools and its agent's
    pool; and which of them it draws from only as its agent's provider limit (their rate counts
    model calls, runs/engine/calls.py, not run starts). One query, two with an agent."""
    # Not rules__id=None: that would mean "pools no rule names".
    drawn = Q(name=GLOBAL_POOL) | Q(rules__id=run.rule_id) if run.rule_id is not None else Q(name=GLOBAL_POOL)
    named = {p.id: p for p in Pool.objects.filter(drawn, enabled=True)}
    if not named and not Pool.objects.filter(name=GLOBAL_POOL).exists():
        # Installed by a data migration; a flushed test database or a hand-deleted row gets it back.
        glob = Pool.objects.get_or_create(name=GLOBAL_POOL, defaults={"reason": "Every run draws from it."})[0]
        named = {glob.id: glob}
    agent = {}
    if run.agent:  # the agent the run was triggered with (copied from its rule at claim)
        agent = {p.id: p for p in Pool.objects.filter(enabled=True, agents__name=run.agent)}
    pools = {**agent, **named}
    return [pools[i] for i in sorted(pools)], set(agent) - set(named)


def _limited(pool: Pool) -> bool:
    return pool.max_concurrency is not None or bool(pool.rate_count)


# --- The plain admission: pools that limit nothing, taken in the lease claim's own statement. ---
#
# Most runs draw only from pools that limit nothing (the global pool as installed): admission then
# decides nothing and only records a slot row per pool, so that a limit set later counts the runs
# already in. Where the store can (its plain_admission; PostgreSQL: runs/engine/store/queries.sql, fragment
# plain_admission), the lease claim does that in its own statement; anything else (a limit, a pause,
# a key template, slots already there, no global pool) is pool_admit's, under the pool row locks.


def run_admit(
    run: TaskRun, *, worker: str, clock: Callable[[], datetime], ttl: timedelta, plain: bool
) -> tuple[Attempt | None, Admission | None]:
    """The executor's steps 4 and 5: a slot in every pool the run draws from, and the run lease.

    (attempt, admission) when the run is ours to start. An attempt of None: not started; the
    admission says why (its refusal: wait for the pool) and is the caller's to give back; None for
    it means nothing was taken (not claimable). Decides which way: `plain` (the store admits in
    the claim, and run_take found no pool that limits something) tries the lease claim's own
    statement first; a pool that limits something (NotPlain, nothing written) goes to pool_admit,
    under the pool row locks.
    """
    if plain:
        try:
            attempt = store().lease_claim(run, worker=worker, now=clock(), plain=True)
            return attempt, None if attempt is None else Admission(run.id, run.fence)
        except NotPlain:
            pass  # a pool limits something: admission decides, under the pool row locks
    # Admission and the lease claim commit together: one transaction, and the slots are taken
    # under the same pool row locks as before (Pool rows first, then the run row, as pool_wake).
    with transaction.atomic():
        admission = pool_admit(run, worker=worker, now=clock(), ttl=ttl)
        if not admission.admitted:  # refused, or a duplicate message (another worker starts it)
            return None, admission
        # Compare-and-set on the state, attempt count and fence just read: None, another worker won.
        return store().lease_claim(run, worker=worker, now=clock(), plain=False), admission


def _key(pool: Pool, values: dict[str, str]) -> str:
    try:
        return pool_key_render(pool.key_template, values)
    except KeyTemplateError:  # validated on save; an old row with a bad template gets one key
        return ""


def _fair_key(pool: Pool, keys: dict[int, str], pools: list[Pool], run: TaskRun) -> str:
    """Who a waiting run queues as: its key in this pool, else its key in another keyed pool,
    else its object, else its rule."""
    if keys.get(pool.id):
        return keys[pool.id]
    for other in pools:
        if keys.get(other.id):
            return keys[other.id]
    return run.object_key or run.rule_name or "-"


def pool_admit(run: TaskRun, *, worker: str, now: datetime, ttl: timedelta) -> Admission:
    """Take a slot in every pool the run draws from, or none and record why it waits.

    The slots are taken for the fence the run lease claim will write (run.fence + 1), so they
    belong to that attempt only. A slot handed over by a release is already there and kept.
    """
    fence = run.fence + 1
    values = run_pool_values(run)
    pools, agent_only = run_pools(run)
    # savepoint=False: the executor takes the run lease in the same transaction (no SAVEPOINT pair).
    with transaction.atomic(savepoint=False):
        limited = [p.id for p in pools if _limited(p)]
        if limited:
            # The row locks, in id order (no deadlock); the locked rows carry the limits as of now.
            fresh = {p.id: p for p in Pool.objects.select_for_update().filter(id__in=limited).order_by("id")}
            pools = [fresh.get(p.id, p) for p in pools]
        keys = {p.id: _key(p, values) for p in pools}
        mine = list(PoolSlot.objects.filter(run_id=run.id).values_list("pool_id", "fence", "worker", "expires_at"))
        if any(f == fence and w and w != worker and until > now for _, f, w, until in mine):
            # A duplicate message: another worker admitted this attempt and is taking (or holds) its
            # lease. Its slots are not ours to adopt, and not ours to free; the lease claim decides.
            return Admission(run.id, fence, elsewhere=True)
        if any(f != fence for _, f, _, _ in mine):  # an older attempt's, never released (a crash)
            store().slots_drop_stale(run_id=run.id, fence=fence)
        held = {pool_id for pool_id, f, _, _ in mine if f == fence}  # handed over by a release

        refusal: Refusal | None = None
        refused_pool: Pool | None = None
        takes: dict[int, Take] = {}
        for pool in pools:
            key = keys[pool.id]
            if pool.paused_until and pool.paused_until > now:
                refusal = Refusal(pool.name, key, Reason.PAUSED, until=pool.paused_until)
            elif pool.max_concurrency is not None and pool.id not in held:
                in_use = PoolSlot.objects.filter(pool=pool, key=key, expires_at__gt=now).count()
                if in_use >= pool.max_concurrency:
                    refusal = Refusal(pool.name, key, Reason.CONCURRENCY, in_use, pool.max_concurrency)
            if refusal is None and pool.rate_count and pool.id not in agent_only:
                # An agent's pool rate counts model calls (runs/engine/calls.py), not run starts.
                take = _bucket_take(pool, key, now=now)
                if take.retry_at is not None:  # not taken: the next token's time
                    until = _rate_queue_end(pool, key, take.retry_at, run_id=run.id, now=now)
                    refusal = Refusal(pool.name, key, Reason.RATE, limit=pool.rate_count, until=until)
                takes[pool.id] = take
            if refusal is not None:
                refused_pool = pool
                break

        if refusal is not None:
            assert refused_pool is not None, "set with the refusal"
            given_back = store().admission_refused(_waiting(run, refused_pool, keys, pools, refusal, now=now))
            transaction.on_commit(lambda: [pool_wake(pool_id=p, key=k, now=now) for p, k in given_back])
            return Admission(run.id, fence, refusal)

        for pool_id, take in takes.items():
            PoolKey.objects.update_or_create(
                pool_id=pool_id, key=keys[pool_id], defaults={"tokens": take.bucket.tokens, "tokens_at": now}
            )
        slots = tuple((p.id, keys[p.id]) for p in pools if p.id not in held)
        # Fair order is remembered at handovers only (pool_wake): without a queue there is no turn to take.
        store().admit(
            Admit(
                run_id=run.id, fence=fence, worker=worker, slots=slots, held=bool(held), now=now, expires_at=now + ttl
            )
        )
    return Admission(run.id, fence)


def _bucket_take(pool: Pool, key: str, *, now: datetime) -> Take:
    # Asked only of a pool with a rate, which the pool_rate_needs_period constraint gives a period.
    assert pool.rate_count is not None and pool.rate_period_seconds is not None, "a pool without a rate"
    state = PoolKey.objects.filter(pool=pool, key=key).values_list("tokens", "tokens_at").first()
    bucket = Bucket(tokens=state[0], at=state[1]) if state and state[0] is not None and state[1] else None
    return bucket_take(
        bucket, rate_count=pool.rate_count, period_seconds=pool.rate_period_seconds, burst=pool.rate_burst, now=now
    )


def _rate_queue_end(pool: Pool, key: str, retry_at: datetime, *, run_id: int, now: datetime) -> datetime:
    """The next token time, spaced by the runs already waiting for one, so waiters wake one per
    token instead of all at the next token."""
    assert pool.rate_count and pool.rate_period_seconds is not None, "a pool without a rate"
    ahead = PoolWaiter.objects.filter(pool=pool, key=key, reason=Reason.RATE, until__gt=now).exclude(run_id=run_id)
    spacing = pool.rate_period_seconds / pool.rate_count
    return retry_at + timedelta(seconds=ahead.count() * spacing)


def _waiting(
    run: TaskRun, pool: Pool, keys: dict[int, str], pools: list[Pool], refusal: Refusal, *, now: datetime
) -> Waiting:
    """The refusal as recorded: a concurrency waiter is woken by a release (run_after is only the
    safety net); a rate or paused waiter is due when its token or pause ends."""
    return Waiting(
        run_id=run.id,
        fence=run.fence,
        pool_id=pool.id,
        key=refusal.key,
        fair_key=_fair_key(pool, keys, pools, run),
        reason=refusal.reason,
        in_use=refusal.in_use,
        limit=refusal.limit,
        until=refusal.until,
        run_after=now + WAIT_RECHECK if refusal.reason == Reason.CONCURRENCY else refusal.until,
        now=now,
    )


def _mark_started(pool_id: int, fair_key: str, *, now: datetime) -> None:
    PoolKey.objects.update_or_create(pool_id=pool_id, key=fair_key, defaults={"last_start_at": now})


def pool_release(*, run_id: int, fence: int, now: datetime, worker: str | None = None) -> int:
    """The attempt ended (any outcome): give back its slots and hand each to the next waiting run.
    `worker`: only the slots that worker holds (an executor frees its own, never a duplicate's)."""
    return pool_wake_freed(store().slots_release(run_id=run_id, fence=fence, worker=worker), now=now)


def pool_wake_freed(waiting: list[PoolPair], *, now: datetime) -> int:
    """Hand freed slots that runs wait for (their (pool, key) pairs) to the next of them."""
    return sum(pool_wake(pool_id=p, key=k, now=now) for p, k in waiting)


def pool_wake(*, pool_id: int, key: str, now: datetime) -> int:
    """Hand free slots of one pool (and key) to waiting runs, round robin across fair keys.

    Each chosen run gets its slot now (held for HANDOFF_TTL until it arrives) and is dispatched, so
    a run arriving meanwhile finds the pool full and cannot jump the line.
    """
    with transaction.atomic():
        pool = Pool.objects.select_for_update().filter(id=pool_id).first()
        if pool is None:
            return 0
        waiting = PoolWaiter.objects.filter(pool_id=pool_id, key=key, reason=Reason.CONCURRENCY).exclude(
            run__pool_slots__pool_id=pool_id
        )
        if pool.enabled and pool.max_concurrency is not None:
            in_use = PoolSlot.objects.filter(pool_id=pool_id, key=key, expires_at__gt=now).count()
            free = min(pool.max_concurrency - in_use, WAKE_BATCH)
        else:
            free = WAKE_BATCH  # limit removed or pool disabled: everyone waiting may go
        if free <= 0:
            return 0
        groups = list(waiting.values("fair_key").annotate(oldest=Min("since")).order_by("oldest")[:1000])
        if not groups:
            return 0
        last = dict(
            PoolKey.objects.filter(pool_id=pool_id, key__in=[g["fair_key"] for g in groups]).values_list(
                "key", "last_start_at"
            )
        )
        order = fair_order([FairGroup(g["fair_key"], last.get(g["fair_key"]), g["oldest"]) for g in groups], picks=free)
        chosen = _pick(waiting, order)
        runs = list(TaskRun.objects.filter(id__in=chosen, state__in=TaskRun.CLAIMABLE).values_list("id", "fence"))
        store().hand_over(pool_id=pool_id, key=key, runs=runs, now=now, expires_at=now + HANDOFF_TTL)
        fair = dict(PoolWaiter.objects.filter(run_id__in=[r for r, _ in runs]).values_list("run_id", "fair_key"))
        for run_id, _fence in runs:
            if run_id in fair:  # its waiter may be gone meanwhile (coalesced away)
                _mark_started(pool_id, fair[run_id], now=now)
        ids = [r for r, _ in runs]
        run_dispatch_on_commit(run_ids=ids, now=now)
    return len(ids)


def _pick(waiting: QuerySet[PoolWaiter], order: list[str]) -> list[int]:
    """The oldest waiter of each key in `order`, in turn (a key listed twice gives its next one)."""
    per_key: dict[str, list[int]] = {}
    for fair_key in dict.fromkeys(order):
        need = order.count(fair_key)
        per_key[fair_key] = list(
            waiting.filter(fair_key=fair_key).order_by("since", "run_id").values_list("run_id", flat=True)[:need]
        )
    chosen = []
    for fair_key in order:
        if per_key[fair_key]:
            chosen.append(per_key[fair_key].pop(0))
    return chosen


def pool_sweep(*, now: datetime) -> dict[str, int]:
    """The sweeper's pass: reclaim expired slots (killed workers, lost handovers), forget waiters
    whose run no longer waits, and hand free capacity to waiting runs."""
    reclaimed = store().slots_expired_drop(now=now, limit=1000)
    forgotten = store().waiters_forget()
    keys = set(
        PoolWaiter.objects.filter(reason=Reason.CONCURRENCY).values_list("pool_id", "key").distinct()[:SWEEP_KEYS]
    )
    woken = sum(pool_wake(pool_id=p, key=k, now=now) for p, k in sorted(keys))
    return {"slots_reclaimed": reclaimed, "waiters_forgotten": forgotten, "woken": woken}


def pool_pause(*, pool_id: int, until: datetime) -> None:
    """A provider asked us to wait (429 Retry-After): pause the whole pool until then (never shorten a pause)."""
    Pool.objects.filter(id=pool_id).filter(Q(paused_until__isnull=True) | Q(paused_until__lt=until)).update(
        paused_until=until
    )


def pool_call_take(*, pool: Pool, run: TaskRun | None, now: datetime) -> datetime | None:
    """One model call's token from an agent's rate pool; None when taken, else when the next one is there."""
    if not pool.enabled or not pool.rate_count:
        return None
    key = _key(pool, run_pool_values(run)) if run is not None else ""
    with transaction.atomic():
        locked = Pool.objects.select_for_update().get(id=pool.id)
        if not locked.rate_count or not locked.rate_period_seconds:
            return None
        take = _bucket_take(locked, key, now=now)
        PoolKey.objects.update_or_create(
            pool_id=pool.id, key=key, defaults={"tokens": take.bucket.tokens, "tokens_at": now}
        )
    return None if take.taken else take.retry_at
