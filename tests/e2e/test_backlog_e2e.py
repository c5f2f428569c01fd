"""A backlog deeper than the sweeper's re-dispatch delay is not sent twice.

Reported: with 2,400 queued runs the old sweeper re-sent every run still queued after 30 s (it could not
tell a lost message from a queued one), 1,511 wasted executions, and scheduled runs started up to 45 s
late after the burst had ended. Here BACKLOG runs that do next to nothing (harness.sleep for 50 ms)
wait for one slow consumer (a single pool process; a control worker of its own keeps ticks and sweeps
apart, as in the Procfile), on both brokers, while a rule fires every 2 s throughout.

Sized by time, not by count: what matters is a queue older than the re-dispatch delay for most of the
drain. One pool process on this shared 2-core machine executes 8-10 runs a second, so 2,000 runs took
220 s per broker (measured), too long for a suite that must stay under 10 minutes. The processes here
run with a re-dispatch delay of 4 s (HARNESS_REDISPATCH_SECONDS; the default is 10 s), so 200 runs keep
the queue older than the delay for most of a drain of 20-25 s: the ratio of 500 runs against the
default delay, in half the time. 2,000 runs against the old 30 s delay gave the same result (0 re-sent).
"""

import time

import pytest
from django.utils import timezone

from runs.engine.claims import Work, run_claim
from runs.models import TaskRun
from tests.e2e.helpers import recording_rule, wait_ticking
from tests.support.processes import wait_for
from tests.support.runs import run_policy

pytestmark = [pytest.mark.e2e]

BACKLOG = 200
REDISPATCH = {"HARNESS_REDISPATCH_SECONDS": "4"}
HANDFUL = 5
LATE_AFTER_DRAIN = 5.0  # seconds: a slot after the drain starts within this of its instant
POLICY = {"max_attempts": 3, "backoff_base_seconds": 1.0, "max_delay_seconds": 2, "lease_ttl_seconds": 60}


def test_a_deep_backlog_is_not_sent_twice_and_the_schedule_keeps_time_once_it_drains(harness):
    ticker = recording_rule("ticker", kind="interval", interval_seconds=2, skill="harness.noop")
    now = timezone.now()
    for i in range(BACKLOG):
        work = Work(
            biz_key=f"backlog:{i}",
            skill="harness.sleep",
            source=TaskRun.Source.API,
            triggered_by="e2e",
            payload={"params": {"seconds": 0.05}},
            policy=run_policy(POLICY),
        )
        run_claim(work, now=now)
    backlog = TaskRun.objects.filter(biz_key__startswith="backlog:")
    assert backlog.count() == BACKLOG

    harness.worker("control", concurrency=1, args=("--queues=harness_control",), extra_env=REDISPATCH)
    harness.beat(extra_env=REDISPATCH)
    wait_ticking()
    harness.worker("slow", concurrency=1, args=("--queues=celery",), extra_env=REDISPATCH)
    started = time.monotonic()
    wait_for(
        lambda: backlog.filter(state=TaskRun.State.SUCCEEDED).count() == BACKLOG,
        timeout=400,
        interval=1,
        what="the backlog to drain",
    )
    drain_seconds = time.monotonic() - started
    # The rule's runs claimed during the drain queued behind it (first in, first out): the backlog is
    # gone once they have started too.
    wait_for(
        lambda: not ticker.runs.filter(state__in=TaskRun.CLAIMABLE, slot__lte=timezone.now()).exists(),
        timeout=60,
        what="the rule's runs queued during the drain to start",
    )
    drained = timezone.now()

    # Lateness of the rule's slots once the backlog is gone: three slots after the drain.
    wait_for(
        lambda: ticker.runs.filter(slot__gt=drained, state=TaskRun.State.SUCCEEDED).count() >= 3,
        timeout=60,
        what="three slots of the rule after the drain to run",
    )
    after = list(ticker.runs.filter(slot__gt=drained, start_at__isnull=False).order_by("slot"))
    lateness = [(r.start_at - r.slot).total_seconds() for r in after]
    during = [
        (r.start_at - r.slot).total_seconds()
        for r in ticker.runs.filter(slot__lte=drained, start_at__isnull=False).order_by("slot")
    ]

    # One message each at the claim, one per retry; any more was re-sent by the sweeper as lost.
    resent = sum(d - a for d, a in backlog.values_list("dispatches", "attempts"))
    executions = sum(backlog.values_list("attempts", flat=True))
    print(
        f"\n[e2e backlog] {BACKLOG} runs drained in {drain_seconds:.0f}s by one pool process; re-sent "
        f"messages {resent}; executions {executions}; rule lateness during the drain max "
        f"{max(during, default=0):.1f}s, after it {[round(x, 2) for x in lateness]}"
    )
    assert drain_seconds > 3 * 4, "the backlog drained too fast to show anything; make it deeper"
    assert resent <= HANDFUL
    assert executions == BACKLOG
    assert max(lateness) <= LATE_AFTER_DRAIN
