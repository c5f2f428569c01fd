"""The PostgreSQL run store: the hot path's statements, named once in queries.sql, prepared once per
connection and run on Django's own connection and transaction.

The ORM compiles a queryset on every call and builds models through its full machinery; here a
statement is written once, and rows become models through `Model.from_db`. psycopg prepares a
statement only when asked (prepare=True) once the connection has a threshold; Django leaves it at
None (never), so the threshold is set out of reach and only these statements are prepared. Off with
HARNESS_PREPARED_STATEMENTS=false behind a pooler that cannot keep them (PgBouncer in transaction
mode before 1.21).
"""

import re
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from django.conf import settings
from django.db import DatabaseError, OperationalError
from django.db.backends.utils import CursorWrapper
from django.db.models import DateTimeField, JSONField, Model

from runs.engine.store import orm
from runs.engine.store.orm import (
    CALL_RESULT_FIELDS,
    M,
    _db,
    claim_changes,
    claimed_in_memory,
    keyed_created,
    next_attempt,
)
from runs.engine.store.protocol import KeyedLeaseRenewal, NotPlain, PoolPair, RunLeaseRenewal, Succeeded, Taken
from runs.models import Attempt, Decision, ExternalCall, RunStep, TaskRun
from tasks.agents.budgets import Spend
from tasks.models import GLOBAL_POOL, Agent, TriggerRule

QUERIES_FILE = Path(__file__).with_name("queries.sql")
# A name may carry a database ("-- name.postgresql --"): reports.sql has per-vendor variants.
_BLOCK = re.compile(r"^-- (fragment )?([a-z_]+(?:\.[a-z]+)?) --$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    """The named statements of a queries file, with their fragments included. Comment lines and
    indentation go: psycopg keeps its parse of a statement only up to a length (its
    MAX_CACHED_STATEMENT_LENGTH), and indentation is a tenth of the longest."""
    parts = _BLOCK.split(text)
    fragments: dict[str, str] = {}
    statements: dict[str, str] = {}
    for i in range(1, len(parts), 3):
        fragment, name, body = parts[i], parts[i + 1], parts[i + 2]
        body = "\n".join(line.strip() for line in body.splitlines() if not line.lstrip().startswith("--")).strip()
        (fragments if fragment else statements)[name] = body
    for name, body in statements.items():
        for fragment, text_ in fragments.items():
            body = body.replace("{" + fragment + "}", text_)
        if re.search(r"\{[a-z_]+\}", body):
            raise ValueError(f"{name}: unknown fragment in {body!r}")
        statements[name] = body
    return statements


@cache
def queries() -> dict[str, str]:
    return parse_queries(QUERIES_FILE.read_text())


# psycopg prepares a statement only when asked once the connection has a threshold: one no statement
# reaches by counting.
_ONLY_WHEN_ASKED = 2**31 - 1


# The attribute of Django's connection wrapper holding (psycopg connection, its kept cursor).
_KEPT = "harness_kept_cursor"


def _cursor() -> CursorWrapper:
    """A cursor on this thread's connection for a named statement: server-side prepared, inside
    Django's wrapper (query logging, execute wrappers, error translation). One such cursor serves
    every statement on a connection, and closing the wrapper leaves it open: a cursor of its own per
    statement cost psycopg its adapters and its column loaders again each time."""
    db = _db()
    if not settings.HARNESS["PREPARED_STATEMENTS"]:
        return db.cursor()
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    pg = db.connection
    prepared, kept_wrapper, kept_debug = _prepared_cursor_classes()
    # Kept by Django's wrapper of this thread's connection, with the connection it was opened on: a
    # connection drawn anew (from a pool, after a reconnect) gets its own. Not kept by the psycopg
    # connection, which would then hold a cursor holding it: a cycle only the collector frees.
    owner, kept = getattr(db, _KEPT, (None, None))
    if kept is None or owner is not pg or kept.closed:
        if pg.prepare_threshold is None:
            pg.prepare_threshold = _ONLY_WHEN_ASKED
        kept = prepared(pg)
        if db.timezone is UTC:
            from psycopg.types.datetime import TimestamptzLoader  # psycopg: PostgreSQL only

            # psycopg's own loader, which psycopg swaps for its C one; Django's (a Python subclass,
            # never swapped) cost a seventh of a take. Both read the instant; this one in the
            # session's zone, which Django sets to its own, UTC.
            kept.adapters.register_loader("timestamptz", TimestamptzLoader)
        setattr(db, _KEPT, (pg, kept))
    return kept_debug(kept, db) if db.queries_logged else kept_wrapper(kept, db)


@cache
def _prepared_cursor_classes() -> tuple[type[Any], type[CursorWrapper], type[CursorWrapper]]:
    from django.db.backends.postgresql.base import CursorDebugWrapper, ServerBindingCursor  # psycopg: PostgreSQL only

    class PreparedCursor(ServerBindingCursor):
        def execute(self, query: Any, params: Any = None, *, prepare: Any = None, binary: Any = None) -> Any:
            return super().execute(query, params, prepare=True, binary=binary)  # type: ignore[misc]  # psycopg's

    class PreparedDebugWrapper(CursorDebugWrapper):
        """Logs a statement with its values, as Django does for client-side cursors (the database's
        own text has $1 placeholders): tests and DEBUG only."""

        def debug_sql(
            self, sql: Any = None, params: Any = None, use_last_executed_query: bool = False, many: bool = False
        ) -> Any:
            if use_last_executed_query and not many:
                sql = self.db.ops.compose_sql(sql, params)
            return super().debug_sql(sql, params, False, many)

    class KeptWrapper(CursorWrapper):
        def close(self) -> None:
            """The connection's kept cursor outlives the statement (closed with its connection)."""

    class KeptDebugWrapper(PreparedDebugWrapper):
        def close(self) -> None:
            """As KeptWrapper's."""

    return PreparedCursor, KeptWrapper, KeptDebugWrapper


class StatementsStale(OperationalError):
    """PostgreSQL refused this connection's prepared statements after a schema change, and they
    could not be prepared afresh here (inside a transaction, or a second time): the caller hands
    the run back as for a database that went away (runs/jobs.py)."""


# A prepared statement gone (a pooler or a DEALLOCATE behind psycopg's back), and a plan whose
# result type a migration changed (a statement selecting `*` from a table that got a column).
_GONE = "26000"
_RESULT_TYPE_CHANGED = "0A000"


def _stale(exc: BaseException) -> bool:
    cause = exc.__cause__
    state = getattr(cause, "sqlstate", None)
    return state == _GONE or (state == _RESULT_TYPE_CHANGED and "cached plan" in str(cause))


def _execute(name: str, params: dict[str, Any]) -> CursorWrapper:
    """Run a named statement. If PostgreSQL says its prepared form is stale, drop every statement
    this connection prepared and run it once more; inside a transaction (aborted by the error, and
    its rollback drops them) or a second time, raise StatementsStale."""
    cur = _cursor()
    try:
        cur.execute(queries()[name], params)
    except DatabaseError as exc:
        cur.close()
        if not _stale(exc):
            raise
        db = _db()
        if db.in_atomic_block:
            raise StatementsStale(f"{name}: prepared statement stale ({exc})") from exc
        # psycopg sees "DEALLOCATE ALL" go by and forgets its own names too: the retry prepares anew.
        db.connection.execute("DEALLOCATE ALL")
        cur = _cursor()
        try:
            cur.execute(queries()[name], params)
        except DatabaseError as again:
            cur.close()
            if _stale(again):
                raise StatementsStale(f"{name}: prepared statement stale twice ({again})") from again
            raise
    return cur


def _one(name: str, params: dict[str, Any]) -> tuple[Any, ...]:
    """The one row a statement always returns (its SELECT has no FROM that could be empty)."""
    with _execute(name, params) as cur:
        row = cur.fetchone()
    if row is None:
        raise RuntimeError(f"{name} returned no row")
    return tuple(row)


def _run(names: tuple[str, ...], values: tuple[Any, ...]) -> TaskRun:
    run = _instance(TaskRun, names, values)
    assert isinstance(run, TaskRun)
    return run


def _step(names: tuple[str, ...], values: tuple[Any, ...]) -> RunStep:
    step = _instance(RunStep, names, values)
    assert isinstance(step, RunStep)
    return step


def _step_values(step: RunStep) -> dict[str, Any]:
    return _insert_values(RunStep, step)


def _instance(model: type[Model], names: tuple[str, ...], values: tuple[Any, ...]) -> Model:
    """A model from a row whose columns are `names` (any order): the
    database's converters applied as the ORM would (JSON text to objects), then from_db."""
    db = _db()
    converters = _row_plan(model, names)
    row = [convert(values[i], db) if convert and values[i] is not None else values[i] for i, convert in converters]
    return model.from_db(db.alias, None, row)  # type: ignore[arg-type]  # None: every field, in order


@cache
def _row_plan(model: type[Model], names: tuple[str, ...]) -> list[tuple[int, Any]]:
    """For each concrete field in order: its column's index in the row, and its converter."""
    index = {name: i for i, name in enumerate(names)}
    return [
        (
            index[str(f.column)],
            (lambda v, db, f=f: f.from_db_value(v, None, db)) if hasattr(f, "from_db_value") else None,
        )
        for f in model._meta.concrete_fields
    ]


_NAMES: dict[str, tuple[str, ...]] = {}


def _names(statement: str, cur: CursorWrapper) -> tuple[str, ...]:
    """The column names of a statement's rows, read once per process: building cursor.description
    costs psycopg a Column object per column, per call (most of an execution's client CPU here)."""
    names = _NAMES.get(statement)
    if names is None:
        names = _NAMES[statement] = tuple(str(d.name) for d in cur.description)
    return names


def _insert_values(model: type[Model], obj: Model) -> dict[str, Any]:
    """An instance's values as a named INSERT's parameters."""
    return {column: get(obj) for column, get in _insert_getters(model)}


@cache
def _insert_getters(model: type[Model]) -> list[tuple[str, Any]]:
    """How each column's parameter is read from an instance, decided once per model: on PostgreSQL
    Django's preparation of text, numbers, booleans, aware datetimes and foreign keys returns them as
    they are, so only JSON is prepared and only auto_now fields are stamped."""
    getters: list[tuple[str, Any]] = []
    for f in model._meta.concrete_fields:
        if f.primary_key:
            continue
        if isinstance(f, JSONField):
            getters.append((str(f.column), lambda obj, f=f: f.get_db_prep_save(getattr(obj, f.attname), _db())))
        elif isinstance(f, DateTimeField) and (f.auto_now or f.auto_now_add):
            getters.append((str(f.column), lambda obj, f=f: f.pre_save(obj, True)))
        else:
            getters.append((str(f.column), lambda obj, name=f.attname: getattr(obj, name)))
    return getters


class PostgresStore:
    """The run store on PostgreSQL: the hot path's named statements; the rest are the ORM's
    operations (runs.engine.store.orm), each named here."""

    claims_in_take: ClassVar[bool] = True
    plain_admission: ClassVar[bool] = True
    releases_on_success: ClassVar[bool] = True

    # --- claims ---

    def runs_insert(self, runs: list[TaskRun]) -> list[TaskRun]:
        return self._insert(TaskRun, runs, ("biz_key",), one="runs_insert_one", many="runs_insert_many")

    def decisions_insert(self, decisions: list[Decision]) -> list[Decision]:
        return self._insert(Decision, decisions, ("rule_id", "slot"), one=None, many="decisions_insert_many")

    def _insert(self, model: type[M], objs: list[M], unique: tuple[str, ...], *, one: str | None, many: str) -> list[M]:
        if not objs:
            return []
        values = [_insert_values(model, obj) for obj in objs]
        if one is not None and len(objs) == 1:
            # A row of values: psycopg quotes it in a sixth of the time of one-element arrays.
            name, params = one, values[0]
        else:
            # One array per column: the same text for any number of rows, and short.
            name, params = many, {column: [v[column] for v in values] for column in values[0]}
        with _execute(name, params) as cur:
            rows = cur.fetchall()
        return keyed_created(model, objs, unique, rows, alias=_db().alias)

    def dedupe_hit(self, biz_key: str) -> TaskRun | None:
        with _execute("dedupe_hit", {"biz_key": biz_key}) as cur:
            row = cur.fetchone()
            return _run(_names("dedupe_hit", cur), row) if row is not None else None

    def dedupe_hits_add(self, taken: dict[str, int]) -> None:
        _execute("dedupe_hits_add", {"keys": list(taken), "counts": list(taken.values())}).close()

    def rules_advance(self, rules: list[TriggerRule]) -> None:
        if not rules:
            return
        params = {
            "ids": [r.pk for r in rules],
            "last_slot_at": [r.last_slot_at for r in rules],
            "next_fire_at": [r.next_fire_at for r in rules],
        }
        _execute("rules_advance", params).close()

    # --- the worker ---

    def run_read(self, run_id: int) -> TaskRun | None:
        with _execute("run_read", {"run_id": run_id}) as cur:
            row = cur.fetchone()
            return _run(_names("run_read", cur), row) if row is not None else None

    def run_take(self, run_id: int, *, worker: str, now: datetime) -> Taken:
        """Read the run and claim it in the same statement when nothing stands in its way."""
        params = {"run_id": run_id, "worker": worker, "now": now, "global_pool": GLOBAL_POOL}
        with _execute("run_take", params) as cur:
            row = cur.fetchone()
            if row is None:
                return Taken(None)
            run = _run(_names("run_take", cur)[3:], row[3:])
        attempt_id, plain, checkpoints = row[0], row[1], row[2]
        if attempt_id is None:
            return Taken(run, plain=plain, checkpoints=checkpoints)
        attempt = Attempt(id=attempt_id, run=run, number=run.attempts, fence=run.fence, worker=worker, started_at=now)
        attempt._state.adding, attempt._state.db = False, _db().alias
        return Taken(run, attempt, plain, checkpoints)

    def lease_claim(self, run: TaskRun, *, worker: str, now: datetime, plain: bool) -> Attempt | None:
        changes = claim_changes(run, worker=worker, now=now)
        params = {
            "run_id": run.id,
            "worker": worker,
            "now": now,
            "expires_at": changes["lease_expires_at"],
            "start_at": changes["start_at"],
            "fence": run.fence,
            "attempts": run.attempts,
        }
        if plain:
            params["global_pool"] = GLOBAL_POOL
        attempt_id, admitted = _one("lease_claim_plain" if plain else "lease_claim", params)
        if attempt_id is None:
            if not admitted:
                raise NotPlain()
            return None
        attempt = next_attempt(run, worker=worker, now=now)
        attempt.pk = attempt_id
        attempt._state.adding, attempt._state.db = False, _db().alias
        claimed_in_memory(run, changes)
        return attempt

    def run_leases_renew(self, leases: list[RunLeaseRenewal]) -> set[int]:
        if not leases:
            return set()
        ids, fences, expires = (list(column) for column in zip(*leases, strict=True))
        with _execute("run_leases_renew", {"ids": ids, "fences": fences, "expires_at": expires}) as cur:
            return {row[0] for row in cur.fetchall()}

    def keyed_leases_renew(self, leases: list[KeyedLeaseRenewal]) -> set[str]:
        if not leases:
            return set()
        keys, owners, tokens, nows, expires = (list(column) for column in zip(*leases, strict=True))
        params = {"keys": keys, "owners": owners, "tokens": tokens, "nows": nows, "expires_at": expires}
        with _execute("keyed_leases_renew", params) as cur:
            return {row[0] for row in cur.fetchall()}

    def run_succeed(
        self, run: TaskRun, attempt: Attempt, result: Any, *, now: datetime, release_worker: str | None
    ) -> Succeeded:
        """The run's write, the attempt's outcome and (with `release_worker`) the slots given back,
        in one statement."""
        params = {
            "run_id": run.id,
            "fence": run.fence,
            "attempt_id": attempt.id,
            "now": now,
            "result": _json(result),
        }
        if release_worker is None:
            done, _ = _one("run_succeed", params)
            return Succeeded(bool(done), None)
        done, waiting = _one("run_succeed_release", {**params, "worker": release_worker})
        return Succeeded(bool(done), [tuple(pair) for pair in waiting])

    def slots_release(self, *, run_id: int, fence: int, worker: str | None) -> list[PoolPair]:
        (waiting,) = _one("slots_release", {"run_id": run_id, "fence": fence, "worker": worker})
        return [tuple(pair) for pair in waiting]

    # --- steps ---

    def step_read(self, run_id: int, name: str) -> RunStep | None:
        with _execute("step_read", {"run_id": run_id, "name": name}) as cur:
            row = cur.fetchone()
            return _step(_names("step_read", cur), row) if row is not None else None

    def steps_read(self, run_id: int) -> dict[str, RunStep]:
        with _execute("steps_read", {"run_id": run_id}) as cur:
            rows = cur.fetchall()
            names = _names("steps_read", cur) if rows else ()
        found: dict[str, RunStep] = {}
        for row in rows:
            step = _step(names, row)
            found.setdefault(step.name, step)
        return found

    def step_fence(self, *, run_id: int, fence: int, name: str) -> tuple[RunStep | None, bool]:
        with _execute("step_fence", {"run_id": run_id, "fence": fence, "name": name}) as cur:
            row = cur.fetchone()
            names = _names("step_fence", cur)
        assert row is not None, "step_fence returns one row"
        done = _step(names[1:], row[1:]) if row[names.index("id")] is not None else None
        return done, bool(row[0])

    def step_insert(self, step: RunStep) -> None:
        _execute("step_insert", _step_values(step)).close()

    def step_checkpoint(self, step: RunStep, *, fence: int) -> bool:
        with _execute("step_checkpoint", {**_step_values(step), "fence": fence}) as cur:
            return bool(cur.rowcount == 1)

    # --- model calls ---

    def agent_read(self, name: str) -> Agent | None:
        with _execute("agent_read", {"name": name}) as cur:
            row = cur.fetchone()
            if row is None:
                return None
            agent = _instance(Agent, _names("agent_read", cur), row)
        assert isinstance(agent, Agent)
        return agent

    def call_record(self, call: ExternalCall) -> None:
        if call.pk is not None:
            params = {f: getattr(call, f) for f in CALL_RESULT_FIELDS}
            _execute("call_finish", {**params, "id": call.pk}).close()
            return
        (call.pk,) = _one("call_insert", _insert_values(ExternalCall, call))
        call._state.adding, call._state.db = False, _db().alias

    def call_delete(self, call_id: int) -> None:
        _execute("call_delete", {"call_id": call_id}).close()

    def call_mark_output(self, call_id: int, *, valid: bool) -> None:
        _execute("call_mark_output", {"call_id": call_id, "valid": valid}).close()

    def agent_limits_lock(self, agent_id: int) -> tuple[int | None, int | None]:
        with _execute("agent_limits_lock", {"agent_id": agent_id}) as cur:
            row = cur.fetchone()
        return (row[0], row[1]) if row is not None else (None, None)

    def agent_spend(self, *, agent_id: int, start: datetime, end: datetime) -> Spend:
        calls, tokens = _one("agent_spend", {"agent_id": agent_id, "start": start, "end": end})
        return Spend(calls=calls, tokens=tokens)

    def call_insert_counting(self, call: ExternalCall, *, start: datetime, end: datetime) -> Spend:
        params = {**_insert_values(ExternalCall, call), "start": start, "end": end}
        call.pk, calls, tokens = _one("call_insert_counting", params)
        call._state.adding, call._state.db = False, _db().alias
        return Spend(calls=calls, tokens=tokens)

    # --- the ORM's operations: no statement of their own (yet) ---

    slots_drop_stale = staticmethod(orm.slots_drop_stale)
    admit = staticmethod(orm.admit)
    admission_refused = staticmethod(orm.admission_refused)
    hand_over = staticmethod(orm.hand_over)
    slots_expired_drop = staticmethod(orm.slots_expired_drop)
    waiters_forget = staticmethod(orm.waiters_forget)
    run_create = staticmethod(orm.run_create)
    coalesce_pending = staticmethod(orm.coalesce_pending)
    run_note = staticmethod(orm.run_note)
    runs_mark_dispatched = staticmethod(orm.runs_mark_dispatched)
    decision_record = staticmethod(orm.decision_record)
    decisions_delete = staticmethod(orm.decisions_delete)
    hold_record = staticmethod(orm.hold_record)
    hold_recheck = staticmethod(orm.hold_recheck)
    hold_release = staticmethod(orm.hold_release)
    retry_later = staticmethod(orm.retry_later)
    fail = staticmethod(orm.fail)
    attempt_end = staticmethod(orm.attempt_end)
    park_for_approval = staticmethod(orm.park_for_approval)
    park_for_budget = staticmethod(orm.park_for_budget)
    cancel_late = staticmethod(orm.cancel_late)
    push_back = staticmethod(orm.push_back)
    expiring = staticmethod(orm.expiring)
    slots_drop = staticmethod(orm.slots_drop)
    replay = staticmethod(orm.replay)
    cancel = staticmethod(orm.cancel)
    force_release = staticmethod(orm.force_release)
    keyed_lease_force_release = staticmethod(orm.keyed_lease_force_release)
    approve = staticmethod(orm.approve)
    reject = staticmethod(orm.reject)
    gate_release = staticmethod(orm.gate_release)
    gate_reject = staticmethod(orm.gate_reject)
    keyed_lease_acquire = staticmethod(orm.keyed_lease_acquire)
    keyed_lease_renew = staticmethod(orm.keyed_lease_renew)
    keyed_lease_release = staticmethod(orm.keyed_lease_release)
    fence_holds = staticmethod(orm.fence_holds)
    call_mark_lost = staticmethod(orm.call_mark_lost)


def _json(value: Any) -> Any:
    return TaskRun._meta.get_field("result").get_db_prep_save(value, _db())


# --- report reads (runs.engine.store.database) ---


def biz_key_unique_valid() -> bool:
    """Whether the unique index behind run_unique_biz_key is valid: then no two runs share a key."""
    with _execute("biz_key_unique_valid", {}) as cur:
        row = cur.fetchone()
    return bool(row and row[0])


def table_estimate(table: str) -> int | None:
    with _execute("table_estimate", {"table": table}) as cur:
        row = cur.fetchone()
    return max(int(row[0]), 0) if row else None
