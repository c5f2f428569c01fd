"""An index added to a busy table without stopping its writes (docs/upgrading.md).

PostgreSQL's plain CREATE INDEX holds a lock that blocks every write to the table until it is built:
on the run tables, that stops the running release's workers for as long as the build takes. So an
index on them is built CONCURRENTLY (Django's AddIndexConcurrently, in a migration with
`atomic = False`). SQLite has no such statement and one writer at a time anyway: there the index is
built plainly. The migration lint (tests/support/migration_lint.py) refuses a plain AddIndex on the
run tables.
"""

from django.contrib.postgres.operations import AddIndexConcurrently as PostgresAddIndexConcurrently
from django.db.migrations.operations import AddIndex


class AddIndexConcurrently(PostgresAddIndexConcurrently):
    """CREATE INDEX CONCURRENTLY on PostgreSQL, CREATE INDEX elsewhere; the migration that holds it
    must set `atomic = False` (PostgreSQL cannot build concurrently inside a transaction)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)
