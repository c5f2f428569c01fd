"""Where the code and the schema stand (invariant 9: upgrades never stop the work).

A release is named by its migrations: the latest migration of each app in its code. A worker reports
the ones it was built for in its heartbeat (runs/engine/workers.py); the schema is at the latest migration
applied of each app. A worker older than the schema keeps working (migrations are expand-only) and
/healthz names it; a worker whose code needs migrations not yet applied refuses to start.
"""

from functools import cache

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder

# The commit of the previous release, whose workers keep running while this release migrates: the
# N-1 test (tests/e2e/test_upgrade_n1_e2e.py) starts a worker from it. Set it to the last commit on
# main that shipped, when a release is cut (docs/upgrading.md, "Choosing the previous release").
PREVIOUS_RELEASE = "5ad593401c301d766d94eb98d87fc6a5675c146c"


@cache
def code_migrations() -> dict[str, str]:
    """The latest migration of each app in this process's code, {app label: migration name}."""
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    return dict(sorted(graph.leaf_nodes()))


def schema_migrations() -> dict[str, str]:
    """The latest migration applied to the database of each app (by name: they are numbered)."""
    latest: dict[str, str] = {}
    for app, name in MigrationRecorder(connections[DEFAULT_DB_ALIAS]).applied_migrations():
        latest[app] = max(name, latest.get(app, name))
    return dict(sorted(latest.items()))


def migrations_missing() -> list[str]:
    """The migrations this code needs that the database has not applied ("app.name"), in order."""
    connection = connections[DEFAULT_DB_ALIAS]
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{m.app_label}.{m.name}" for m, backwards in plan if not backwards]


# This project's apps: a release is named by their migrations (Django's and libraries' move with
# the requirements, not with a release of ours).
OWN_APPS = ("audit", "deadletters", "runs", "tasks")


def behind(built_for: dict[str, str] | None, schema: dict[str, str]) -> dict[str, str]:
    """The apps whose schema is past the code a worker was built for, {app: the schema's latest}.
    None (a release from before workers reported it) is older than any schema."""
    if built_for is None:
        return {app: at for app, at in schema.items() if app in OWN_APPS}
    return {app: at for app, at in schema.items() if at > built_for.get(app, "")}


def label(migrations: dict[str, str]) -> str:
    """A short name of a release or a schema state: "runs.0020_x, tasks.0031_y"."""
    return ", ".join(f"{app}.{name}" for app, name in sorted(migrations.items())) or "unknown"
