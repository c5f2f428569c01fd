"""Prebuilt SQL for the worker's hot path on PostgreSQL (issue 12).

The ORM compiles a queryset on every call and instantiates models through the full machinery:
about 1 ms of CPU per statement, several times the round trip, on a machine whose throughput is
bound by CPU. The hot path's statements are written once, from the models' own table and column
names, and executed on a plain cursor (prepared once per connection, see `cursor`); rows become
models through `Model.from_db`, the cheap positional path. The statements themselves live in the
module that owns each decision (runs/leases.py, runs/admission.py, runs/outcome.py); this module
only holds the shared pieces.
SQLite keeps the ORM paths.
"""

from collections.abc import Callable
from functools import cache

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import DateTimeField, JSONField, Model


def qn(name: str) -> str:
    return connection.ops.quote_name(name)


def columns(model: type[Model], alias: str) -> str:
    """Every concrete column of `model`, in field order, qualified by `alias`."""
    return ", ".join(f"{alias}.{qn(f.column)}" for f in model._meta.concrete_fields)


def literals(values) -> str:
    """Code constants (states, reasons) written into a statement's text: one parameter fewer each."""
    if not all(v.replace("_", "").isalnum() for v in values):
        raise ValueError(f"not a plain constant: {values!r}")
    return ", ".join(f"'{v}'" for v in values)


def instance(model: type[Model], values) -> Model:
    """A model from a row of `columns(model, ...)`: the database's converters (JSON text to
    objects) applied, as the ORM would, then the positional constructor."""
    fields = model._meta.concrete_fields
    db = connections[DEFAULT_DB_ALIAS]
    values = [
        f.from_db_value(v, None, db) if v is not None and hasattr(f, "from_db_value") else v
        for f, v in zip(fields, values, strict=True)
    ]
    return model.from_db(db.alias, None, values)


# psycopg prepares a statement only when asked (prepare=True) once the connection has a threshold;
# Django leaves it at None (never). This one is never reached by counting, so only ours are prepared.
_ONLY_WHEN_ASKED = 2**31 - 1


def cursor():
    """A cursor for a prebuilt statement: on PostgreSQL, a server-side prepared one.

    The hot path's statements are CTEs that PostgreSQL takes longer to plan (0.4-0.5 ms) than to
    run (0.05-0.2 ms); prepared once per connection, they run on a generic plan and the database's
    CPU per run halves (issue 12). Same connection and transaction as the ORM; Django's cursor
    wrapper keeps query logging, execute wrappers and error translation. Off with
    HARNESS_PREPARED_STATEMENTS=false behind a pooler that cannot keep them (PgBouncer in
    transaction mode before 1.21)."""
    # The thread's own connection, looked up once: each attribute of django.db.connection is a
    # lookup in a context-local store (7 of them here were 5% of a worker's execute path).
    db = connections[DEFAULT_DB_ALIAS]
    if db.vendor != "postgresql" or not settings.HARNESS["PREPARED_STATEMENTS"]:
        return db.cursor()
    # What connection.cursor() does before it wraps its own cursor.
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    pg = db.connection
    if pg.prepare_threshold is None:
        pg.prepare_threshold = _ONLY_WHEN_ASKED
    prepared, debug = _prepared_cursor_classes()
    return debug(prepared(pg), db) if db.queries_logged else db.make_cursor(prepared(pg))


@cache
def _prepared_cursor_classes():
    from django.db.backends.postgresql.base import CursorDebugWrapper, ServerBindingCursor  # psycopg: PostgreSQL only

    class PreparedCursor(ServerBindingCursor):
        def execute(self, query, params=None, *, prepare=None, binary=None):
            return super().execute(query, params, prepare=True, binary=binary)

    class PreparedDebugWrapper(CursorDebugWrapper):
        """Logs a statement with its values, as Django does for the client-side cursors (the
        database's own text has $1 placeholders): tests and DEBUG only."""

        def debug_sql(self, sql=None, params=None, use_last_executed_query=False, many=False):
            if use_last_executed_query and not many:
                sql = self.db.ops.compose_sql(sql, params)
            return super().debug_sql(sql, params, False, many)

    return PreparedCursor, PreparedDebugWrapper


def one(sql: str, params: list) -> tuple | None:
    with cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()


def rows(sql: str, params: list) -> list[tuple]:
    with cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def insert_params(fields: list) -> Callable[[Model], list]:
    """How an instance's values become the parameters of a prebuilt INSERT of `fields`.

    On PostgreSQL every field here but JSON takes its Python value as it is (Django's preparation of
    text, numbers, booleans, aware datetimes and foreign keys returns them unchanged there), so only
    JSON is prepared and only auto_now fields are stamped; elsewhere each field prepares its own.
    """
    if connection.vendor != "postgresql":
        return lambda obj: [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]
    getters = []
    for f in fields:
        if isinstance(f, JSONField):
            getters.append(lambda obj, f=f: f.get_db_prep_save(getattr(obj, f.attname), connection))
        elif isinstance(f, DateTimeField) and (f.auto_now or f.auto_now_add):
            getters.append(lambda obj, f=f: f.pre_save(obj, True))
        else:
            getters.append(lambda obj, name=f.attname: getattr(obj, name))
    return lambda obj: [get(obj) for get in getters]
