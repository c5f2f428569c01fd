"""The marker of a contract migration (docs/upgrading.md): the one step allowed to break the
previous release's code (drop or rename a column or table, NOT NULL without a database default, a
type change), because an earlier release's expand step made the code stop needing it.

    operations = [
        ContractOf("runs.0021_taskrun_owner_new", why="no release since 0.9 reads owner"),
        migrations.RemoveField("taskrun", "owner"),
    ]

The migration linter of the lint step (tests/support/migration_lint.py) refuses such operations in a
migration without the marker, and checks that the named expand is an earlier migration that the
previous release already shipped. The marker does nothing to the database.
"""

from django.db.migrations.operations.base import Operation


class ContractOf(Operation):
    reduces_to_sql = False
    reversible = True

    def __init__(self, expand: str, *, why: str):
        self.expand = expand  # "app_label.migration_name" of the expand step, shipped before
        self.why = why
        super().__init__()

    def deconstruct(self):
        return self.__class__.__name__, [self.expand], {"why": self.why}

    def state_forwards(self, app_label, state):
        pass

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        pass

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        pass

    def describe(self):
        return f"Contract step of {self.expand}"
