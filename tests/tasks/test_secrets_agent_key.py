"""An agent's API key never leaves the worker's environment: not into the database, the logs,
the recorded calls, a dead-letter ticket or an admin page. Every place is searched for it."""

import logging

import pytest
from django.db import connection
from django.urls import reverse

from deadletters.models import DeadLetter
from runs.engine.claims import Work, run_claim
from runs.engine.executor import run_execute
from runs.models import ActionProposal, ExternalCall, TaskRun
from tasks.models import Agent
from tests.support.fake_model import FakeModelServer, Reply, completion, json_completion
from tests.support.rules import make_rule
from tests.support.runs import run_policy

pytestmark = pytest.mark.django_db(transaction=True)

KEY_ENV = "HARNESS_SECRET_H9_MODEL_KEY"
KEY = "sk-proj-Zq81mXc0VbN2lKj7HgF5dS3aP9oI"
SCHEMA = {"type": "object", "required": ["summary"]}


@pytest.fixture
def server():
    s = FakeModelServer().start()
    yield s
    s.stop()


def _run(agent: Agent, biz_key: str, *, action: str = "harness.record", max_attempts: int = 1) -> TaskRun:
    from django.utils import timezone

    payload = {
        "params": {"prompt": "Summarise {topic}.", "topic": "today", "action": action},
        "output_schema": SCHEMA,
    }
    run = run_claim(
        Work(
            biz_key=biz_key,
            skill="llm_json",
            source="api",
            triggered_by="tests",
            payload=payload,
            policy=run_policy({"max_attempts": max_attempts, "lease_ttl_seconds": 60}, agent=agent.name),
        ),
        now=timezone.now(),
    ).run
    run_execute(run_id=run.id, worker="w1", clock=timezone.now)
    return TaskRun.objects.get(id=run.id)


def _every_table_as_text() -> str:
    """Every row of every table, as text: whatever a backup or a curious DBA would see."""
    chunks = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            chunks.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(chunks)


def test_it_never_stores_logs_or_shows_the_api_key(server, monkeypatch, caplog, admin_client):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(KEY_ENV, KEY)
    agent = Agent.objects.create(
        name="writer",
        provider="openai",
        base_url=server.base_url,
        model="gpt-test",
        api_key_env=KEY_ENV,
        store_prompts=True,
    )
    make_rule("summaries", skill="llm_json", agent=agent, output_schema=SCHEMA)

    server.respond(json_completion({"summary": "ok"}))
    ok = _run(agent, "s:ok")
    # A provider that echoes the Authorization header back in its error body.
    server.respond(Reply(401, '{"error": "invalid key: {authorization}"}'))
    denied = _run(agent, "s:denied")
    server.respond(completion("not json, but here is the header: {authorization}"))
    garbage = _run(agent, "s:garbage")
    server.respond(json_completion({"summary": "ok"}))
    waiting = _run(agent, "s:approval", action="harness.record_guarded")

    assert [ok.state, denied.state, garbage.state, waiting.state] == [
        "succeeded",
        "failed",
        "failed",
        "awaiting_approval",
    ]
    # The key really went over the wire, and the provider really sent it back: the checks below can fail.
    assert all(r["headers"]["Authorization"] == f"Bearer {KEY}" for r in server.requests)
    assert DeadLetter.objects.count() == 2 and ExternalCall.objects.count() == 4

    assert KEY not in _every_table_as_text()
    for call in ExternalCall.objects.all():
        assert KEY not in repr(vars(call))
    for ticket in DeadLetter.objects.all():
        assert KEY not in repr(vars(ticket))
    assert "[redacted]" in DeadLetter.objects.get(run=denied).last_error

    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert "llm_json" in logged or "writer" in logged  # logs were captured at all
    assert KEY not in logged

    pages = [
        reverse("admin:tasks_agent_changelist"),
        reverse("admin:tasks_agent_change", args=[agent.id]),
        reverse("admin:tasks_triggerrule_changelist"),
        reverse("admin:runs_taskrun_changelist"),
        *(reverse("admin:runs_taskrun_change", args=[r.id]) for r in (ok, denied, garbage, waiting)),
        reverse("admin:runs_externalcall_changelist"),
        *(reverse("admin:runs_externalcall_change", args=[c.id]) for c in ExternalCall.objects.all()),
        reverse("admin:deadletters_deadletter_changelist"),
        *(reverse("admin:deadletters_deadletter_change", args=[t.id]) for t in DeadLetter.objects.all()),
        reverse("admin:runs_actionproposal_changelist"),
        reverse("admin:runs_actionproposal_change", args=[ActionProposal.objects.get().id]),
    ]
    for url in pages:
        response = admin_client.get(url)
        assert response.status_code == 200, url
        assert KEY not in response.content.decode(), url
    assert KEY_ENV in admin_client.get(reverse("admin:tasks_agent_changelist")).content.decode()


def test_it_does_not_render_a_key_pasted_as_the_variable_name_back(admin_client):
    pasted = "sk-" + "A" * 90
    data = {
        "name": "pasted",
        "provider": "openai",
        "base_url": "http://127.0.0.1:9/v1",
        "model": "m",
        "api_key_env": pasted,
        "system_prompt": "",
        "allowed_tools": "[]",
        "connect_timeout_seconds": "5",
        "read_timeout_seconds": "60",
    }

    for value in (pasted, "SK" + "Q" * 40 + "abc", "OPENAI-KEY"):
        response = admin_client.post(reverse("admin:tasks_agent_add"), {**data, "api_key_env": value})
        html = response.content.decode()
        assert response.status_code == 200 and "errorlist" in html, value
        assert value not in html
    assert not Agent.objects.exists()
