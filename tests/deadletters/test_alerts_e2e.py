"""Alerts with real processes: a failing rule in a real worker, the retry and final-failure alerts
delivered by the worker (on commit, through the broker) to a real HTTP receiver on 127.0.0.1; a
receiver that is down at first gets the alert once it is back, through beat's alerts check."""

import pytest
from django.utils import timezone

from deadletters.models import Alert, AlertChannel, DeadLetter
from runs.models import TaskRun
from tests.e2e.helpers import RUN_TIMEOUT, next_whole_second, recording_rule, wait_finished, wait_run_of, wait_ticking
from tests.support.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.one_pass("sqlite")]

RETRY_SECONDS = 2  # HARNESS_ALERT_RETRY_SECONDS in the worker: retries after 2 s, then 4 s


def test_a_failing_rule_alerts_a_warning_then_urgent_through_the_worker(harness, receiver):
    AlertChannel.objects.all().delete()
    AlertChannel.objects.create(name="hook", kind="webhook", url=receiver.url, format="feishu", min_severity="notice")
    receiver.answer = {"code": 0, "msg": "success"}
    harness.worker("w1")
    harness.beat()
    wait_ticking()
    rule = recording_rule(
        "always-fails",
        kind="once",
        run_at=next_whole_second(timezone.now(), plus=1),
        skill="harness.fail",
        params={"error_kind": "timeout"},
        max_attempts=2,
        backoff_base_seconds=1,
        max_delay_seconds=1,
    )

    run = wait_finished(wait_run_of(rule))
    assert run.state == TaskRun.State.FAILED
    wait_for(lambda: len(receiver.requests) >= 2, timeout=RUN_TIMEOUT, what="two alerts at the receiver")

    texts = [r["content"]["text"] for r in receiver.requests]
    assert [t.split()[1] for t in texts] == ["WARNING", "URGENT"]  # attempt 1 of 2 (near the cap), then final
    for text in texts:
        assert f"run id:     {run.id}" in text and f"biz_key:    {run.biz_key}" in text
        assert "rule:       always-fails" in text and "error kind: timeout" in text and "link:" in text
    ticket = DeadLetter.objects.get(run=run)
    assert f"/admin/deadletters/deadletter/{ticket.id}/change/" in texts[1]
    # The receiver has the request before the worker has its answer and marks the alert sent.
    sent = wait_for(
        lambda: (
            (states := set(Alert.objects.filter(channel__isnull=False).values_list("state", flat=True)))
            and Alert.State.PENDING not in states
            and states
        ),
        timeout=30,
        what="both alerts marked after delivery",
    )
    assert sent == {Alert.State.SENT}


def test_a_receiver_that_was_down_gets_the_alert_through_the_periodic_check(harness, receiver):
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    every_second, _ = IntervalSchedule.objects.get_or_create(every=1, period="seconds")
    assert PeriodicTask.objects.filter(name="harness: alerts").update(interval=every_second) == 1
    AlertChannel.objects.all().delete()
    AlertChannel.objects.create(name="hook", kind="webhook", url=receiver.url, format="slack", min_severity="urgent")
    receiver.fail_first = 2
    harness.worker("w1", extra_env={"HARNESS_ALERT_RETRY_SECONDS": str(RETRY_SECONDS)})
    harness.beat()
    wait_ticking()
    rule = recording_rule(
        "fails-once-for-good",
        kind="once",
        run_at=next_whole_second(timezone.now(), plus=1),
        skill="harness.fail",
        params={"error_kind": "invalid_param"},
    )
    run = wait_finished(wait_run_of(rule))

    # Attempt 1 on commit (500), attempt 2 after 2 s (500), attempt 3 after 4 s more (200): each
    # retry sent by the periodic check (every second here), not by the worker that failed it.
    wait_for(lambda: len(receiver.requests) >= 3, timeout=RUN_TIMEOUT, what="the third delivery attempt")
    alert = Alert.objects.get(channel__isnull=False)
    wait_for(lambda: Alert.objects.get(id=alert.id).state == Alert.State.SENT, timeout=30, what="the alert sent")
    alert.refresh_from_db()
    assert alert.attempts == 3 and alert.last_error == ""
    assert all(f"run id:     {run.id}" in r["text"] for r in receiver.requests)
    assert len(receiver.requests) == 3  # no duplicate sends from the check and the on-commit task
