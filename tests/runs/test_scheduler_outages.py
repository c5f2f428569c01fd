"""The scheduler's own tick history: a tick after a gap longer than the slot grace records one outage
row (start: the tick before, end: this tick); steady ticks record none; the selector answers
"outages between A and B", an outage still going on included; retention prunes them."""

from datetime import UTC, datetime, timedelta

import pytest

from runs.engine.outages import Outage, outage_sweep, outages_between, scheduler_tick_record
from runs.models import SchedulerOutage, SchedulerTick
from tasks.triggers.scheduler import scheduler_tick

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)


@pytest.mark.django_db
def test_a_tick_after_a_gap_longer_than_the_grace_records_one_outage(settings):
    settings.HARNESS = {**settings.HARNESS, "SLOT_GRACE_SECONDS": 60}
    for seconds in (0, 1, 2, 3, 63, 64, 65, 300):  # grace 60 s: 3 -> 63 is exactly the grace, 65 -> 300 is more
        scheduler_tick(now=T0 + seconds * S)
    assert list(SchedulerOutage.objects.values_list("started_at", "ended_at")) == [(T0 + 65 * S, T0 + 300 * S)]
    tick = SchedulerTick.objects.get(name="scheduler")
    assert (tick.last_tick_at, tick.history_since) == (T0 + 300 * S, T0)


@pytest.mark.django_db
def test_a_late_tick_from_a_slower_beat_never_moves_the_last_tick_back():
    scheduler_tick_record(now=T0, claimed=0, dedupe_hits=0)
    scheduler_tick_record(now=T0 + 10 * S, claimed=0, dedupe_hits=0)
    scheduler_tick_record(now=T0 + 5 * S, claimed=0, dedupe_hits=0)
    assert SchedulerTick.objects.get(name="scheduler").last_tick_at == T0 + 10 * S
    assert not SchedulerOutage.objects.exists()


@pytest.mark.django_db
def test_a_row_from_before_the_history_begins_its_history_at_its_last_tick():
    SchedulerTick.objects.create(name="scheduler", last_tick_at=T0)  # written by the previous release
    scheduler_tick_record(now=T0 + 5 * S, claimed=0, dedupe_hits=0)
    assert SchedulerTick.objects.get(name="scheduler").history_since == T0


@pytest.mark.django_db
def test_outages_between_includes_one_still_going_on():
    for at in (T0, T0 + timedelta(hours=1), T0 + timedelta(hours=3)):
        scheduler_tick_record(now=at, claimed=0, dedupe_hits=0)
    now = T0 + timedelta(hours=5)
    found = outages_between(T0 + timedelta(minutes=90), now, now=now)
    assert found.outages == (
        Outage(T0 + timedelta(hours=1), T0 + timedelta(hours=3)),
        Outage(T0 + timedelta(hours=3), None),
    )
    assert (found.last_tick, found.since) == (T0 + timedelta(hours=3), T0)
    # Before the first outage: nothing.
    assert outages_between(T0 - timedelta(hours=1), T0, now=T0).outages == ()


@pytest.mark.django_db
def test_retention_prunes_old_outages_and_moves_the_history_start_past_them():
    for at in (T0, T0 + timedelta(hours=1), T0 + timedelta(days=10), T0 + timedelta(days=10, hours=1)):
        scheduler_tick_record(now=at, claimed=0, dedupe_hits=0)
    assert SchedulerOutage.objects.count() == 3
    now = T0 + timedelta(days=12)
    assert outage_sweep(now=now, days=5) == 1
    assert SchedulerOutage.objects.count() == 2
    assert SchedulerTick.objects.get(name="scheduler").history_since == now - timedelta(days=5)
