"""The run store: every write of a run's lifecycle behind one interface (claim, batch claim, take
with admission, renew, fenced outcome, release, a skill's step checkpoints, its model calls'
records and their budget count, and the report reads that differ by database).

The domain modules (runs.claims, runs.admission, runs.leases, runs.outcome, the tick) decide; the
store writes. Two backends: PostgreSQL, whose hot-path statements are named once in
runs/store/queries.sql, and SQLite, the ORM's writes. The backend is chosen once per process, from
the default database. Only this package touches django.db's connection (an import-linter contract
in pyproject.toml says so).
"""

from functools import cache

from django.db import DEFAULT_DB_ALIAS, connections

from runs.store.base import NotPlain, OrmStore, Succeeded, Taken
from runs.store.postgres import PostgresStore, StatementsStale
from runs.store.sqlite import SqliteStore

__all__ = ["NotPlain", "OrmStore", "StatementsStale", "Succeeded", "Taken", "store"]


@cache
def store() -> OrmStore:
    """This process's run store."""
    return PostgresStore() if connections[DEFAULT_DB_ALIAS].vendor == "postgresql" else SqliteStore()
