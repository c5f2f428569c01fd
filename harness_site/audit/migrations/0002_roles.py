"""The Operators, On-call and Viewers groups (harness_site/audit/roles.py), once every app's permissions exist."""

from django.db import migrations


def install(apps, schema_editor):
    from harness_site.audit.roles import roles_install

    roles_install(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("tasks", "0001_initial"),
        ("runs", "0002_beat_entries"),
        ("deadletters", "0002_default_channel"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
