"""The lint step's migration check (./harness test; docs/upgrading.md): a migration that this release
adds must not break the previous release's workers, which keep running while it is applied.

django-migration-linter reads each new migration's SQL (sqlmigrate, on the configured database) and
refuses dropping or renaming a column or table, NOT NULL without a database default, and a column's
type change; here a plain AddIndex on a run table is refused too (build it concurrently). A
migration marked ContractOf(expand, why=...) (harness_site/migration_contract.py) is the contract
step of an expand the previous release shipped, and may. The baseline is the previous release
(harness_site/release.py): migrations it already had are not linted again.

    python -m tests.support.migration_lint        exit 1 with the reasons, 0 when every new one is safe
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Tables the hot path writes all the time: an index built in a plain CREATE INDEX locks their writes.
RUN_TABLE_MODELS = {("runs", m) for m in ("taskrun", "attempt", "runstep", "externalcall", "decision", "poolslot")}


def shipped(commit: str, app_paths: dict[str, Path]) -> set[tuple[str, str]]:
    """The migrations (app, name) the commit has, read from git."""
    have: set[tuple[str, str]] = set()
    for app, path in app_paths.items():
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{commit}:{path.relative_to(ROOT)}/migrations"],
            capture_output=True,
            text=True,
        ).stdout.split()
        have |= {(app, name.removesuffix(".py")) for name in listed if name[:4].isdigit()}
    return have


def not_null_without_default(op, *, was_null: bool) -> str | None:
    """The field an AddField adds, or an AlterField turns (from nullable, `was_null`), NOT NULL with
    no database default ("model.field"), or None. The previous release's INSERTs leave such a column
    out and fail."""
    from django.db.migrations.operations import AddField, AlterField
    from django.db.models import NOT_PROVIDED

    if not (isinstance(op, AddField) or (isinstance(op, AlterField) and was_null)) or op.field.many_to_many:
        return None
    if op.field.null or op.field.db_default is not NOT_PROVIDED:
        return None
    return f"{op.model_name_lower}.{op.name}"


def _was_null(loader, key: tuple[str, str], op) -> bool:
    """Whether the field an AlterField changes was nullable before the migration."""
    from django.db.migrations.operations import AlterField

    if not isinstance(op, AlterField):
        return False
    before = loader.project_state(key, at_end=False).models[key[0], op.model_name_lower]
    return bool(before.fields[op.name].null)


def lint(*, since: str, quiet: bool = False) -> list[str]:
    """The reasons this code's migrations added after `since` are refused (none: all safe)."""
    from django.apps import apps
    from django.db import DEFAULT_DB_ALIAS, connections
    from django.db.migrations.loader import MigrationLoader
    from django.db.migrations.operations import AddIndex
    from django_migration_linter import MigrationLinter

    from harness_site.migration_contract import ContractOf

    class Linter(MigrationLinter):
        def should_ignore_migration(self, app_label, migration_name, operations=(), is_initial=False):
            contract = any(isinstance(o, ContractOf) for o in operations)
            return contract or super().should_ignore_migration(app_label, migration_name, operations, is_initial)

    loader = MigrationLoader(None, ignore_no_migrations=True)
    ours = {
        c.label: path
        for c in apps.get_app_configs()
        if (path := Path(c.path).resolve()).is_relative_to(ROOT) and "site-packages" not in path.parts
    }
    baseline = shipped(since, ours)
    new = sorted(key for key in loader.disk_migrations if key[0] in ours and key not in baseline)
    vendor = connections[DEFAULT_DB_ALIAS].vendor  # the SQL sqlmigrate writes (the test settings wrap the engine)
    # SQLite adds a column by rebuilding the table, and the linter's SQLite analyser then refuses
    # every NOT NULL column of it, a database default or not. There the NOT NULL rule is checked
    # on the operations instead (not_null_without_default), the same on every database.
    excluded = ["NOT_NULL"] if vendor == "sqlite" else []
    linter = Linter(
        path=str(ROOT), no_cache=True, no_output=quiet, analyser_string=vendor, exclude_migration_tests=excluded
    )
    reasons: list[str] = []
    for key in new:
        migration = loader.disk_migrations[key]
        before = linter.nb_erroneous
        linter.lint_migration(migration)
        if linter.nb_erroneous > before:
            reasons.append(f"{key[0]}.{key[1]}: would break the running release (see the linter's lines above)")
        for op in migration.operations:
            if excluded and (field := not_null_without_default(op, was_null=_was_null(loader, key, op))):
                reasons.append(
                    f"{key[0]}.{key[1]}: {field} is NOT NULL without a database default (db_default=), "
                    "so the running release's inserts fail"
                )
            if isinstance(op, ContractOf):
                app, _, name = op.expand.partition(".")
                if (app, name) not in baseline:
                    reasons.append(f"{key[0]}.{key[1]}: its expand {op.expand} is not in the previous release")
            elif type(op) is AddIndex and (key[0], op.model_name_lower) in RUN_TABLE_MODELS:
                reasons.append(
                    f"{key[0]}.{key[1]}: AddIndex on {op.model_name_lower} locks its writes; "
                    "use harness_site.concurrent_index.AddIndexConcurrently (docs/upgrading.md)"
                )
    return reasons


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from harness_site.release import PREVIOUS_RELEASE

    known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}"])
    if known.returncode != 0:
        print(f"migration lint: the previous release {PREVIOUS_RELEASE} is not in this clone (git fetch --unshallow)")
        return 1 if os.environ.get("CI") else 0
    reasons = lint(since=PREVIOUS_RELEASE)
    for reason in reasons:
        print(f"migration lint: {reason}")
    return 1 if reasons else 0


if __name__ == "__main__":
    sys.exit(main())
