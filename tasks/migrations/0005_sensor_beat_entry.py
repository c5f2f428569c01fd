from django.db import migrations

from runs.beat import beat_entries_install

SENSOR_ENTRY = "harness: file sensors"


def remove_sensor_entry(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=SENSOR_ENTRY).delete()


class Migration(migrations.Migration):
    """Installs the file-sensor beat entry (runs/beat.py BEAT_ENTRIES); existing entries are left alone."""

    dependencies = [
        ("tasks", "0004_event_sources"),
        ("runs", "0002_beat_entries"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [
        migrations.RunPython(lambda apps, _: beat_entries_install(apps), remove_sensor_entry),
    ]
