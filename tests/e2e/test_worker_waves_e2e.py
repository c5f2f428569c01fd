"""A busy threads worker on Redis acknowledges finished runs and fetches new ones at once.

celery/celery#6941: with every thread busy, a finished task's ack waited on kombu's 10 s timer, and
so did the next fetch: runs started in waves 10 s apart (harness_site/hub_wakeup.py has the cause).
Here 3 waves of 4 one-second runs go to a worker with 4 threads. Without the wake-up the third wave
cannot start before two of the timer's 10 s periods have begun, so at least 10 s after the first;
with it the third starts about 2 s after the first. The bound is the timer's period, not a speed.
"""

import pytest
from django.conf import settings
from django.utils import timezone

from runs.claims import run_claim
from runs.models import Attempt, TaskRun
from tests.e2e.helpers import wait_finished
from tests.support.runs import api_work

pytestmark = [pytest.mark.e2e, pytest.mark.backend]

THREADS = 4
WAVES = 3
KOMBU_TIMER = 10.0  # kombu's Redis transport: maybe_restore_messages every 10 s


@pytest.mark.skipif(not settings.CELERY_BROKER_URL.startswith("redis"), reason="the waves were seen on Redis")
def test_a_busy_threads_worker_starts_the_next_wave_without_waiting_for_the_timer(harness):
    harness.worker("waves", concurrency=THREADS, args=("--pool=threads",))
    now = timezone.now()
    runs = [
        run_claim(api_work(f"waves:{i}", skill="harness.sleep", params={"seconds": 1}), now=now).run
        for i in range(THREADS * WAVES)
    ]
    for run in runs:
        assert wait_finished(run, timeout=90).state == TaskRun.State.SUCCEEDED

    starts = sorted(Attempt.objects.filter(run__in=runs).values_list("started_at", flat=True))
    assert len(starts) == THREADS * WAVES  # each ran once
    # Never more in flight than threads: the fifth run starts after the first ones finished.
    assert (starts[THREADS] - starts[0]).total_seconds() >= 1
    span = (starts[-1] - starts[0]).total_seconds()
    assert span < KOMBU_TIMER, f"the last wave started {span:.1f} s after the first: waves on the timer"
