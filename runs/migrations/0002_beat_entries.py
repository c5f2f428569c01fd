"""Install the beat entries that wake the harness (runs/beat.py): tick, sweeper, file sensors, alerts."""

from django.db import migrations

from runs.beat import beat_entries_install, beat_entries_remove


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [
        migrations.RunPython(lambda apps, _: beat_entries_install(apps), lambda apps, _: beat_entries_remove(apps)),
    ]
