from django.db import migrations

from runs.beat import beat_entries_install

ALERTS_ENTRY = "harness: alerts"
DEFAULT_CHANNEL = "On-call email (ADMINS)"


def install(apps, schema_editor):
    # The beat entry of deadletters.alerts_check (runs/beat.py BEAT_ENTRIES); others are left alone.
    beat_entries_install(apps)
    # Out of the box, final failures and other urgent alerts mail ADMINS, as before channels existed.
    apps.get_model("deadletters", "AlertChannel").objects.get_or_create(
        name=DEFAULT_CHANNEL, defaults={"kind": "email", "recipients": "", "min_severity": "urgent", "enabled": True}
    )


def remove(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=ALERTS_ENTRY).delete()
    apps.get_model("deadletters", "AlertChannel").objects.filter(name=DEFAULT_CHANNEL).delete()


class Migration(migrations.Migration):
    """Installs the alerts beat entry and the default email channel."""

    dependencies = [
        ("deadletters", "0004_alerts"),
        ("runs", "0002_beat_entries"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(install, remove)]
