"""Re-install the desk roles once the Incident model's permissions exist (every role views incidents)."""

from django.db import migrations


def install(apps, schema_editor):
    from harness_site.audit.roles import roles_install

    roles_install(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0010_slot_objective_roles"),
        ("runs", "0024_incident"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
