"""Re-install the desk roles once the business calendar models' permissions exist (operators edit
calendars and their overrides; every role may view them)."""

from django.db import migrations


def install(apps, schema_editor):
    from harness_site.audit.roles import roles_install

    roles_install(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0008_rule_import_action"),
        ("tasks", "0013_business_calendars"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
