"""Queue producers: a tasks.event_intake message is taken by a real worker and becomes one run, executed."""

import pytest

from harness_site.celery import app
from runs.models import TaskRun
from tasks.models import DiagnosticRecord, EventDelivery, TriggerSource
from tests.support.processes import wait_for
from tests.support.rules import make_rule

RUN_TIMEOUT = 90


@pytest.mark.e2e
def test_it_turns_a_queue_message_into_one_executed_run(harness):
    rule = make_rule("queue-events", kind="event", skill="harness.record")
    TriggerSource.objects.create(
        name="orders-queue", kind="queue", identity="svc:orders", rule=rule, snapshot_fields=["total"]
    )
    payload = {"object_id": "o-1", "action": "created", "version": 1, "total": 10}
    # Sent twice, as a producer retrying after a lost acknowledgement would: still one run.
    for delivery in ("m-1", "m-2"):
        app.send_task(
            "tasks.event_intake", kwargs={"source": "orders-queue", "payload": payload, "delivery_id": delivery}
        )
    harness.worker()

    wait_for(lambda: EventDelivery.objects.count() == 2, timeout=RUN_TIMEOUT, what="both messages taken")
    run = wait_for(
        lambda: TaskRun.objects.filter(state="succeeded").first(),
        timeout=RUN_TIMEOUT,
        what="the event's run to succeed",
    )
    assert (run.biz_key, run.source, run.triggered_by) == (
        f"rule/{run.rule_id}/event/queue-events:o-1:created:1",
        "event",
        "svc:orders",
    )
    assert run.payload["event"]["snapshot"] == {"total": 10} and run.payload["event"]["channel"] == "queue"
    assert TaskRun.objects.count() == 1 and run.dedupe_hits == 1
    assert DiagnosticRecord.objects.filter(biz_key=run.biz_key).count() == 1


@pytest.mark.e2e
def test_it_runs_a_file_that_lands_in_a_watched_folder_from_beat(harness, tmp_path):
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    rule = make_rule(
        "file-events", kind="event", skill="harness.record", dedupe_key_template="{rule}:{object_id}:{version}"
    )
    TriggerSource.objects.create(
        name="drop", kind="file", identity="svc:sftp", rule=rule, watch_dir=str(inbox), require_ready_marker=True
    )
    # The installed entry scans every 30 s; this test does not wait that long.
    every_second, _ = IntervalSchedule.objects.get_or_create(every=1, period="seconds")
    PeriodicTask.objects.filter(task="tasks.sensors_scan").update(interval=every_second)
    (inbox / "batch.csv.part").write_text("half")
    (inbox / "batch.csv").write_text("a,b\n1,2\n")
    (inbox / "unmarked.csv").write_text("not announced")
    harness.worker()
    harness.beat()

    (inbox / "batch.csv.ready").write_text("")
    run = wait_for(
        lambda: TaskRun.objects.filter(state="succeeded").first(), timeout=RUN_TIMEOUT, what="the file's run to succeed"
    )
    assert run.payload["event"]["criteria"]["object_id"] == "batch.csv"
    assert TaskRun.objects.count() == 1
