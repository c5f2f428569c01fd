"""Freshness objectives with real beat and worker processes, the objective pass every second: a rule
whose readiness flag comes late goes at risk (with that cause) before its objective and alerts once; a
pool held full puts another rule at risk with the pool's cause; a rule that meets its objective sends
nothing."""

from datetime import timedelta

import pytest
from django.utils import timezone

from deadletters.models import Alert
from runs.engine.objectives import AT_RISK_ALERT, BREACHED_ALERT, cause_text
from runs.models import SlotObjective, TaskRun
from tasks.models import Pool, TriggerRule
from tests.e2e.helpers import RUN_TIMEOUT, recording_rule, wait_ticking
from tests.support.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.one_pass("sqlite")]

FLAG = "e2e.raw_data.ready"
DAY = 24 * 3600


def due_now(rule: TriggerRule, *, plus: float = 0):
    """Make the rule's next slot (daily, epoch-aligned) due now, as the readiness e2e does."""
    at = (timezone.now() + timedelta(seconds=plus)).replace(microsecond=0)
    TriggerRule.objects.filter(pk=rule.pk).update(next_fire_at=at)
    return at


def history(rule: TriggerRule, *, run_seconds: float, n: int = 3) -> None:
    """Earlier successful runs of the rule (days ago): its duration estimate."""
    base = timezone.now() - timedelta(days=5)
    for i in range(n):
        start = base + timedelta(hours=i)
        TaskRun.objects.create(
            biz_key=f"history:{rule.name}:{i}", rule=rule, rule_name=rule.name, skill=rule.skill,
            source="scheduler", slot=start, trigger_at=start, run_after=start, start_at=start,
            finish_at=start + timedelta(seconds=run_seconds), state="succeeded", attempts=1,
        )  # fmt: skip


def objective_of(rule: TriggerRule, slot) -> SlotObjective | None:
    return SlotObjective.objects.filter(rule=rule, slot=slot).first()


def test_late_readiness_and_a_full_pool_go_at_risk_before_the_objective_and_a_rule_in_time_sends_nothing(harness):
    harness.worker(concurrency=4, extra_env={"HARNESS_OBJECTIVE_SECONDS": "1"})
    harness.beat()
    wait_ticking()

    # A: waits for a flag; usually 4 s of work; done within 10 s of its slot. At risk from slot + 6 s.
    late = recording_rule(
        "late-flag",
        kind="interval",
        interval_seconds=DAY,
        depends_on=[FLAG],
        ready_recheck_seconds=1,
        ready_deadline=timezone.now().replace(hour=23, minute=59, second=59).time(),
        objective="offset",
        objective_offset_seconds=10,
    )
    history(late, run_seconds=4)
    # B: draws from a pool of one that C holds for 15 s. Queued it would be on track (10 s + 60 s by
    # default < 120 s), but behind a full pool it is not (one round of 60 s more).
    pool = Pool.objects.create(name="e2e-llm", reason="end-to-end test", max_concurrency=1)
    holder = recording_rule(
        "holder", kind="interval", interval_seconds=DAY, skill="harness.sleep", params={"seconds": 15}
    )
    holder.pools.add(pool)
    behind = recording_rule(
        "behind-pool", kind="interval", interval_seconds=DAY, objective="offset", objective_offset_seconds=120
    )
    behind.pools.add(pool)
    # M: nothing in its way, plenty of time: met, and silent.
    in_time = recording_rule(
        "in-time", kind="interval", interval_seconds=DAY, objective="offset", objective_offset_seconds=300
    )

    slot_a = due_now(late)
    due_now(holder)
    slot_b = due_now(behind, plus=2)
    slot_m = due_now(in_time)
    deadline_a = slot_a + timedelta(seconds=10)

    # A: on track, then at risk while its deadline is still ahead, with the flag as the cause.
    wait_for(
        lambda: getattr(objective_of(late, slot_a), "status", "") == "on_track", timeout=RUN_TIMEOUT, what="A on track"
    )
    at_risk = wait_for(
        lambda: (o := objective_of(late, slot_a)) is not None and o.status != "on_track" and o,
        timeout=RUN_TIMEOUT,
        what="A at risk",
    )
    assert at_risk.status == "at_risk" and at_risk.checked_at < deadline_a
    assert cause_text(at_risk.cause, lang="en").startswith(f"waiting for readiness flag {FLAG} (not set since ")

    # B: at risk behind the full pool, the pool named.
    b = wait_for(
        lambda: (o := objective_of(behind, slot_b)) is not None and o.status == "at_risk" and o,
        timeout=RUN_TIMEOUT,
        what="B at risk",
    )
    assert cause_text(b.cause, lang="en") == "pool e2e-llm full (1 of 1), 0 runs ahead"

    # M: met.
    wait_for(lambda: getattr(objective_of(in_time, slot_m), "status", "") == "met", timeout=RUN_TIMEOUT, what="M met")

    # A breaches; the flag comes late; its run ends breached. One at-risk alert, before the deadline.
    wait_for(lambda: objective_of(late, slot_a).status == "breached", timeout=RUN_TIMEOUT, what="A breached")
    out = harness.manage("harness", "flags", "set", FLAG, slot_a.date().isoformat())
    assert out.returncode == 0, out.stderr
    wait_for(lambda: objective_of(late, slot_a).closed, timeout=RUN_TIMEOUT, what="A finished, late")
    assert objective_of(late, slot_a).lateness_seconds > 0

    log = Alert.objects.filter(channel=None)
    [risk_a] = log.filter(kind=AT_RISK_ALERT, payload__rule="late-flag")
    assert risk_a.created_at < deadline_a and FLAG in risk_a.payload["reason"]
    assert log.filter(kind=BREACHED_ALERT, payload__rule="late-flag").count() == 1
    [risk_b] = log.filter(kind=AT_RISK_ALERT, payload__rule="behind-pool")
    assert "pool e2e-llm full" in risk_b.payload["reason"]
    assert not log.filter(payload__rule="in-time").exists()
    print(f"\n[e2e objectives] A at risk {(deadline_a - risk_a.created_at).total_seconds():.1f}s before its objective")


def test_an_overrunning_run_is_warned_before_its_deadline(harness):
    """Usually 2 s of work, this time 45 s, done within 40 s of its slot: once running longer than
    usual it is expected to run as long again, so it goes at risk (cause: overrun) and alerts while the
    deadline is still ahead; then it breaches once."""
    harness.worker(concurrency=2, extra_env={"HARNESS_OBJECTIVE_SECONDS": "1"})
    harness.beat()
    wait_ticking()

    rule = recording_rule(
        "overrun",
        kind="interval",
        interval_seconds=DAY,
        skill="harness.sleep",
        params={"seconds": 45},
        objective="offset",
        objective_offset_seconds=40,
    )
    history(rule, run_seconds=2)
    slot = due_now(rule)
    deadline = slot + timedelta(seconds=40)

    wait_for(lambda: TaskRun.objects.filter(rule=rule, slot=slot, state="running").exists(), timeout=RUN_TIMEOUT)
    at_risk = wait_for(
        lambda: (o := objective_of(rule, slot)) is not None and o.status not in ("on_track", "") and o,
        timeout=RUN_TIMEOUT,
        what="the overrun at risk",
    )
    assert at_risk.status == "at_risk" and at_risk.checked_at < deadline
    assert cause_text(at_risk.cause, lang="en").endswith("over its usual 2 s")
    wait_for(lambda: objective_of(rule, slot).status == "breached", timeout=RUN_TIMEOUT + 60, what="breached")

    log = Alert.objects.filter(channel=None, payload__rule="overrun")
    [risk] = log.filter(kind=AT_RISK_ALERT)
    assert risk.created_at < deadline and "over its usual 2 s" in risk.payload["reason"]
    wait_for(lambda: log.filter(kind=BREACHED_ALERT).count() == 1, timeout=RUN_TIMEOUT, what="one breached alert")
    print(
        f"\n[e2e objectives] overrun at risk {(deadline - risk.created_at).total_seconds():.1f}s before its objective"
    )


def test_a_run_no_worker_consumes_goes_at_risk_a_stall_after_its_slot(harness):
    """Only the control queue has a worker: the run waits on "celery" with nobody to take it. Usually
    1 s of work, due within 80 s of its slot: on track while queued, at risk (cause: no worker consumes
    the queue) once QUEUE_STALL has passed since it became due, while the deadline is still ahead.
    Prints the lead time, deadline minus the at-risk alert (by design about 80 - 60 s, less one pass)."""
    harness.worker(
        "control", concurrency=1, args=("--queues=harness_control",), extra_env={"HARNESS_OBJECTIVE_SECONDS": "1"}
    )
    harness.beat()
    wait_ticking()

    rule = recording_rule(
        "no-worker", kind="interval", interval_seconds=DAY, objective="offset", objective_offset_seconds=80
    )
    history(rule, run_seconds=1)
    slot = due_now(rule)
    deadline = slot + timedelta(seconds=80)

    wait_for(
        lambda: getattr(objective_of(rule, slot), "status", "") == "on_track", timeout=RUN_TIMEOUT, what="on track"
    )
    at_risk = wait_for(
        lambda: (o := objective_of(rule, slot)) is not None and o.status != "on_track" and o,
        timeout=RUN_TIMEOUT,
        what="at risk with no worker",
    )
    assert at_risk.status == "at_risk" and at_risk.checked_at < deadline
    assert cause_text(at_risk.cause, lang="en") == "no worker consumes queue celery"
    assert TaskRun.objects.get(rule=rule, slot=slot).state == "pending"  # nobody took it

    [risk] = Alert.objects.filter(channel=None, kind=AT_RISK_ALERT, payload__rule="no-worker")
    assert risk.created_at < deadline and "no worker consumes queue celery" in risk.payload["reason"]
    print(
        f"\n[e2e objectives] no worker: at risk {(risk.created_at - slot).total_seconds():.1f}s after the slot, "
        f"{(deadline - risk.created_at).total_seconds():.1f}s before its objective"
    )
