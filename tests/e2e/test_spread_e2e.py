"""Spread with real beat and worker processes: 300 rules due at one instant start over half a
minute, each slot keeping its nominal key and business date, each run started once."""

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from runs.models import TaskRun
from tasks.models import TriggerRule
from tasks.triggers.work import rule_render_key, slot_values
from tests.e2e.helpers import wait_ticking
from tests.support.processes import wait_for
from tests.support.rules import build_rule

# Where a start lands is decided in tasks.rules (tested on both databases); one pass shows it on real
# processes, on the production backend.
pytestmark = [pytest.mark.e2e, pytest.mark.one_pass("postgresql")]

RULES = 300
SPREAD = 30  # seconds: long enough to show the comb, short enough not to hold a test worker a minute
# Each second gets RULES / SPREAD = 10 starts on average; a hash is not a perfect comb, and a loaded
# machine's worker may start a few late together, so up to four times that in one second.
MOST_IN_ONE_SECOND = 4 * RULES // SPREAD


def common_slot(after: datetime) -> tuple[datetime, int]:
    """A whole second soon after `after` and an interval (longer than the spread) it is a slot of:
    interval slots are epoch-aligned, so any divisor of its epoch second will do. A cron's next
    minute would make the test wait up to a minute more for nothing."""
    second = int(after.timestamp()) + 1
    while True:
        divisor = next((d for d in range(2 * SPREAD, 20 * SPREAD) if second % d == 0), None)
        if divisor:
            return datetime.fromtimestamp(second, UTC), divisor
        second += 1


def test_three_hundred_rules_due_at_one_instant_start_over_the_spread(harness):
    harness.worker(concurrency=4)
    harness.beat()
    wait_ticking()
    slot, interval = common_slot(timezone.now() + timedelta(seconds=8))
    # Checked as the form would, then written in one statement (300 saves would take longer than the wait).
    rules = [
        build_rule(f"report-{i:03d}", kind="interval", interval_seconds=interval, spread_seconds=SPREAD)
        for i in range(RULES)
    ]
    rules[0].full_clean()
    for rule in rules:
        rule.next_fire_at = slot
    TriggerRule.objects.bulk_create(rules)
    assert timezone.now() < slot, "the rules were written after their slot: raise the lead time"

    def all_succeeded():
        runs = list(TaskRun.objects.filter(rule__name__startswith="report-").select_related("rule"))
        return runs if len(runs) == RULES and all(r.state == TaskRun.State.SUCCEEDED for r in runs) else None

    runs = wait_for(all_succeeded, timeout=SPREAD + 120, interval=1, what=f"{RULES} spread runs to succeed")

    # Each slot keeps its nominal instant, key and business date; each run started once.
    assert {r.slot for r in runs} == {slot}
    for run in runs:
        assert run.biz_key == rule_render_key(run.rule, slot)
        assert run.payload["slot_local"] == slot_values(run.rule, slot)["slot"]
        assert run.attempts == 1 and run.dispatches >= 1
        assert run.payload["spread"] == {"seconds": SPREAD, "pool": ""}
        assert slot <= run.run_after < slot + timedelta(seconds=SPREAD)
        assert run.start_at >= run.run_after
    assert len({r.biz_key for r in runs}) == RULES

    planned = Counter(int((r.run_after - slot).total_seconds()) for r in runs)
    started = Counter(int((r.start_at - slot).total_seconds()) for r in runs)
    print(
        f"\n[e2e spread] {RULES} rules, spread {SPREAD} s: planned starts use {len(planned)} seconds "
        f"(busiest {max(planned.values())}); real starts use {len(started)} seconds (busiest "
        f"{max(started.values())}), last start {max(started)} s after the slot"
    )
    assert len(planned) >= SPREAD * 0.9, "the planned starts cover the spread"
    assert max(planned.values()) <= MOST_IN_ONE_SECOND
    assert max(started.values()) <= MOST_IN_ONE_SECOND, started.most_common(3)
    assert max(started) >= SPREAD * 0.8, "the real starts reach the end of the spread"
