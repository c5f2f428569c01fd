"""What every run-store backend returns, and the writes they share (the ORM's, on either database)."""

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, models, transaction
from django.db.backends.signals import connection_created
from django.db.models import Count, F, Sum
from django.db.models.functions import Coalesce
from django.utils.dateparse import parse_datetime

from runs.models import Attempt, Decision, ExternalCall, Lease, PoolSlot, PoolWaiter, RunStep, TaskRun
from tasks.agents.budgets import Spend
from tasks.models import Agent, TriggerRule


@dataclass(frozen=True)
class Taken:
    """A run as read by the worker: with the attempt started when the same statement claimed it
    (`plain`: whether every pool it draws from limits nothing; None when not asked)."""

    run: TaskRun | None
    attempt: Attempt | None = None
    plain: bool | None = None


class NotPlain(Exception):
    """A pool the run draws from limits something, or the run holds slots already: pool_admit's turn."""


@dataclass(frozen=True)
class Succeeded:
    """`written`: the fence held and the run is done. `waiting`: the freed (pool, key) pairs a run
    waits for, when the slots were given back in the same statement; None when they were not."""

    written: bool
    waiting: list | None


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


def _db():
    # The thread's own connection, looked up once: each attribute of django.db.connection is a
    # lookup in a context-local store.
    return connections[DEFAULT_DB_ALIAS]


# A connection idle for less than this is written on without a check (a SELECT 1 round trip): if it
# died meanwhile the write fails, and the sweeper expires the lease as for a lost worker.
CHECK_AFTER_IDLE_SECONDS = 1.0
# When this thread's connection was last known good: opened or drawn from the pool, checked, or
# last used before a wait began (connection_release).
_known_good = threading.local()


def _connected(sender, connection, **_kwargs) -> None:
    _known_good.at = time.monotonic()


connection_created.connect(_connected, dispatch_uid="runs.store.known_good")


class OrmStore:
    """The writes both backends make through the ORM; a backend overrides what it does better."""

    # Whether the lease claim can admit a run whose pools limit nothing in its own statement.
    plain_admission = False
    # Whether report queries may summarize in SQL (runs.rollup).
    summarizes_in_sql = False

    # --- connections ---

    def connection_refresh(self) -> None:
        """Before a write that may follow a wait (a skill's run, a step's work): drop this thread's
        connection if the server closed it meanwhile, so the write reconnects instead of failing.
        Checked only when it has been idle CHECK_AFTER_IDLE_SECONDS or more: a connection just drawn
        from the pool or used a moment ago is not. Never inside a transaction (it would be lost)."""
        db = _db()
        if db.in_atomic_block or db.connection is None:
            return
        now = time.monotonic()
        if now - getattr(_known_good, "at", 0.0) < CHECK_AFTER_IDLE_SECONDS:
            return
        _known_good.at = now
        if not db.is_usable():
            db.close()

    def connection_close(self) -> None:
        """Close this thread's connection (a background thread before it ends, or after an error)."""
        _db().close()

    def connection_release(self) -> None:
        """This thread is about to wait (a skill, a model call, a renewal period): give its
        connection back where a pool holds it (DATABASES OPTIONS "pool"), so a thread that waits
        holds none; elsewhere keep it for the next write, checked then if the wait was long."""
        db = _db()
        if db.settings_dict.get("OPTIONS", {}).get("pool") and not db.in_atomic_block:
            db.close()
        _known_good.at = time.monotonic()

    def connection_unpooled(self) -> None:
        """Where a pool holds the connections, give this thread a connection of its own outside it,
        opened when first used. For the one thread that keeps every lease of its process: when
        hundreds of runs borrow every pooled connection at once, it must not queue behind them
        while their leases run out. One connection more than the pool, only while it is open."""
        db = _db()
        options = db.settings_dict.get("OPTIONS", {})
        if options.get("pool") and not db.in_atomic_block:
            db.close()
            own = {**db.settings_dict, "OPTIONS": {k: v for k, v in options.items() if k != "pool"}}
            connections[DEFAULT_DB_ALIAS] = type(db)(own, DEFAULT_DB_ALIAS)

    def pool_stats(self) -> dict[str, int] | None:
        """This process's connection pool as psycopg_pool counts it (get_stats(): pool_size,
        pool_available, requests_waiting, requests_num, requests_wait_ms, ...), or None where no pool
        holds the connections (SQLite, or HARNESS_DB_POOL_MAX 0). Counters run from the pool's start."""
        db = _db()
        if not db.settings_dict.get("OPTIONS", {}).get("pool"):
            return None
        pool = db.pool  # Django's pool for this alias, shared by the process's threads
        return dict(pool.get_stats()) if pool is not None else None

    def rows(self, sql: str, params: list | dict) -> list[tuple]:
        """A read-only report query (runs.metrics, runs.rollup), on this thread's connection."""
        with _db().cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall()

    def seconds_between(self, later: str, earlier: str) -> str:
        """SQL for the seconds from column `earlier` to `later`, as a float."""
        return f"ROUND((julianday({later}) - julianday({earlier})) * 86400.0, 3)"

    def values_check(self, obj: models.Model, *, add: bool) -> None:
        """Prepare every value of `obj` as its save would, raising what the save would raise (a ""
        time or a 20-digit number passes full_clean and fails only inside the save)."""
        db = _db()
        for f in obj._meta.concrete_fields:
            f.get_db_prep_save(f.pre_save(obj, add=add), connection=db)

    def json_prep(self, value: Any) -> Any:
        return TaskRun._meta.get_field("result").get_db_prep_save(value, _db())

    # --- claims ---

    def runs_insert(self, runs: list[TaskRun]) -> list[TaskRun]:
        """Insert the runs in one statement, skipping any whose biz_key is taken (invariant 1: the
        unique index decides, never a read first; of two runs with one key the first is inserted).
        Returns the runs inserted, which get their ids. A conflict on any other constraint raises."""
        return _insert_new(TaskRun, runs, unique=("biz_key",))

    def decisions_insert(self, decisions: list[Decision]) -> list[Decision]:
        """Insert slot decisions, one per (rule, slot) (decision_one_per_slot decides: another
        tick's stands). Returns the ones inserted."""
        return _insert_new(Decision, decisions, unique=("rule_id", "slot"))

    def dedupe_hit(self, biz_key: str) -> TaskRun | None:
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

    def dedupe_hits_add(self, taken: dict[str, int]) -> None:
        """Count `n` dedupe hits on the run holding each key."""
        by_count: dict[int, list[str]] = {}
        for key, n in taken.items():
            by_count.setdefault(n, []).append(key)
        for n, keys in by_count.items():
            TaskRun.objects.filter(biz_key__in=keys).update(dedupe_hits=F("dedupe_hits") + n)

    def rules_advance(self, rules: list[TriggerRule]) -> None:
        """Write each rule's last_slot_at and next_fire_at."""
        if rules:
            TriggerRule.objects.bulk_update(rules, ["last_slot_at", "next_fire_at"])

    # --- the worker ---

    def run_read(self, run_id: int) -> TaskRun | None:
        return TaskRun.objects.filter(id=run_id).first()

    def run_take(self, run_id: int, *, worker: str, now: datetime) -> Taken:
        """Read the run; a backend that can also claims it when nothing stands in its way."""
        return Taken(self.run_read(run_id))

    def lease_claim(self, run: TaskRun, *, worker: str, now: datetime, plain: bool) -> Attempt | None:
        """Take the run's lease and start its next attempt: compare-and-set on the state, attempt
        count and fence just read (None: another worker got there first, it is not due, or it
        changed). `plain`: admit it in the same statement where every pool limits nothing, else
        raise NotPlain with nothing written (a backend without it always raises)."""
        if plain:
            raise NotPlain()
        attempt = _next_attempt(run, worker=worker, now=now)
        changes = _claim_changes(run, worker=worker, now=now)
        # savepoint=False: inside the executor's admission transaction this adds no SAVEPOINT pair.
        with transaction.atomic(savepoint=False):
            claimed = TaskRun.objects.filter(
                id=run.id, state__in=TaskRun.CLAIMABLE, run_after__lte=now, fence=run.fence, attempts=run.attempts
            ).update(**changes)
            if not claimed:
                return None
            attempt.save(force_insert=True)
        _claimed(run, changes)
        return attempt

    def run_leases_renew(self, leases: list[tuple[int, int, datetime]]) -> set[int]:
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

    def keyed_leases_renew(self, leases: list[tuple[str, str, int, datetime, datetime]]) -> set[str]:
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

    def fence_holds(self, *, run_id: int, fence: int) -> bool:
        """Inside a transaction: whether `fence` still holds the run's lease, with the row locked
        (PostgreSQL) or the write lock held (SQLite's IMMEDIATE transactions) until commit."""
        return TaskRun.objects.select_for_update().filter(id=run_id, fence=fence, state=TaskRun.State.RUNNING).exists()

    def run_fenced_update(self, run: TaskRun, **fields) -> bool:
        """Write `fields` and release the lease, only if `run.fence` still holds it (one statement).
        False: another worker or the sweeper took the run meanwhile; nothing was written."""
        return bool(
            TaskRun.objects.filter(id=run.id, fence=run.fence, state=TaskRun.State.RUNNING).update(
                lease_owner="", lease_expires_at=None, **fields
            )
        )

    def run_succeed(
        self, run: TaskRun, attempt: Attempt, result: Any, *, now: datetime, release_worker: str | None
    ) -> Succeeded:
        """The run done with `result` and the attempt succeeded, fenced; the slots stay (waiting None)."""
        with transaction.atomic():
            done = self.run_fenced_update(
                run, state=TaskRun.State.SUCCEEDED, finish_at=now, result=result, last_error="", last_error_kind=""
            )
            if done:
                Attempt.objects.filter(id=attempt.id).update(outcome=Attempt.Outcome.SUCCEEDED, finished_at=now)
        return Succeeded(done, None)

    def slots_release(self, *, run_id: int, fence: int, worker: str | None) -> list[tuple[int, str]]:
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

    # --- steps: checkpoints under the run's fence ---

    def step_read(self, run_id: int, name: str) -> RunStep | None:
        """The run's checkpoint of step `name`; None: not done yet (runstep_unique_name)."""
        return RunStep.objects.filter(run_id=run_id, name=name).order_by("id").first()

    def step_fence(self, *, run_id: int, fence: int, name: str) -> tuple[RunStep | None, bool]:
        """Inside a write step's transaction: the step's checkpoint (None: not done), and whether
        `fence` still holds the run, locked until commit as in fence_holds (False once done: a done
        step writes nothing, so its fence is not asked)."""
        done = self.step_read(run_id, name)
        return done, done is None and self.fence_holds(run_id=run_id, fence=fence)

    def step_insert(self, step: RunStep) -> None:
        """Inside a fenced transaction: the checkpoint. A second one for the same (run, name) raises."""
        step.save(force_insert=True)

    def step_checkpoint(self, step: RunStep, *, fence: int) -> bool:
        """The checkpoint written only while `fence` holds the run (False: fenced out, nothing written)."""
        with transaction.atomic():
            if not self.fence_holds(run_id=step.run_id, fence=fence):
                return False
            self.step_insert(step)
        return True

    # --- model calls: records and the agents' budgets ---

    def agent_read(self, name: str) -> Agent | None:
        return Agent.objects.filter(name=name).first()

    def call_record(self, call: ExternalCall) -> None:
        """Write a call's record: inserted (it gets its id), or, when the budget counted it before
        the call, updated with what the call returned."""
        if call.pk is None:
            call.save(force_insert=True)
        else:
            ExternalCall.objects.filter(id=call.pk).update(**{f: getattr(call, f) for f in CALL_RESULT_FIELDS})

    def call_delete(self, call_id: int) -> None:
        ExternalCall.objects.filter(id=call_id).delete()

    def call_mark_lost(self, run_id: int) -> int:
        """A run's calls still "sent" once its lease expired: their worker is gone (served by call_sent_idx)."""
        return ExternalCall.objects.filter(run_id=run_id, state=ExternalCall.State.SENT).update(
            state=ExternalCall.State.LOST
        )

    def call_mark_output(self, call_id: int, *, valid: bool) -> None:
        ExternalCall.objects.filter(id=call_id).update(output_valid=valid)

    def agent_limits_lock(self, agent_id: int) -> tuple[int | None, int | None]:
        """Inside a transaction: the agent's (max calls, max tokens) per hour, its row locked until
        commit, so budget counts under it are taken one at a time ((None, None): no such agent)."""
        limits = (
            Agent.objects.select_for_update()
            .filter(id=agent_id)
            .values_list("max_calls_per_hour", "max_tokens_per_hour")
            .first()
        )
        return limits or (None, None)

    def agent_spend(self, *, agent_id: int, start: datetime, end: datetime) -> Spend:
        """Calls and tokens the agent used in [start, end) (served by call_agent_window_idx)."""
        row = ExternalCall.objects.filter(agent_id=agent_id, started_at__gte=start, started_at__lt=end).aggregate(
            calls=Count("id"),
            tokens=Coalesce(Sum("prompt_tokens"), 0) + Coalesce(Sum("completion_tokens"), 0),
        )
        return Spend(calls=row["calls"], tokens=row["tokens"] or 0)

    def call_insert_counting(self, call: ExternalCall, *, start: datetime, end: datetime) -> Spend:
        """Under agent_limits_lock: insert the call's record and return the agent's spend in
        [start, end) before it. The caller rolls the transaction back when the spend refuses it."""
        assert call.agent_id is not None, "a budget counts an agent's calls"
        spend = self.agent_spend(agent_id=call.agent_id, start=start, end=end)
        self.call_record(call)
        return spend

    # --- reports ---

    def biz_key_unique_valid(self) -> bool:
        """Whether the database itself says no two runs share a biz_key (False: it cannot say)."""
        return False

    def table_estimate(self, table: str) -> int | None:
        """The planner's row estimate of `table`; None where there is none."""
        return None


def _next_attempt(run: TaskRun, *, worker: str, now: datetime) -> Attempt:
    return Attempt(run=run, number=run.attempts + 1, fence=run.fence + 1, worker=worker, started_at=now)


def _claim_changes(run: TaskRun, *, worker: str, now: datetime) -> dict:
    return {
        "state": TaskRun.State.RUNNING,
        "attempts": run.attempts + 1,
        "fence": run.fence + 1,
        "lease_owner": worker,
        "lease_expires_at": now + timedelta(seconds=run.lease_ttl_seconds),
        "start_at": run.start_at or now,
        "executed_by": worker,
    }


def _claimed(run: TaskRun, changes: dict) -> None:
    """The claim's changes, in memory: the attempt needs no second read of the row."""
    for name, value in changes.items():
        setattr(run, name, value)


def _insert_new(model, objs: list, *, unique: tuple[str, ...]) -> list:
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
        f"INSERT INTO {qn(model._meta.db_table)} ({', '.join(qn(f.column) for f in fields)}) "
        f"VALUES {', '.join([one] * len(objs))} ON CONFLICT ({columns}) DO NOTHING RETURNING {qn('id')}, {columns}"
    )
    params = [f.get_db_prep_save(f.pre_save(obj, True), db) for obj in objs for f in fields]
    with db.cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    return keyed_created(model, objs, unique, rows, alias=db.alias)


def keyed_created(model, objs: list, unique: tuple[str, ...], rows: list[tuple], *, alias: str) -> list:
    """The objects an INSERT ... RETURNING id, <unique columns> inserted, given their ids; of two
    objects with one key, the first."""
    key_fields = [model._meta.get_field(c.removesuffix("_id")) for c in unique]
    ids = {tuple(key_value(f, v) for f, v in zip(key_fields, row[1:], strict=True)): row[0] for row in rows}
    created = []
    for obj in objs:
        key = tuple(key_value(f, getattr(obj, f.attname)) for f in key_fields)
        if key in ids:
            obj.pk = ids.pop(key)  # popped: a later object with the same key was not inserted
            obj._state.adding, obj._state.db = False, alias
            created.append(obj)
    return created


def key_value(field, value):
    """A key column as returned by either database, comparable with the object's value: SQLite
    returns instants as text or naive UTC datetimes."""
    if not isinstance(field, models.DateTimeField) or value is None:
        return value
    if isinstance(value, str):
        value = parse_datetime(value)
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value
