"""A trace across real processes: a signed webhook in this process, the run executed by a real Celery
worker with LOG_FORMAT=json, which calls a real HTTP model provider on loopback. The worker reads
the message's traceparent header (harness_site/celery.py), logs JSON lines that name the run and
its trace, and sends the provider the same trace id."""

import json
import re
import time

import pytest
from django.utils import timezone

from runs.models import TaskRun
from tasks.models import Agent, TriggerSource
from tasks.rules import events, signatures
from tests.e2e.helpers import RUN_TIMEOUT
from tests.support.fake_model import FakeModelServer, json_completion
from tests.support.processes import wait_for
from tests.support.rules import make_rule

pytestmark = pytest.mark.e2e

SECRET = "hs-test-trace-e2e-0123456789abcdefghijkl"
SECRET_ENV = "HARNESS_SECRET_TEST_TRACE_E2E_HOOK"
KEY_ENV = "HARNESS_SECRET_TEST_TRACE_E2E_MODEL"
KEY = "sk-trace-e2e-0123456789"
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


@pytest.fixture
def server():
    s = FakeModelServer().start()
    yield s
    s.stop()


def test_a_real_worker_logs_json_lines_in_the_runs_trace_and_sends_it_to_the_provider(
    harness, client, monkeypatch, server
):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    server.respond(json_completion({"summary": "fine"}))
    agent = Agent.objects.create(
        name="tracer", provider="openai", base_url=server.base_url, model="gpt-test", api_key_env=KEY_ENV
    )
    rule = make_rule(
        "traced-e2e",
        kind="event",
        dedupe_key_template="{rule}:{object_id}",
        skill="llm_json",
        agent=agent,
        output_schema={"type": "object", "required": ["summary"]},
        params={"prompt": "Summarise the order."},
    )
    TriggerSource.objects.create(name="orders", kind="webhook", identity="svc:orders", rule=rule, secret_env=SECRET_ENV)
    worker = harness.worker("w1", extra_env={"LOG_FORMAT": "json", KEY_ENV: KEY})

    raw = json.dumps({"object_id": "E-1", "action": "placed", "version": 1}).encode()
    ts = str(int(time.time()))
    signature = signatures.sign(signatures.HARNESS, SECRET.encode(), timestamp=ts, delivery_id="dlv-e2e", body=raw)
    headers = {events.HEADER_TIMESTAMP: ts, events.HEADER_DELIVERY: "dlv-e2e", events.HEADER_SIGNATURE: signature}
    assert client.post("/hooks/orders/", data=raw, content_type="application/json", headers=headers).status_code == 202

    run = TaskRun.objects.get()
    wait_for(
        lambda: TaskRun.objects.filter(id=run.id, state__in=TaskRun.FINISHED).exists(),
        timeout=RUN_TIMEOUT,
        what="the worker to finish the run",
    )
    run.refresh_from_db()
    assert run.state == TaskRun.State.SUCCEEDED, run.last_error
    assert TRACEPARENT.match(server.requests[0]["headers"]["traceparent"]).group(1) == run.trace_id

    lines = [json.loads(line) for line in worker.log().splitlines() if line.startswith("{")]
    assert lines, worker.log()[-3000:]
    mine = [line for line in lines if line["run_id"] == run.id]
    assert any("called gpt-test" in line["message"] for line in mine), mine
    assert {line["trace_id"] for line in mine} == {run.trace_id}
    assert {line["biz_key"] for line in mine} == {run.biz_key}
    # Celery's own line for the task is in the trace too: the worker read the message's header. Celery
    # writes it after the task returned, so after the run's outcome committed: wait for it.
    task_lines = wait_for(
        lambda: [
            line
            for line in (json.loads(raw) for raw in worker.log().splitlines() if raw.startswith("{"))
            if "runs.execute" in line["message"] and "succeeded" in line["message"]
        ],
        timeout=RUN_TIMEOUT,
        what="Celery's line for the task",
    )
    assert {line["trace_id"] for line in task_lines} == {run.trace_id}, task_lines


def test_a_queue_producers_traceparent_is_the_runs_trace(harness):
    from harness_site.celery import app

    rule = make_rule("traced-queue", kind="event")
    TriggerSource.objects.create(name="orders-queue", kind="queue", identity="svc:queue", rule=rule)
    harness.worker("w1")
    producer_trace = "4bf92f3577b34da6a3ce929d0e0e4736"

    app.send_task(
        "tasks.event_intake",
        kwargs={"source": "orders-queue", "payload": {"object_id": "Q-1", "action": "placed", "version": 1}},
        headers={"traceparent": f"00-{producer_trace}-00f067aa0ba902b7-01"},
    )

    run = wait_for(
        lambda: TaskRun.objects.filter(rule=rule).first(), timeout=RUN_TIMEOUT, what="the queued event's run"
    )
    assert run.trace_id == producer_trace
    wait_for(
        lambda: TaskRun.objects.filter(id=run.id, state=TaskRun.State.SUCCEEDED).exists(),
        timeout=RUN_TIMEOUT,
        what="the run to succeed",
    )


def test_a_worker_with_otel_variables_exports_the_runs_spans_in_its_trace(harness):
    from runs.engine.claims import Work, run_claim

    worker = harness.worker("w1", extra_env={"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "100"})
    runs = [
        run_claim(
            Work(biz_key=f"trace:otel:{i}", skill="harness.noop", source="api", triggered_by="tests", payload={}),
            now=timezone.now(),
        ).run
        for i in range(2)
    ]

    def exported(run: TaskRun, name: str) -> bool:
        text = worker.log()
        return any(
            f'"trace_id": "0x{run.trace_id}"' in block and f'"name": "{name}"' in block for block in text.split("\n}\n")
        )

    for run in runs:
        # Our attempt span, and the Celery instrumentation's span of the task, both in the run's trace.
        wait_for(lambda run=run: exported(run, "run.attempt"), timeout=RUN_TIMEOUT, what="the attempt span")
        wait_for(lambda run=run: exported(run, "run/runs.execute"), timeout=RUN_TIMEOUT, what="Celery's task span")
    assert runs[0].trace_id != runs[1].trace_id
