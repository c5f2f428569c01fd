"""Beat wakes the scheduler tick on the boundary (runs/beat_scheduler.py).

Pure: instants in, beat's (is_due, next check) out; and the entries beat builds from the installed rows.
"""

from datetime import UTC, datetime, timedelta

import pytest
from celery import schedules
from django_celery_beat.models import PeriodicTask

from runs.beat_scheduler import Entry, OnTheBoundary, boundary_due

T = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("last", "now", "due", "next_check"),
    [
        (T + timedelta(seconds=0.004), T + timedelta(seconds=0.5), False, 0.5),  # fired 4 ms late: next is 12:00:01.000
        (T + timedelta(seconds=0.004), T + timedelta(seconds=1), True, 1.0),
        (T + timedelta(seconds=0.004), T + timedelta(seconds=1.003), True, 0.997),
        (T + timedelta(seconds=0.999), T + timedelta(seconds=1.0), True, 1.0),  # fired just before: due on the second
        (T - timedelta(hours=1), T + timedelta(seconds=0.25), True, 0.75),  # beat was down: due now, then on the second
    ],
)
def test_it_is_due_on_each_whole_second_whatever_the_phase_it_last_fired_at(last, now, due, next_check):
    is_due, nxt = boundary_due(last, now, 1.0)
    assert is_due is due
    assert nxt == pytest.approx(next_check)


def test_a_longer_interval_is_on_its_multiples_since_the_epoch():
    assert boundary_due(T + timedelta(seconds=5.2), T + timedelta(seconds=9), 5.0) == (False, pytest.approx(1.0))
    assert boundary_due(T + timedelta(seconds=5.2), T + timedelta(seconds=10.01), 5.0)[0] is True


@pytest.mark.django_db
def test_beat_puts_the_tick_OnTheBoundary_and_leaves_the_other_entries_alone():
    tick = Entry(PeriodicTask.objects.get(task="runs.scheduler_tick"))
    sweep = Entry(PeriodicTask.objects.get(task="runs.sweep"))
    assert isinstance(tick.schedule, OnTheBoundary) and tick.schedule.seconds == 1
    assert type(sweep.schedule) is schedules.schedule
