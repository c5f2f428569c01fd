"""A busy threads worker on Redis acknowledges finished runs and fetches new ones at once.

celery/celery#6941: with every thread busy, a finished task's ack waited on kombu's 10 s timer, and
so did the next fetch: runs started in waves 10 s apart (harness_site/hub_wakeup.py has the cause).
Here 3 waves of 4 one-second runs go to a worker with 4 threads. Without the wake-up the third wave
cannot start before two of the timer's 10 s periods have begun, so at least 10 s after the first;
with it the third starts about 2 s after the first. The bound is the timer's period, not a speed.
"""

import time

import pytest
from django.conf import settings
from django.utils import timezone

from runs.engine.claims import run_claim
from runs.models import Attempt, TaskRun
from tests.support.runs import api_work

pytestmark = [pytest.mark.e2e, pytest.mark.backend]

THREADS = 4
WAVES = 3
UNACKED = "unacked"  # kombu's Redis transport: the hash of messages delivered and not acknowledged
KOMBU_TIMER = 10.0  # kombu's Redis transport: maybe_restore_messages every 10 s


@pytest.mark.skipif(not settings.CELERY_BROKER_URL.startswith("redis"), reason="the waves were seen on Redis")
def test_a_busy_threads_worker_starts_the_next_wave_without_waiting_for_the_timer(harness):
    from harness_site.celery import app

    harness.worker("waves", concurrency=THREADS, args=("--pool=threads",))
    now = timezone.now()
    runs = [
        run_claim(api_work(f"waves:{i}", skill="harness.sleep", params={"seconds": 1}), now=now).run
        for i in range(THREADS * WAVES)
    ]
    # Backpressure stays honest meanwhile: the worker holds no more messages than it has threads
    # (prefetch multiplier 1, late ack): the rest wait in the queue for any worker to take.
    held_most = 0
    ids = [r.id for r in runs]
    deadline = time.monotonic() + 90
    with app.connection_for_read() as conn:
        redis = conn.default_channel.client
        while time.monotonic() < deadline:
            held_most = max(held_most, redis.hlen(UNACKED))
            if TaskRun.objects.filter(id__in=ids, state=TaskRun.State.SUCCEEDED).count() == len(ids):
                break
            time.sleep(0.05)
    assert TaskRun.objects.filter(id__in=ids, state=TaskRun.State.SUCCEEDED).count() == len(ids)
    assert 0 < held_most <= THREADS, f"the worker held {held_most} messages with {THREADS} threads"

    starts = sorted(Attempt.objects.filter(run__in=runs).values_list("started_at", flat=True))
    assert len(starts) == THREADS * WAVES  # each ran once
    # Never more in flight than threads: the fifth run starts after the first ones finished.
    assert (starts[THREADS] - starts[0]).total_seconds() >= 1
    span = (starts[-1] - starts[0]).total_seconds()
    assert span < KOMBU_TIMER, f"the last wave started {span:.1f} s after the first: waves on the timer"
