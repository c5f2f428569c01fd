"""The run store: every write of a run's lifecycle behind one interface (claim, batch claim, take
with admission, renew, fenced outcome, release, and the report reads that differ by database).

The domain modules (runs.claims, runs.admission, runs.leases, runs.outcome, the tick) decide; the
store writes. Two backends: PostgreSQL, whose hot-path statements are named once in
runs/store/queries.sql, and SQLite, the ORM's writes. The backend is chosen once per process, from
the default database. Only this package touches django.db's connection (an import-linter contract
in pyproject.toml says so).
"""

from functools import cache

from django.db import DEFAULT_DB_ALIAS, connections

from runs.store.base import NotPlain, OrmStore, Succeeded, Taken

__all__ = ["NotPlain", "OrmStore", "Succeeded", "Taken", "store"]


@cache
def store() -> OrmStore:
    """This process's run store."""
    if connections[DEFAULT_DB_ALIAS].vendor == "postgresql":
        from runs.store.postgres import PostgresStore  # psycopg: imported only where it is used

        return PostgresStore()
    from runs.store.sqlite import SqliteStore

    return SqliteStore()
