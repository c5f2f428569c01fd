"""The django-celery-beat entries that wake the harness: the scheduler tick and the sweeper.

They are ordinary PeriodicTasks, so an operator can retune or pause them in the admin;
installing again leaves an edited entry alone.
"""

from typing import Literal

from django.conf import settings

# The HARNESS settings that give an entry its period in seconds.
IntervalSetting = Literal["TICK_SECONDS", "SWEEP_SECONDS", "SENSOR_SECONDS", "ALERT_CHECK_SECONDS"]

BEAT_ENTRIES: tuple[tuple[str, str, IntervalSetting], ...] = (
    ("harness: scheduler tick", "runs.scheduler_tick", "TICK_SECONDS"),
    ("harness: sweeper", "runs.sweep", "SWEEP_SECONDS"),
    ("harness: file sensors", "tasks.sensors_scan", "SENSOR_SECONDS"),
    ("harness: alerts", "deadletters.alerts_check", "ALERT_CHECK_SECONDS"),
)
DESCRIPTION = "Installed by Agent Harness. Wakes the harness; the schedules themselves live in Trigger rules."


def beat_entries_install(apps) -> None:
    """Create the entries if missing. `apps` is a migration's app registry or django.apps.apps."""
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    for name, task, setting in BEAT_ENTRIES:
        every = max(1, int(settings.HARNESS[setting]))
        interval, _ = IntervalSchedule.objects.get_or_create(every=every, period="seconds")
        PeriodicTask.objects.get_or_create(
            name=name,
            defaults={
                "task": task,
                "interval": interval,
                "enabled": True,
                "expire_seconds": 30,
                "description": DESCRIPTION,
            },
        )


def beat_entries_remove(apps) -> None:
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name__in=[n for n, _, _ in BEAT_ENTRIES]).delete()
