"""Re-install the desk roles once the SlotObjective model's permissions exist (every role views
slot objectives; operators and on-call acknowledge them)."""

from django.db import migrations


def install(apps, schema_editor):
    from harness_site.audit.roles import roles_install

    roles_install(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0009_calendar_roles"),
        ("runs", "0017_slot_objective"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
