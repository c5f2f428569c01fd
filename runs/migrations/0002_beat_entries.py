"""Install the beat entries that wake the harness: the scheduler tick and the sweeper.

They are ordinary django-celery-beat PeriodicTasks, so an operator can retune or pause them in
the admin; re-running this migration leaves an edited entry alone.
"""

from django.conf import settings
from django.db import migrations

BEAT_ENTRIES = (
    ("harness: scheduler tick", "runs.scheduler_tick", "TICK_SECONDS"),
    ("harness: sweeper", "runs.sweep", "SWEEP_SECONDS"),
)


def install(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    for name, task, setting in BEAT_ENTRIES:
        every = max(1, int(settings.HARNESS[setting]))
        interval, _ = IntervalSchedule.objects.get_or_create(every=every, period="seconds")
        PeriodicTask.objects.get_or_create(
            name=name,
            defaults={"task": task, "interval": interval, "enabled": True, "expire_seconds": 30,
                      "description": "Installed by Agent Harness. Wakes the harness; the rules live in Trigger rules."},
        )


def remove(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name__in=[n for n, _, _ in BEAT_ENTRIES]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(install, remove)]
