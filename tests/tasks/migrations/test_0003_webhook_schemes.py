"""Sources that existed before signature schemes keep today's signing (harness-v1); new ones get v2."""

import pytest
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.backend

BEFORE = [("tasks", "0001_initial")]
AFTER = [("tasks", "0003_webhook_schemes_and_counted_refusals")]
ALIAS = "migration_check"


@pytest.fixture
def empty_database(transactional_db, django_db_blocker, tmp_path):
    """A connection to an empty database of the test's own, on the suite's backend. The migrations
    under test run forward there from nothing: unapplying the test database's whole schema back to
    tasks 0001 and reapplying it cost more than the rest of the file many times over."""
    base = connections["default"].settings_dict
    if connections["default"].vendor == "sqlite":
        name = str(tmp_path / "migrations.sqlite3")
    else:
        name = f"{base['NAME']}_migrations"
        with connections["default"].cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
            cursor.execute(f'CREATE DATABASE "{name}"')
    connections.settings[ALIAS] = {**base, "NAME": name}
    try:
        with django_db_blocker.unblock():
            yield connections[ALIAS]
    finally:
        connections[ALIAS].close()
        del connections[ALIAS]
        del connections.settings[ALIAS]
        if connections["default"].vendor != "sqlite":
            with connections["default"].cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')


def test_existing_sources_migrate_to_harness_v1_and_new_ones_default_to_harness(empty_database):
    executor = MigrationExecutor(empty_database)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    rule = (
        old.get_model("tasks", "TriggerRule")
        .objects.using(ALIAS)
        .create(
            name="old-rule",
            reason="t",
            kind="event",
            timezone="UTC",
            skill="harness.noop",
            dedupe_key_template="{rule}",
        )
    )
    old.get_model("tasks", "TriggerSource").objects.using(ALIAS).create(
        name="old-hook", kind="webhook", identity="svc:old", rule=rule, secret_env="HARNESS_SECRET_OLD"
    )

    executor = MigrationExecutor(empty_database)
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps
    sources = new.get_model("tasks", "TriggerSource").objects.using(ALIAS)
    assert sources.get(name="old-hook").signature_scheme == "harness-v1"
    fresh = sources.create(
        name="new-hook", kind="webhook", identity="svc:new", rule_id=rule.pk, secret_env="HARNESS_SECRET_NEW"
    )
    assert fresh.signature_scheme == "harness"
