"""Every place a secret could surface, searched for every form of it.

A careless provider echoes the agent's key back, raw and in every common escaping (JSON \\u and \\/,
a JSON string inside JSON, repr, URL-encoded, HTML entities, base64 alone and inside a Basic value,
hex): in a completion that the run then stores, in garbage that fails validation, in error bodies
until the run fails for good (dead-letter ticket, alerts to Slack, Feishu, DingTalk, generic webhook,
email and log channels). Then we search, for the raw and every escaped form:
  * every column of every row of every model (django.apps) and every table (raw SQL),
  * every log line of the process, tracebacks included,
  * every admin page (changelists, change, history and the desk's own views) as a superuser, an
    Operator, an On-call and a Viewer,
  * every alert body the loopback receiver got and every mail sent.
"""

import json
import logging
from datetime import UTC, datetime, timedelta

import pytest
from django.apps import apps
from django.contrib import admin
from django.core.exceptions import FieldDoesNotExist
from django.db import connection
from django.urls import NoReverseMatch, reverse

from deadletters.alert_queue import alert_deliver_due
from deadletters.models import Alert, AlertChannel, DeadLetter
from runs.engine.claims import Work, run_claim
from runs.engine.executor import run_execute
from runs.models import ExternalCall, RunStep, TaskRun
from tasks.models import Agent, TriggerRule
from tasks.rules import keys
from tests.support.desk import client_for, make_user
from tests.support.fake_model import FakeModelServer, Reply, completion
from tests.support.rules import make_rule
from tests.support.runs import run_policy
from tests.support.secret_forms import forms, found

pytestmark = pytest.mark.django_db(transaction=True)

KEY_ENV = "HARNESS_SECRET_SURFACE_MODEL"
# The characters escapers change (/ + =), so that each escaped form differs from the raw one.
KEY = "sk-proj/Zq81+mXc0=VbN2lKj7HgF5dS3aP9oI"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SCHEMA = {"type": "object", "required": ["summary"]}
# Every form at once, as a provider's debug echo would print them; inside a JSON string (a completion's
# content) only the forms that are valid there (\x is not a JSON escape).
ECHO = " ".join(f"{name}={{key:{name}}}" for name in forms(KEY))
ECHO_IN_JSON = " ".join(f"{name}={{key:{name}}}" for name in forms(KEY) if name != "repr_x")


@pytest.fixture
def server():
    s = FakeModelServer().start()
    yield s
    s.stop()


def _claim(rule: TriggerRule, biz_key: str, *, action: str = "harness.record", max_attempts: int = 1) -> TaskRun:
    payload = {
        "params": {"prompt": "Summarise {topic}.", "topic": "today", "action": action},
        "output_schema": SCHEMA,
    }
    return run_claim(
        Work(
            biz_key=keys.scoped(rule.pk, keys.MANUAL_KEY, biz_key),
            skill="llm_json",
            source="scheduler",
            triggered_by="tests",
            payload=payload,
            policy=run_policy({"max_attempts": max_attempts, "lease_ttl_seconds": 60}, agent=rule.agent.name),
            rule=rule,
        ),
        now=T0,
        dispatch=False,
    ).run


def _execute(run: TaskRun, at: datetime) -> TaskRun:
    run_execute(run_id=run.id, worker="w1", clock=lambda: at, rand=lambda: 0.5)
    return TaskRun.objects.get(id=run.id)


def _every_model_row() -> dict[str, str]:
    """Every concrete field of every row of every model, as text, by model."""
    out = {}
    for model in apps.get_models(include_auto_created=True):
        names = [f.attname for f in model._meta.concrete_fields]
        out[model._meta.label] = "\n".join(repr(row) for row in model._base_manager.values_list(*names))
    return out


def _every_table() -> dict[str, str]:
    """Every table as the database holds it (what a backup or a curious DBA would see)."""
    out = {}
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            out[table] = "\n".join(repr(row) for row in cursor.fetchall())
    return out


def _admin_urls() -> list[str]:
    """Every admin page: index, each registered model's own URLs (changelist, add, change, history,
    delete confirmation and the desk's extra views), for up to five objects of each model."""
    urls = [reverse("admin:index"), reverse("harness-dashboard")]
    for model, model_admin in admin.site._registry.items():
        objects = list(model._base_manager.order_by("-pk").values_list("pk", flat=True)[:5])
        for pattern in model_admin.get_urls():
            name = getattr(pattern, "name", None)
            if not name:
                continue
            route = str(pattern.pattern)
            if "<path:object_id>" in route:
                for pk in objects:
                    try:
                        urls.append(reverse(f"admin:{name}", args=[pk]))
                    except NoReverseMatch:
                        pass
            else:
                try:
                    urls.append(reverse(f"admin:{name}"))
                except NoReverseMatch:
                    pass
    return sorted(set(urls))


def test_no_form_of_the_key_surfaces_anywhere(server, receiver, monkeypatch, caplog, mailoutbox, settings):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(KEY_ENV, KEY)
    settings.ADMINS = [("On call", "oncall@example.com")]
    AlertChannel.objects.all().delete()
    for fmt in ("slack", "feishu", "dingtalk", "generic"):
        AlertChannel.objects.create(name=fmt, kind="webhook", url=receiver.url, format=fmt, min_severity="notice")
    AlertChannel.objects.create(name="mail", kind="email", recipients="oncall@example.com", min_severity="notice")
    AlertChannel.objects.create(name="log", kind="log", min_severity="notice")
    agent = Agent.objects.create(
        name="writer", provider="openai", base_url=server.base_url, model="gpt-test", api_key_env=KEY_ENV,
        store_prompts=True, connect_timeout_seconds=2.0, read_timeout_seconds=5.0,
    )  # fmt: skip
    rule = make_rule("summaries", skill="llm_json", agent=agent, output_schema=SCHEMA)
    summary = json.dumps({"summary": f"echo {ECHO_IN_JSON}"})

    # 1. A success whose stored result, checkpoint and action record carry the echo.
    server.respond(completion(summary))
    ok = _execute(_claim(rule, "s:ok"), T0)
    # 2. The same, held for approval: the proposal's arguments carry it.
    waiting = _execute(_claim(rule, "s:approval", action="harness.record_guarded"), T0)
    # 3. Garbage (not JSON), then a 500, then a 401: retried, then failed for good with a ticket.
    server.respond(
        completion(f"not json: {ECHO_IN_JSON}"),
        Reply(500, '{"error": {"message": "' + ECHO + '"}}'),
        Reply(401, '{"error": "invalid key ' + ECHO + '"}'),
    )
    failing = _claim(rule, "s:fail", max_attempts=3)
    at = T0
    for _ in range(3):
        failing = _execute(failing, at)
        at = (failing.run_after or at) + timedelta(seconds=1)
    alert_deliver_due(now=at + timedelta(minutes=10))

    # The key really went out and really came back in every form: the searches below can fail.
    assert [ok.state, waiting.state, failing.state] == ["succeeded", "awaiting_approval", "failed"]
    assert all(r["headers"]["Authorization"] == f"Bearer {KEY}" for r in server.requests)
    assert len(server.requests) == 5 and ExternalCall.objects.count() == 5
    ticket = DeadLetter.objects.get(run=failing)
    assert "[redacted]" in ticket.last_error and RunStep.objects.filter(run=ok).exists()
    assert Alert.objects.filter(state="sent").exists() and receiver.requests and mailoutbox

    leaks: dict[str, list[str]] = {}

    def search(where: str, text: str) -> None:
        if hit := found(text, KEY):
            leaks[where] = hit

    for label, text in _every_model_row().items():
        search(f"model {label}", text)
    for table, text in _every_table().items():
        search(f"table {table}", text)
    search("logs", caplog.text + "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records))
    for i, body in enumerate(receiver.requests):
        search(f"alert body #{i} ({body.get('msgtype') or body.get('msg_type') or 'slack/generic'})", json.dumps(body))
    for i, mail in enumerate(mailoutbox):
        search(f"mail #{i}", f"{mail.subject}\n{mail.body}")

    # Every page as a superuser (editable forms: every field as an input) and as a viewer (the same
    # objects read-only: every field rendered as text, a different code path). The operator and
    # on-call roles see a subset of the superuser's pages in one of these two renderings.
    roles = {
        "superuser": make_user("root", superuser=True),
        "viewer": make_user("vera", "Viewers"),
    }
    urls = _admin_urls()
    assert reverse("admin:deadletters_deadletter_change", args=[ticket.pk]) in urls
    seen_ok = 0
    for role, user in roles.items():
        client = client_for(user)
        for url in urls:
            response = client.get(url)
            assert response.status_code < 500, (role, url)
            seen_ok += response.status_code == 200
            search(f"admin {url} as {role}", response.content.decode(errors="replace"))
    assert seen_ok > len(urls)  # pages were really rendered, not all refused

    assert not leaks, "a form of the key surfaced:\n" + "\n".join(f"{w}: {f}" for w, f in sorted(leaks.items()))


def test_the_search_finds_what_it_looks_for():
    """The search itself can fail: each form is found in text that holds it."""
    for name, value in forms(KEY).items():
        assert name in found(f"x {value} y", KEY)
    with pytest.raises(FieldDoesNotExist):
        Agent._meta.get_field("api_key")  # the key is never a column
