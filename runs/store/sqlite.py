"""The SQLite run store (the embedded default): the ORM's writes as they are (runs.store.base).

SQLite serializes writers (IMMEDIATE transactions), so the statements a PostgreSQL claim combines
are separate here, in one transaction."""

from runs.store.base import OrmStore


class SqliteStore(OrmStore):
    pass
