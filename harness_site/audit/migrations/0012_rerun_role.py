"""Operators and on-call may re-run chosen slots (runs.rerun_slots): re-install the desk roles with it."""

from django.db import migrations


def install(apps, schema_editor):
    from harness_site.audit.roles import roles_install

    roles_install(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0011_incident_roles"),
        ("runs", "0025_rerun_slots_permission"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
