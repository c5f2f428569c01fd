"""Alerts with real processes: a failing rule in a real worker, the retry and final-failure alerts
delivered by the worker (on commit, through the broker) to a real HTTP receiver on 127.0.0.1."""

import pytest
from django.utils import timezone

from deadletters.models import Alert, AlertChannel, DeadLetter
from runs.models import TaskRun
from tests.e2e.helpers import RUN_TIMEOUT, make_rule, next_whole_second, wait_finished, wait_run_of, wait_ticking
from tests.support.processes import wait_for
from tests.support.receiver import start_receiver

pytestmark = pytest.mark.e2e


@pytest.fixture
def receiver():
    rec, server = start_receiver()
    yield rec
    server.shutdown()
    server.server_close()


def test_a_failing_rule_alerts_a_warning_then_urgent_through_the_worker(harness, receiver):
    AlertChannel.objects.all().delete()
    AlertChannel.objects.create(name="hook", kind="webhook", url=receiver.url, format="feishu", min_severity="notice")
    receiver.answer = {"code": 0, "msg": "success"}
    harness.worker("w1")
    harness.beat()
    wait_ticking()
    rule = make_rule("always-fails", kind="once", run_at=next_whole_second(timezone.now(), plus=1),
                     skill="harness.fail", params={"error_kind": "timeout"}, max_attempts=2, backoff_base_seconds=1,
                     max_delay_seconds=1)

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
    assert set(Alert.objects.filter(channel__isnull=False).values_list("state", flat=True)) == {Alert.State.SENT}
