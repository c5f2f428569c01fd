"""The lint step's migration check (tests/support/migration_lint.py) refuses a new migration that
would break the previous release's running workers, unless marked as a contract step."""

import shutil
import sys

import pytest
from django.test.utils import override_settings

from harness_site.release import PREVIOUS_RELEASE, code_migrations
from tests.support.migration_lint import ROOT, lint

pytestmark = pytest.mark.django_db(transaction=True)  # sqlmigrate: a schema editor outside a transaction

PLANTED = """from django.db import migrations, models

from harness_site.concurrent_index import AddIndexConcurrently
from harness_site.migration_contract import ContractOf


class Migration(migrations.Migration):
    atomic = False  # an AddIndexConcurrently may be planted
    dependencies = [("runs", "{leaf}")]
    operations = [{operations}]
"""


@pytest.fixture
def plant(tmp_path, monkeypatch):
    """plant(operations): a copy of runs' migrations with one more, used as runs' migrations."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def planted(operations: str) -> str:
        package = tmp_path / "planted_runs_migrations"
        shutil.rmtree(package, ignore_errors=True)
        shutil.copytree(ROOT / "runs" / "migrations", package, ignore=shutil.ignore_patterns("__pycache__"))
        leaf = code_migrations()["runs"]
        (package / "0999_planted.py").write_text(PLANTED.format(leaf=leaf, operations=operations))
        for name in [m for m in sys.modules if m.startswith("planted_runs_migrations")]:
            del sys.modules[name]
        return "planted_runs_migrations"

    return planted


def lint_with(module: str) -> list[str]:
    with override_settings(MIGRATION_MODULES={"runs": module}):
        return lint(since=PREVIOUS_RELEASE, quiet=True)


def test_this_release_s_migrations_pass():
    assert lint(since=PREVIOUS_RELEASE, quiet=True) == []


def test_a_planted_remove_field_is_refused(plant):
    reasons = lint_with(plant('migrations.RemoveField("taskrun", "trace_id")'))
    assert reasons == ["runs.0999_planted: would break the running release (see the linter's lines above)"]


def test_a_not_null_column_without_a_database_default_is_refused_and_a_nullable_one_passes(plant):
    assert lint_with(plant('migrations.AddField("attempt", "probe", models.IntegerField(default=0))'))
    assert not lint_with(plant('migrations.AddField("attempt", "probe", models.IntegerField(null=True))'))
    # NOT NULL with a database default: the running release's inserts get the default (SQLite
    # rebuilds the table for it, which the linter's SQLite analyser alone would refuse).
    assert not lint_with(plant('migrations.AddField("attempt", "probe", models.IntegerField(db_default=0))'))
    # Tightening a nullable column to NOT NULL without a default is refused; relabelling is not.
    assert lint_with(plant('migrations.AlterField("taskrun", "rule_version", models.PositiveIntegerField())'))
    assert not lint_with(
        plant('migrations.AlterField("taskrun", "rule_version", models.PositiveIntegerField(null=True, help_text="v"))')
    )


def test_a_plain_index_on_a_run_table_is_refused(plant):
    index = 'migrations.AddIndex("taskrun", models.Index(fields=["trace_id"], name="taskrun_trace_probe"))'
    assert lint_with(plant(index)) == [
        "runs.0999_planted: AddIndex on taskrun locks its writes; "
        "use harness_site.concurrent_index.AddIndexConcurrently (docs/upgrading.md)"
    ]
    concurrent = 'AddIndexConcurrently("taskrun", models.Index(fields=["trace_id"], name="taskrun_trace_probe"))'
    assert lint_with(plant(concurrent)) == []


def test_the_contract_step_of_a_shipped_expand_passes_and_of_an_unshipped_one_is_refused(plant):
    shipped = '"runs.0019_decision_tally_missed_label"'
    remove = 'migrations.RemoveField("taskrun", "trace_id")'
    assert lint_with(plant(f'ContractOf({shipped}, why="trace ids moved"), {remove}')) == []
    reasons = lint_with(plant(f'ContractOf("runs.0021_workerheartbeat_migrations", why="too early"), {remove}'))
    assert reasons == [
        "runs.0999_planted: its expand runs.0021_workerheartbeat_migrations is not in the previous release"
    ]
