"""On-call may re-run missed slots (and backfill): re-install the desk roles with it."""

from django.db import migrations


def install(apps, schema_editor):
    from harness_site.audit.roles import roles_install

    roles_install(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0010_slot_objective_roles"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
