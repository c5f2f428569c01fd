"""The index behind a partial business-key search, on each database.

On PostgreSQL a GIN index of UPPER(biz_key) with pg_trgm's gin_trgm_ops: it serves the
`icontains` that runs/desk/key_search.py builds (UPPER(biz_key) LIKE UPPER('%…%')). pg_trgm ships with
PostgreSQL and is a trusted extension, but creating it needs the CREATE privilege on the database;
without it the search is the same, by a scan (README.md, "Production"). SQLite has neither GIN nor
pg_trgm: there the index is a plain one of the same expression, so a table rebuild (SQLite's way
to alter a column) can recreate every index in the model's Meta.
"""

import logging

from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import DatabaseError, models, transaction

from harness_site.concurrent_index import AddIndexConcurrently

EXTENSION = "pg_trgm"
log = logging.getLogger(__name__)


class KeyTrigramIndex(GinIndex):
    """GinIndex(OpClass(expr, "gin_trgm_ops")) on PostgreSQL; Index(expr) elsewhere."""

    def create_sql(self, model, schema_editor, using="", **kwargs):
        if schema_editor.connection.vendor == "postgresql":
            return super().create_sql(model, schema_editor, using=using, **kwargs)
        plain = [e.get_source_expressions()[0] if isinstance(e, OpClass) else e for e in self.expressions]
        return models.Index(*plain, name=self.name).create_sql(model, schema_editor, **kwargs)


def trigrams_available(schema_editor) -> bool:
    """pg_trgm installed, or installed now; False (and the search scans) where this role may not."""
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            schema_editor.execute(f"CREATE EXTENSION IF NOT EXISTS {EXTENSION}")
        return True
    except DatabaseError:
        return False


def _index_state(schema_editor, name: str) -> str:
    """'valid', 'invalid' (a concurrent build that failed half way) or 'missing'."""
    with schema_editor.connection.cursor() as cur:
        cur.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s", [name]
        )
        row = cur.fetchone()
    return "missing" if row is None else ("valid" if row[0] else "invalid")


class AddKeyTrigramIndex(AddIndexConcurrently):
    """harness_site.concurrent_index.AddIndexConcurrently (CONCURRENTLY on PostgreSQL, plain on
    SQLite); on PostgreSQL kept when already there and valid (0009 built it), rebuilt when a failed
    concurrent build left it invalid, skipped with a warning when pg_trgm cannot be created;
    reversed there, it stays (0009's)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        self._ensure_not_in_transaction(schema_editor)
        state = _index_state(schema_editor, self.index.name)
        if state == "valid":
            return None
        if state == "invalid":
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(self.index.name)}")
        if not trigrams_available(schema_editor):
            log.warning(
                "%s not built: this role cannot CREATE EXTENSION %s. Key search still works, by a scan;"
                " see README.md, 'Production'.",
                self.index.name,
                EXTENSION,
            )
            return None
        return super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        return None  # the index belongs to 0009 below, which built it outside the model state
