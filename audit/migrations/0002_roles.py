from django.db import migrations


def install(apps, schema_editor):
    from audit.roles import roles_install

    roles_install(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        # The custom permissions the groups get are declared in these.
        ("tasks", "0002_rule_history_perms"),
        ("runs", "0003_trial_lease_perms"),
        ("deadletters", "0002_desk_fields"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
