"""Sources that existed before signature schemes keep today's signing (harness-v1); new ones get v2."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.backend

BEFORE = [("tasks", "0001_initial")]
AFTER = [("tasks", "0003_webhook_schemes_and_counted_refusals")]


def test_existing_sources_migrate_to_harness_v1_and_new_ones_default_to_harness(transactional_db):
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    rule = old.get_model("tasks", "TriggerRule").objects.create(
        name="old-rule", reason="t", kind="event", timezone="UTC", skill="harness.noop", dedupe_key_template="{rule}"
    )
    old.get_model("tasks", "TriggerSource").objects.create(
        name="old-hook", kind="webhook", identity="svc:old", rule=rule, secret_env="HARNESS_SECRET_OLD"
    )

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps
    source_model = new.get_model("tasks", "TriggerSource")
    assert source_model.objects.get(name="old-hook").signature_scheme == "harness-v1"
    fresh = source_model.objects.create(
        name="new-hook", kind="webhook", identity="svc:new", rule_id=rule.pk, secret_env="HARNESS_SECRET_NEW"
    )
    assert fresh.signature_scheme == "harness"
    # Leave the schema as the rest of the suite expects it.
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
