"""run_biz_key_trgm_idx into the model's Meta (runs/key_index.py). On PostgreSQL 0009 built it
already: kept when valid, built CONCURRENTLY (the run table stays writable) where 0009 could not
create pg_trgm or a build failed. On SQLite a plain index of UPPER(biz_key)."""

from django.contrib.postgres.indexes import OpClass
from django.db import migrations
from django.db.models.functions import Upper

from runs.key_index import AddKeyTrigramIndex, KeyTrigramIndex


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY runs outside a transaction

    dependencies = [("runs", "0025_rerun_slots_permission")]

    operations = [
        AddKeyTrigramIndex(
            model_name="taskrun",
            index=KeyTrigramIndex(OpClass(Upper("biz_key"), name="gin_trgm_ops"), name="run_biz_key_trgm_idx"),
        ),
    ]
