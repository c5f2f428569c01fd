"""The run store: every write of a run's life behind one interface, RunStore (runs.engine.store.protocol):
claim, batch claim, take with admission, renew, each outcome (succeed, retry later, fail, park,
cancel late), expiry, operator actions (replay, cancel, force-release), keyed leases, a skill's
step checkpoints, its model calls' records and their budget count.

The domain modules (runs.engine.claims, runs.engine.admission, runs.engine.leases, runs.engine.outcome,
the tick) decide; the store writes. Two backends implement RunStore whole: PostgreSQL, whose hot-path
statements are named once in runs/engine/store/queries.sql, and SQLite, the ORM's writes
(runs.engine.store.orm, plain functions the PostgreSQL store also names where it has no statement of its
own). The backend is chosen once per process, from the default database. Only this package touches
django.db's connection, and only it writes run tables (import-linter contracts in pyproject.toml); the
connection helpers and report reads live beside the store, in runs.engine.store.database.
"""

from functools import cache

from runs.engine.store.database import is_postgres
from runs.engine.store.postgres import PostgresStore, StatementsStale
from runs.engine.store.protocol import (
    Admit,
    AttemptEnd,
    BudgetPark,
    ErrorRecord,
    Failure,
    ForceRelease,
    Gate,
    Held,
    NotPlain,
    Proposal,
    Replay,
    RunStore,
    Succeeded,
    Taken,
    Waiting,
)
from runs.engine.store.sqlite import SqliteStore

__all__ = [
    "Admit",
    "AttemptEnd",
    "BudgetPark",
    "ErrorRecord",
    "Failure",
    "ForceRelease",
    "Gate",
    "Held",
    "NotPlain",
    "PostgresStore",
    "Proposal",
    "Replay",
    "RunStore",
    "SqliteStore",
    "StatementsStale",
    "Succeeded",
    "Taken",
    "Waiting",
    "store",
]

# Both backends implement RunStore whole (mypy checks these two lines).
BACKENDS: tuple[type[RunStore], ...] = (PostgresStore, SqliteStore)


@cache
def store() -> RunStore:
    """This process's run store."""
    return PostgresStore() if is_postgres() else SqliteStore()
