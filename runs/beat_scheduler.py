"""Beat's scheduler: django-celery-beat's DatabaseScheduler, with the scheduler tick on the boundary.

An interval entry fires `every` seconds after it last fired, at whatever phase beat started with, so
a slot due on the second waited up to a whole tick for the next wake-up. The
tick's entry fires on multiples of its interval since the epoch instead (12:00:01.000, 12:00:02.000,
...): every whole-second slot (interval rules are epoch-aligned, cron on the minute) is claimed the
instant it is due, and the tick never needs to sleep to the instant in a worker process that runs
could use. Every other entry (sweeper, sensors, alerts) keeps its stock schedule; so does the tick's
if an operator gave it a crontab.
"""

import math
from datetime import datetime

from celery import schedules
from django_celery_beat.schedulers import DatabaseScheduler, ModelEntry

TICK_TASK = "runs.scheduler_tick"


def boundary_due(last_run_at: datetime, now: datetime, every: float) -> tuple[bool, float]:
    """Whether an entry that last fired at `last_run_at` is due at `now`, firing on multiples of
    `every` seconds since the epoch, and in how many seconds to look again (beat's is_due)."""
    nxt = (math.floor(last_run_at.timestamp() / every) + 1) * every
    at = now.timestamp()
    if at >= nxt:
        return True, (math.floor(at / every) + 1) * every - at
    return False, nxt - at


class OnTheBoundary(schedules.schedule):
    """celery's `schedule(run_every)`, firing on multiples of run_every since the epoch."""

    def is_due(self, last_run_at: datetime) -> schedules.schedstate:
        due, nxt = boundary_due(self.maybe_make_aware(last_run_at), self.maybe_make_aware(self.now()), self.seconds)
        return schedules.schedstate(is_due=due, next=nxt)


class Entry(ModelEntry):
    def __init__(self, model, app=None):
        super().__init__(model, app=app)
        schedule = getattr(self, "schedule", None)
        if (
            self.task == TICK_TASK
            and schedule is not None
            and type(schedule) is schedules.schedule
            and schedule.seconds > 0
        ):
            self.schedule = OnTheBoundary(schedule.run_every, nowfun=schedule.nowfun, app=schedule._app)


class Scheduler(DatabaseScheduler):
    Entry = Entry
