"""The runs changelist's biz_key search (icontains, i.e. UPPER(biz_key) LIKE UPPER('%x%'))
served by a trigram index instead of a scan of every run. PostgreSQL only (pg_trgm ships with it
and is a trusted extension); SQLite, the embedded default, keeps scanning its small table. The
index is not in the model state: Django cannot express an expression index with a trigram opclass
portably, and nothing but the planner uses it."""

from django.db import migrations

from runs.key_index import trigrams_available

INDEX = "run_biz_key_trgm_idx"


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    if not trigrams_available(schema_editor):  # no privilege: 0026 tries again; the search scans meanwhile
        return
    schema_editor.execute(
        f"CREATE INDEX IF NOT EXISTS {INDEX} ON runs_taskrun USING gin ((UPPER(biz_key::text)) gin_trgm_ops)"
    )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("runs", "0008_worker_heartbeats_and_dispatch_count")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
