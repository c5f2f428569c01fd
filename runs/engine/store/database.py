"""This thread's database connection, and the report reads (named in reports.sql): not run
writes (those are the run store's, runs.engine.store.protocol), but the same package, because only
runs.engine.store touches django.db's connection (an import-linter contract in pyproject.toml says so).
"""

import threading
import time
from functools import cache
from pathlib import Path
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

from runs.engine.store import postgres
from runs.models import TaskRun


def _db() -> BaseDatabaseWrapper:
    return connections[DEFAULT_DB_ALIAS]


def is_postgres() -> bool:
    return _db().vendor == "postgresql"


# A connection idle for less than this is written on without a check (a SELECT 1 round trip): if it
# died meanwhile the write fails, and the sweeper expires the lease as for a lost worker.
CHECK_AFTER_IDLE_SECONDS = 1.0
# When this thread's connection was last known good: opened or drawn from the pool, checked, or
# last used before a wait began (connection_release).
_known_good = threading.local()


def _connected(sender: object, connection: object, **_kwargs: object) -> None:
    _known_good.at = time.monotonic()


connection_created.connect(_connected, dispatch_uid="runs.engine.store.known_good")


def connection_refresh() -> None:
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


def connection_close() -> None:
    """Close this thread's connection (a background thread before it ends, or after an error)."""
    _db().close()


def connection_release() -> None:
    """This thread is about to wait (a skill, a model call, a renewal period): give its
    connection back where a pool holds it (DATABASES OPTIONS "pool"), so a thread that waits
    holds none; elsewhere keep it for the next write, checked then if the wait was long."""
    db = _db()
    if db.settings_dict.get("OPTIONS", {}).get("pool") and not db.in_atomic_block:
        db.close()
    _known_good.at = time.monotonic()


def connection_unpooled() -> None:
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


def pool_stats() -> dict[str, int] | None:
    """This process's connection pool as psycopg_pool counts it (get_stats(): pool_size,
    pool_available, requests_waiting, requests_num, requests_wait_ms, ...), or None where no pool
    holds the connections (SQLite, or HARNESS_DB_POOL_MAX 0). Counters run from the pool's start."""
    db = _db()
    if not db.settings_dict.get("OPTIONS", {}).get("pool"):
        return None
    pool = getattr(db, "pool", None)  # Django's pool for this alias, shared by the process's threads
    return dict(pool.get_stats()) if pool is not None else None


def values_check(obj: models.Model, *, add: bool) -> None:
    """Prepare every value of `obj` as its save would, raising what the save would raise (a ""
    time or a 20-digit number passes full_clean and fails only inside the save)."""
    db = _db()
    for f in obj._meta.concrete_fields:
        f.get_db_prep_save(f.pre_save(obj, add=add), connection=db)


def json_prep(value: Any) -> Any:
    return TaskRun._meta.get_field("result").get_db_prep_save(value, _db())


# --- report reads (runs.desk.metrics, runs.engine.rollup, the dashboard) ---


def summarizes_in_sql() -> bool:
    """Whether report queries may summarize in SQL (runs.engine.rollup): PostgreSQL."""
    return is_postgres()


REPORTS_FILE = Path(__file__).with_name("reports.sql")


@cache
def reports() -> dict[str, str]:
    """The report statements of reports.sql by name, with their variants ("name.postgresql")."""
    return postgres.parse_queries(REPORTS_FILE.read_text())


def report_sql(name: str, vendor: str | None = None) -> str:
    """The statement `name` for `vendor` (this connection's by default): its variant for that
    database, else its plain form. KeyError: reports.sql names no such report for that database."""
    found = reports()
    vendor = vendor or _db().vendor
    if f"{name}.{vendor}" in found:
        return found[f"{name}.{vendor}"]
    if name in found:
        return found[name]
    raise KeyError(f"reports.sql has no report {name!r} for {vendor}")


def report(name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The rows of the read-only report `name` of reports.sql (runs.desk.metrics, runs.engine.rollup),
    on this thread's connection. Only a name: no caller runs SQL of its own."""
    sql = report_sql(name)
    with _db().cursor() as cur:
        cur.execute(sql, params)
        return [tuple(row) for row in cur.fetchall()]


def biz_key_unique_valid() -> bool:
    """Whether the database itself says no two runs share a biz_key (False: it cannot say)."""
    return postgres.biz_key_unique_valid() if is_postgres() else False


def table_estimate(table: str) -> int | None:
    """The planner's row estimate of `table`; None where there is none."""
    return postgres.table_estimate(table) if is_postgres() else None
