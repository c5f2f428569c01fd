"""Backpressure end to end: a burst above the high watermark sheds only
recomputable triggers, each with a decision; no one-time input is lost; coalesced triggers run once
with the newest payload; intake resumes below the low watermark. Real worker and beat processes."""

import pytest
from django.utils import timezone

from runs.desk.selectors import run_coalesced_into
from runs.models import Backpressure, Decision, TaskRun
from tasks.models import DiagnosticRecord, Pool, TriggerRule, TriggerSource
from tasks.triggers.events import event_intake
from tests.e2e.helpers import RUN_TIMEOUT, recording_rule, wait_ticking
from tests.support.processes import wait_for

HIGH, LOW = 5, 2


def event_rule(name: str, recoverability: str, **over) -> TriggerRule:
    rule = recording_rule(
        name, kind="event", dedupe_key_template="{rule}:{object_id}:{version}", recoverability=recoverability, **over
    )
    TriggerSource.objects.create(
        name=f"{name}-in", kind="python", identity="svc:e2e", rule=rule, snapshot_fields=["status"]
    )
    return rule


def send(rule: TriggerRule, object_id: str, version: int, status: str = ""):
    payload = {"object_id": object_id, "action": "changed", "version": version, "status": status}
    return event_intake(source=f"{rule.name}-in", payload=payload, now=timezone.now())


@pytest.mark.e2e
def test_a_burst_above_the_high_watermark_sheds_only_recomputable_triggers(harness):
    pool, _ = Pool.objects.get_or_create(name="global", defaults={"reason": "e2e"})
    Backpressure.objects.update_or_create(pool=pool, defaults={"high_watermark": HIGH, "low_watermark": LOW})
    ledger = event_rule("ledger", "one_time_input")
    prices = event_rule("prices", "recomputable")
    orders = event_rule("order-state", "coalesce", object_key_template="order:{object_id}")
    ticker = recording_rule("ticker", kind="interval", interval_seconds=1, recoverability="recomputable")

    # The burst arrives before any worker runs: nothing drains meanwhile.
    kept = [send(ledger, f"entry-{i}", 1) for i in range(HIGH + 2)]  # one-time input, above the mark
    shed = [send(prices, f"sku-{i}", 1) for i in range(8)]
    merged = [send(orders, "o-1", v, status=f"status-{v}") for v in range(1, 5)]

    assert [r.outcome for r in kept] == ["accepted"] * (HIGH + 2)
    assert [(r.status, r.outcome) for r in shed] == [(202, "shed")] * 8
    assert [r.outcome for r in merged] == ["accepted"] * 4
    assert Decision.objects.filter(rule=prices, reason="shed").count() == 8
    assert all(d.details["pending"] >= HIGH for d in Decision.objects.filter(rule=prices))

    harness.worker(concurrency=2)
    harness.beat()
    wait_ticking()
    # Slots that fell due before the first tick waited for beat to start; on a loaded machine that can
    # take longer than the on-time grace, and such a slot is rightly "missed". From here on, only shed.
    ticking_from = timezone.now()

    # Every one-time input runs; the coalesced object runs once, with the newest payload.
    wait_for(
        lambda: TaskRun.objects.filter(rule__in=[ledger, orders], state="succeeded").count() == HIGH + 3,
        timeout=RUN_TIMEOUT,
        what="every kept run to succeed",
    )
    survivor = TaskRun.objects.get(rule=orders, state="succeeded")
    assert survivor.payload["event"]["snapshot"] == {"status": "status-4"}
    assert DiagnosticRecord.objects.filter(rule_name="order-state").count() == 1
    replaced = TaskRun.objects.filter(rule=orders, state="coalesced")
    assert replaced.count() == 3 and set(replaced.values_list("attempts", flat=True)) == {0}
    assert {run_coalesced_into(r) for r in replaced} == {survivor}
    assert Decision.objects.filter(rule=orders, reason="coalesced").count() == 3

    # Drained below the low watermark: intake admits recomputable work again, from every path.
    wait_for(
        lambda: TaskRun.objects.filter(rule=ticker, state="succeeded").exists(),
        timeout=RUN_TIMEOUT,
        what="a ticker slot to run once the backlog drained",
    )
    again = wait_for(
        lambda: (r := send(prices, "sku-late", 2)).outcome == "accepted" and r,
        timeout=RUN_TIMEOUT,
        what="a recomputable event to be admitted again",
    )
    assert again.status == 202
    # The ticker's slots so far are each a run or a shed decision, never both, never neither.
    slots_run = set(TaskRun.objects.filter(rule=ticker).values_list("slot", flat=True))
    slots_shed = set(Decision.objects.filter(rule=ticker).values_list("slot", flat=True))
    assert not slots_run & slots_shed
    assert set(Decision.objects.filter(rule=ticker, slot__gte=ticking_from).values_list("reason", flat=True)) <= {
        "shed"
    }
    assert set(Decision.objects.filter(rule=ticker).values_list("reason", flat=True)) <= {"shed", "missed"}
