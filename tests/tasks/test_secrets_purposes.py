# ruff: noqa: F811  (pytest fixtures imported from tests.support.desk are redefined as arguments)
"""A granted secret serves only the purpose the deployment declared for it in HARNESS_GRANTS: a model
key (sent only under the URL roots declared with it), a webhook signing secret, or an alert channel's.
Each misuse is refused where it would be made (the agent and source models, so the admin forms and the
import file) and again where the secret would be read (the model call, the webhook intake), so a row
saved behind validation's back cannot send the webhook signing secret to a model provider."""

import json
import time
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from runs.models import TaskRun
from tasks.agents.client import ModelCallError, build_messages, chat
from tasks.models import Agent, TriggerRule, TriggerSource
from tasks.rules import events, signatures
from tasks.secrets import Grant, grant_name_error, grants_parse
from tasks.services import RuleImportError, rule_import
from tests.support.desk import operator, operator_client  # noqa: F401
from tests.support.fake_model import FakeModelServer, completion

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MODEL_KEY = "HARNESS_SECRET_PURPOSE_MODEL"
HOOK_SECRET = "HARNESS_SECRET_PURPOSE_HOOK"
ALERT_SECRET = "HARNESS_SECRET_PURPOSE_ALERT"
UNDECLARED = "HARNESS_SECRET_PURPOSE_NONE"
HOOK_VALUE = "whsec-purpose-hook-0123456789abcdefghijklmnopqrstuv"
MODEL_VALUE = "sk-purpose-model-0123456789abcdefghijklmnopqrstuvwx"


@pytest.fixture(autouse=True)
def grants(settings, monkeypatch):
    settings.HARNESS_AGENT_URL_ALLOW = ["http://127.0.0.1", "https://x.example/v1", "https://other.example/v1"]
    settings.HARNESS_SECRET_GRANTS = {
        MODEL_KEY: Grant("model", ("http://127.0.0.1", "https://x.example/v1")),
        HOOK_SECRET: Grant("webhook"),
        ALERT_SECRET: Grant("alert"),
    }
    for name, value in [(MODEL_KEY, MODEL_VALUE), (HOOK_SECRET, HOOK_VALUE), (ALERT_SECRET, "alert-0123456789abcdef")]:
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(UNDECLARED, "undeclared-0123456789abcdefghij")


@pytest.fixture
def server():
    s = FakeModelServer().start()
    yield s
    s.stop()


def agent_row(key: str, base_url: str = "https://x.example/v1") -> Agent:
    return Agent(name="a", provider="openai", model="m", base_url=base_url, api_key_env=key)


def key_errors(agent: Agent) -> str:
    with pytest.raises(ValidationError) as info:
        agent.full_clean()
    return " ".join(info.value.message_dict.get("api_key_env", []))


# --- agents: the model side ----------------------------------------------------------------------


@pytest.mark.django_db
def test_an_agent_may_use_a_model_key_under_its_declared_root():
    agent_row(MODEL_KEY).full_clean()
    agent_row(MODEL_KEY, "http://127.0.0.1:8080/v1").full_clean()


@pytest.mark.django_db
@pytest.mark.parametrize(("key", "words"), [(HOOK_SECRET, "webhook signing"), (ALERT_SECRET, "alert channels")])
def test_an_agent_may_not_use_a_secret_declared_for_another_purpose(key, words):
    message = key_errors(agent_row(key))

    assert "Not for this use" in message and words in message, message


@pytest.mark.django_db
def test_an_agent_may_not_use_an_undeclared_secret():
    message = key_errors(agent_row(UNDECLARED))

    assert "Not declared" in message and "HARNESS_GRANTS" in message, message


@pytest.mark.django_db
def test_an_agent_may_not_send_a_model_key_to_an_allowed_url_it_was_not_declared_for():
    # other.example is an allowed provider, but this key was declared for x.example and loopback only.
    message = key_errors(agent_row(MODEL_KEY, "https://other.example/v1"))

    assert "Not for this URL" in message, message


@pytest.mark.django_db
def test_the_admin_form_refuses_the_webhook_secret_as_an_agent_key(operator_client):
    data = {
        "name": "thief",
        "provider": "openai",
        "base_url": "https://x.example/v1",
        "model": "m",
        "api_key_env": HOOK_SECRET,
        "system_prompt": "",
        "allowed_tools": "[]",
        "connect_timeout_seconds": "5",
        "read_timeout_seconds": "60",
    }

    response = operator_client.post(reverse("admin:tasks_agent_add"), data)

    assert response.status_code == 200 and "Not for this use" in response.content.decode()
    assert not Agent.objects.exists()


@pytest.mark.django_db
def test_an_import_file_may_not_point_an_agent_at_the_webhook_secret():
    doc = {
        "agents": [
            {
                "name": "thief",
                "provider": "openai",
                "model": "m",
                "base_url": "https://x.example/v1",
                "api_key_env": HOOK_SECRET,
            }
        ],
        "rules": [],
    }

    with pytest.raises(RuleImportError) as info:
        rule_import(json.dumps(doc))

    assert "not for this use" in " ".join(info.value.errors).lower()
    assert not Agent.objects.exists()


@pytest.mark.parametrize(
    ("key", "base", "words"),
    [(HOOK_SECRET, "", "for webhook"), (UNDECLARED, "", "not declared"), (MODEL_KEY, "other", "model calls to")],
)
def test_a_model_call_never_sends_a_secret_outside_its_purpose(server, settings, key, base, words):
    """A row saved behind validation's back: the call is refused and the provider receives nothing."""
    server.respond(completion("{}"))
    base_url = server.base_url
    if base == "other":
        settings.HARNESS_AGENT_URL_ALLOW = [*settings.HARNESS_AGENT_URL_ALLOW, base_url]
        settings.HARNESS_SECRET_GRANTS = {
            **settings.HARNESS_SECRET_GRANTS,
            MODEL_KEY: Grant("model", ("https://x.example/v1",)),
        }
    agent = SimpleNamespace(
        name="a",
        provider="openai",
        model="m",
        base_url=base_url,
        api_key_env=key,
        system_prompt="",
        connect_timeout_seconds=2.0,
        read_timeout_seconds=5.0,
    )

    with pytest.raises(ModelCallError) as info:
        chat(agent, build_messages(agent, "hi"), now=NOW)

    assert words in str(info.value) and HOOK_VALUE not in str(info.value)
    assert server.requests == []


def test_a_model_call_sends_a_model_key_under_its_root(server):
    server.respond(completion("{}"))
    agent = SimpleNamespace(
        name="a",
        provider="openai",
        model="m",
        base_url=server.base_url,
        api_key_env=MODEL_KEY,
        system_prompt="",
        connect_timeout_seconds=2.0,
        read_timeout_seconds=5.0,
    )

    chat(agent, build_messages(agent, "hi"), now=NOW)

    assert server.requests[0]["headers"]["Authorization"] == f"Bearer {MODEL_VALUE}"


@pytest.mark.django_db
def test_the_agent_list_says_a_key_is_not_declared(admin_client):
    Agent.objects.create(
        name="hooked", provider="openai", model="m", base_url="https://x.example/v1", api_key_env=HOOK_SECRET
    )

    html = admin_client.get(reverse("admin:tasks_agent_changelist")).content.decode()

    assert "not declared a model key" in html


# --- webhook sources: the signing side -------------------------------------------------------------


def _rule() -> TriggerRule:
    return TriggerRule.objects.create(
        name="purpose-hook",
        reason="test",
        kind="event",
        timezone="UTC",
        dedupe_key_template="{rule}:{object_id}:{action}:{version}",
        skill="harness.noop",
    )


@pytest.mark.django_db
@pytest.mark.parametrize(("key", "words"), [(MODEL_KEY, "Not for this use"), (UNDECLARED, "Not declared")])
def test_a_webhook_source_may_not_sign_with_a_secret_not_declared_for_webhooks(key, words):
    source = TriggerSource(name="billing", kind="webhook", identity="svc:billing", rule=_rule(), secret_env=key)

    with pytest.raises(ValidationError) as info:
        source.full_clean()

    assert words in " ".join(info.value.message_dict["secret_env"])


@pytest.mark.django_db
def test_a_webhook_source_may_sign_with_a_webhook_secret():
    TriggerSource(
        name="billing", kind="webhook", identity="svc:billing", rule=_rule(), secret_env=HOOK_SECRET
    ).full_clean()


@pytest.mark.django_db
def test_a_webhook_signed_with_a_model_key_is_not_accepted(client):
    """A source saved behind validation's back with the model key as its HMAC secret: whoever holds the
    model key could otherwise sign events. The intake answers 503 and creates no run."""
    TriggerSource.objects.create(
        name="billing", kind="webhook", identity="svc:billing", rule=_rule(), secret_env=MODEL_KEY
    )
    raw = json.dumps({"object_id": "o1", "action": "paid", "version": 1}).encode()
    ts = str(int(time.time()))
    signature = signatures.sign(signatures.HARNESS, MODEL_VALUE.encode(), timestamp=ts, delivery_id="d1", body=raw)

    response = client.post(
        "/hooks/billing/",
        data=raw,
        content_type="application/json",
        headers={events.HEADER_TIMESTAMP: ts, events.HEADER_DELIVERY: "d1", events.HEADER_SIGNATURE: signature},
    )

    assert response.status_code == 503
    assert not TaskRun.objects.exists()
    assert TriggerSource.objects.get().secret_states() == [(MODEL_KEY, "not_declared")]


# --- the declaration itself ------------------------------------------------------------------------


def _parse(*entries: str):
    return grants_parse(
        entries,
        name_error=lambda n: grant_name_error(
            n, prefix="HARNESS_SECRET_", listed=["OPENAI_API_KEY"], never={"SECRET_KEY"}
        ),
    )


def test_the_declaration_reads_model_roots_and_purposes():
    grants, problems = _parse(
        "HARNESS_SECRET_A=model@https://api.openai.com/v1",
        "HARNESS_SECRET_A=model@http://127.0.0.1:11434/v1",
        "OPENAI_API_KEY=model@https://api.openai.com/v1",
        "HARNESS_SECRET_HOOK=webhook",
        "HARNESS_SECRET_PAGE=alert",
    )

    assert problems == []
    assert grants["HARNESS_SECRET_A"] == Grant("model", ("https://api.openai.com/v1", "http://127.0.0.1:11434/v1"))
    assert grants["HARNESS_SECRET_HOOK"] == Grant("webhook") and grants["HARNESS_SECRET_PAGE"] == Grant("alert")


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("HARNESS_SECRET_A", "is not NAME=model@URL"),
        ("HARNESS_SECRET_A=signing", "is not NAME=model@URL"),
        ("SECRET_KEY=model@https://api.openai.com/v1", "not granted, ever"),
        ("HOME=webhook", "not granted"),
        ("HARNESS_SECRET_A=model", "names the URL root"),
        ("HARNESS_SECRET_A=webhook@https://x.example", "only a model key takes a URL"),
        ("HARNESS_SECRET_A=model@https://x.example/v1/..;/x", "not a plain URL"),
    ],
)
def test_a_bad_declaration_entry_is_refused(entry, words):
    _grants, problems = _parse(entry)

    assert len(problems) == 1 and words in problems[0], problems


def test_one_secret_has_one_purpose():
    _grants, problems = _parse("HARNESS_SECRET_A=webhook", "HARNESS_SECRET_A=model@https://x.example/v1")

    assert len(problems) == 1 and "one purpose per secret" in problems[0]
