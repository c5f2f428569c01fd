"""One trace from a trigger to the model call (harness_site/tracing.py), and logs that name it
(harness_site/logs.py).

A signed webhook delivery goes through the Django test client; the executor runs in this process
with the message's own traceparent header as its context (what harness_site/celery.py does in a
worker), and calls a real HTTP model provider on loopback. OpenTelemetry's in-memory exporter
records the spans. The run, its dead-letter ticket, the Celery message, the provider's request and
every JSON log line carry the same trace id.
"""

import io
import json
import logging
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timedelta

import pytest
from celery.signals import before_task_publish
from django.db import transaction
from django.utils import timezone
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from deadletters.models import DeadLetter
from harness_site import tracing
from harness_site.logs import ContextFilter, JsonFormatter, logging_config
from runs.engine.claims import Work, run_claim
from runs.engine.dispatch import run_dispatch_on_commit
from runs.engine.executor import run_execute
from runs.models import TaskRun
from tasks.models import Agent, TriggerRule, TriggerSource
from tasks.rules import events, signatures
from tasks.triggers.operator import rule_fire
from tasks.triggers.scheduler import scheduler_tick
from tests.support.fake_model import FakeModelServer, Reply, json_completion
from tests.support.processes import ROOT
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "hs-test-trace-0123456789abcdefghijklmnop"
SECRET_ENV = "HARNESS_SECRET_TEST_TRACE_HOOK"
KEY_ENV = "HARNESS_SECRET_TEST_TRACE_MODEL"
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")
SCHEMA = {"type": "object", "required": ["summary"], "properties": {"summary": {"type": "string"}}}


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    yield exporter
    tracing.use_provider(None)
    provider.shutdown()


@pytest.fixture
def server():
    s = FakeModelServer().start()
    yield s
    s.stop()


@pytest.fixture
def published():
    """The headers of every Celery message sent (Celery's own signal, at the broker boundary)."""
    sent: list[dict] = []

    def record(sender=None, headers=None, body=None, **_):
        sent.append({"task": sender, "headers": dict(headers or {}), "args": body[0] if body else None})

    before_task_publish.connect(record, weak=False)
    yield sent
    before_task_publish.disconnect(record)


@pytest.fixture
def json_log():
    """Every log record, as the JSON console handler of LOG_FORMAT=json writes it."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    yield stream
    root.removeHandler(handler)


def make_source(monkeypatch, server: FakeModelServer) -> TriggerSource:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    monkeypatch.setenv(KEY_ENV, "sk-trace-test-0123456789")
    agent = Agent.objects.create(
        name="tracer",
        provider="openai",
        base_url=server.base_url,
        model="gpt-test",
        api_key_env=KEY_ENV,
        connect_timeout_seconds=2.0,
        read_timeout_seconds=5.0,
    )
    rule = make_rule(
        "traced-orders",
        kind="event",
        dedupe_key_template="{rule}:{object_id}",
        skill="llm_json",
        agent=agent,
        output_schema=SCHEMA,
        params={"prompt": "Summarise the order."},
        max_attempts=1,
    )
    return TriggerSource.objects.create(
        name="orders", kind="webhook", identity="svc:orders", rule=rule, secret_env=SECRET_ENV
    )


def deliver(client, body: dict, delivery: str = "dlv-1"):
    raw = json.dumps(body).encode()
    ts = str(int(time.time()))
    headers = {
        events.HEADER_TIMESTAMP: ts,
        events.HEADER_DELIVERY: delivery,
        events.HEADER_SIGNATURE: signatures.sign(
            signatures.HARNESS, SECRET.encode(), timestamp=ts, delivery_id=delivery, body=raw
        ),
    }
    return client.post("/hooks/orders/", data=raw, content_type="application/json", headers=headers)


def execute_as_worker(message: dict, *, at: datetime) -> str:
    """What harness_site/celery.py does around runs.execute: the message's traceparent is the context."""
    token = otel_context.attach(tracing.context_from_headers(message["headers"]))
    try:
        return run_execute(run_id=message["args"][0], worker="w1", clock=lambda: at, rand=lambda: 0.5).status
    finally:
        otel_context.detach(token)


def test_one_trace_runs_from_the_webhook_through_claim_attempt_and_model_call(
    client, monkeypatch, server, spans, published, json_log
):
    server.respond(Reply(400, '{"error": "bad request"}'))  # invalid_param: fails for good, opens a ticket
    make_source(monkeypatch, server)

    answer = deliver(client, {"object_id": "A-1", "action": "placed", "version": 1})

    assert answer.status_code == 202, answer.content
    run = TaskRun.objects.get()
    assert re.fullmatch(r"[0-9a-f]{32}", run.trace_id)
    [message] = [m for m in published if m["task"] == "runs.execute"]
    assert message["args"] == [run.id]
    assert TRACEPARENT.match(message["headers"]["traceparent"]), message
    assert TRACEPARENT.match(message["headers"]["traceparent"]).group(1) == run.trace_id

    assert execute_as_worker(message, at=timezone.now()) == "failed"

    # The provider was told the run's trace, with the model call's own span as parent.
    [request] = server.requests
    provider_trace, provider_parent = TRACEPARENT.match(request["headers"]["traceparent"]).groups()
    assert provider_trace == run.trace_id
    assert DeadLetter.objects.get(run=run).trace_id == run.trace_id

    finished = {s.name: s for s in spans.get_finished_spans()}
    assert {"trigger.event", "run.claim", "run.attempt", "run.step", "model.call"} <= set(finished)
    assert {f"{s.context.trace_id:032x}" for s in spans.get_finished_spans()} == {run.trace_id}
    trigger, claim, attempt, model = (finished[n] for n in ("trigger.event", "run.claim", "run.attempt", "model.call"))
    assert trigger.parent is None  # no server span in the test client: the delivery starts the trace
    assert claim.parent.span_id == trigger.context.span_id
    assert attempt.parent.span_id == claim.context.span_id  # through the message header
    call_step = next(s for s in spans.get_finished_spans() if s.attributes.get("harness.step") == "call_model")
    assert call_step.parent.span_id == attempt.context.span_id and model.parent.span_id == call_step.context.span_id
    assert f"{model.context.span_id:016x}" == provider_parent
    assert attempt.attributes["harness.attempt"] == 1 and model.attributes["gen_ai.request.model"] == "gpt-test"
    assert not model.status.is_ok  # the 400 is on the span

    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    worker_lines = [line for line in lines if line["run_id"] == run.id]
    assert len(worker_lines) >= 3, lines  # the attempt's warning, the outcome, the alert at least
    assert {line["trace_id"] for line in worker_lines} == {run.trace_id}
    assert {line["biz_key"] for line in worker_lines} == {run.biz_key}
    assert {line["rule"] for line in worker_lines} == {"traced-orders"}
    assert any(line["attempt"] == 1 and line["level"] == "WARNING" for line in worker_lines)
    for line in lines:
        assert set(line) >= {"time", "level", "logger", "message", "trace_id", "run_id", "biz_key", "rule", "attempt"}


def test_a_succeeding_webhook_run_keeps_its_trace_and_a_resend_is_the_same_run(
    client, monkeypatch, server, spans, published
):
    server.respond(json_completion({"summary": "fine"}))
    make_source(monkeypatch, server)

    first = deliver(client, {"object_id": "B-2", "action": "placed", "version": 1}, delivery="dlv-b")
    again = deliver(
        client, {"object_id": "B-2", "action": "placed", "version": 1}, delivery="dlv-b2"
    )  # another delivery of the same event

    run = TaskRun.objects.get()
    assert (first.status_code, again.status_code) == (202, 200)
    [message] = [m for m in published if m["task"] == "runs.execute"]  # a dedupe hit sends nothing
    assert execute_as_worker(message, at=timezone.now()) == "succeeded"
    assert TRACEPARENT.match(server.requests[0]["headers"]["traceparent"]).group(1) == run.trace_id
    assert TaskRun.objects.get().trace_id == run.trace_id


def test_every_slot_and_every_button_press_starts_a_trace_of_its_own_without_the_sdk(published):
    # No SDK installed (the default): nothing is recorded, yet every run gets an id and its message the header.
    rules = [make_rule(f"every-minute-{i}", kind="cron") for i in range(2)]
    now = max(TriggerRule.objects.values_list("next_fire_at", flat=True)) + timedelta(seconds=1)
    assert scheduler_tick(now=now).claimed == 2
    rule_fire(rule=rules[0], actor="alice", now=now)

    runs = list(TaskRun.objects.order_by("id"))
    assert len(runs) == 3 and all(re.fullmatch(r"[0-9a-f]{32}", r.trace_id) for r in runs)
    assert len({r.trace_id for r in runs}) == 3
    sent = {m["args"][0]: TRACEPARENT.match(m["headers"]["traceparent"]).group(1) for m in published}
    assert sent == {r.id: r.trace_id for r in runs}


def test_a_redispatched_run_is_executed_in_its_own_trace_whatever_the_message_says(spans, published):
    from runs.engine.claims import Work, run_claim

    run = run_claim(
        Work(biz_key="trace:redispatch", skill="harness.noop", source="api", triggered_by="tests", payload={}),
        now=timezone.now(),
    ).run
    other = tracing.new_trace_id()
    message = {"args": [run.id], "headers": {"traceparent": f"00-{other}-{'1' * 16}-01"}}  # the sweep's context

    assert execute_as_worker(message, at=timezone.now()) == "succeeded"
    [attempt] = [s for s in spans.get_finished_spans() if s.name == "run.attempt"]
    assert f"{attempt.context.trace_id:032x}" == run.trace_id != other


def test_a_message_sent_again_for_a_run_is_in_the_runs_trace_not_the_senders(published):
    # The sweeper re-sends a lost run, a pool release wakes a waiter: the message belongs to the
    # run's trace, so the worker's own lines for it (Celery's "succeeded") are in that trace too.
    run = run_claim(
        Work(biz_key="trace:resend", skill="harness.noop", source="api", triggered_by="tests", payload={}),
        now=timezone.now(),
    ).run
    published.clear()
    with tracing.span("sweep", new_trace=True):
        sweep_trace = tracing.current_trace_id()
        with transaction.atomic():
            run_dispatch_on_commit(run_ids=[run.id], now=timezone.now())

    [message] = published
    assert TRACEPARENT.match(message["headers"]["traceparent"]).group(1) == run.trace_id != sweep_trace


def test_text_lines_name_the_trace_and_run_and_json_lines_are_one_object_each():
    record = logging.LogRecord("harness.test", logging.INFO, __file__, 1, "hello %s", ("world",), None)
    with tracing.span("test", trace_id="0af7651916cd43dd8448eb211c80319c"):
        tracing.bind(run_id=7, biz_key="k:1", rule="r")
        assert ContextFilter().filter(record)
    config = logging_config(log_format="text", level="INFO")
    text = logging.Formatter(config["formatters"]["text"]["format"]).format(record)
    assert text.endswith("harness.test hello world [trace_id=0af7651916cd43dd8448eb211c80319c run_id=7]")

    line = JsonFormatter().format(record)
    assert "\n" not in line
    data = json.loads(line)
    assert (data["trace_id"], data["run_id"], data["biz_key"], data["rule"], data["attempt"]) == (
        "0af7651916cd43dd8448eb211c80319c",
        7,
        "k:1",
        "r",
        None,
    )
    plain = logging.LogRecord("harness.test", logging.INFO, __file__, 1, "outside", (), None)
    ContextFilter().filter(plain)
    assert logging.Formatter(config["formatters"]["text"]["format"]).format(plain).endswith("outside")


@pytest.mark.parametrize(
    ("environ", "enabled"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"}, False),
        ({"OTEL_SERVICE_NAME": "harness"}, False),  # naming the service alone exports nothing
    ],
)
def test_opentelemetry_export_is_on_only_when_the_standard_variables_ask(environ, enabled):
    assert tracing.otel_enabled(environ) is enabled


def _settings_process(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); import logging; logging.getLogger('x').warning('hi')"],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "harness_site.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_log_format_is_text_or_json_and_anything_else_fails_at_start_up():
    json_run = _settings_process(LOG_FORMAT="json")
    assert json_run.returncode == 0, json_run.stderr
    assert json.loads(json_run.stderr.strip().splitlines()[-1])["message"] == "hi"
    bad = _settings_process(LOG_FORMAT="xml")
    assert bad.returncode != 0 and "LOG_FORMAT='xml'" in bad.stderr


OTEL_SCRIPT = """
import django
django.setup()
from harness_site import tracing
assert tracing.otel_configure(django=True, celery=True)
from django.conf import settings
assert any("opentelemetry" in m for m in settings.MIDDLEWARE), settings.MIDDLEWARE
with tracing.span("trigger.test", new_trace=True):
    trace_id = tracing.current_trace_id()
from opentelemetry import trace
trace.get_tracer_provider().force_flush()
print("TRACE", trace_id)
"""


def test_with_otel_variables_set_spans_are_exported_and_django_and_celery_instrumented():
    done = subprocess.run(
        [sys.executable, "-c", OTEL_SCRIPT],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "harness_site.settings", "OTEL_TRACES_EXPORTER": "console"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    trace_id = done.stdout.split("TRACE ")[1].split()[0]
    exported = json.loads(done.stdout[: done.stdout.index("TRACE ")])
    assert exported["name"] == "trigger.test" and exported["context"]["trace_id"] == "0x" + trace_id


def test_each_file_a_sensor_scan_finds_starts_a_trace_of_its_own(tmp_path, spans):
    from tasks.triggers.sensors import sensor_scan

    rule = make_rule("ingest", kind="event", dedupe_key_template="{rule}:{object_id}:{version}")
    source = TriggerSource.objects.create(
        name="inbox", kind="file", identity="svc:drop", rule=rule, watch_dir=str(tmp_path), settle_seconds=0
    )
    now = timezone.now()
    for name in ("a.csv", "b.csv"):
        (tmp_path / name).write_bytes(b"x\n")
        old = (now - timedelta(minutes=1)).timestamp()
        os.utime(tmp_path / name, (old, old))

    with tracing.span("harness.sensors_scan"):  # the scan task's own trace, e.g. Celery's span
        scan_trace = tracing.current_trace_id()
        sensor_scan(source=source, now=now)

    runs = list(TaskRun.objects.all())
    assert len(runs) == 2
    assert len({r.trace_id for r in runs} | {scan_trace}) == 3
    roots = [s for s in spans.get_finished_spans() if s.name == "trigger.event"]
    assert len(roots) == 2 and all(s.parent is None for s in roots)
