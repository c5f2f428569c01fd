"""Re-install the desk roles once the Pool model's permissions exist (operators edit pools)."""

from django.db import migrations


def install(apps, schema_editor):
    from harness_site.audit.roles import roles_install

    roles_install(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0003_catchup_actions"),
        ("tasks", "0005_pool"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
