# ruff: noqa: F811  (pytest fixtures imported from tests.support.desk are redefined as arguments)
"""Secrets are granted by the deployment, never named by an operator.

An agent may only name a variable the deployment declared a secret (HARNESS_SECRET_* or
HARNESS_SECRETS) and may only send it to a base URL the deployment allows (HARNESS_AGENT_URL_ALLOW).
Both are checked when the agent is saved (model, admin form, import file) and again at call time,
against a real HTTP server on loopback that would receive the Bearer token."""

import json
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from tasks.agents.client import ModelCallError, build_messages, chat
from tasks.models import Agent
from tasks.secrets import Grant, agent_url_error
from tasks.services import RuleImportError, rule_import
from tests.support.desk import operator, operator_client  # noqa: F401
from tests.support.fake_model import FakeModelServer, completion
from tests.support.processes import child_env
from tests.support.startup import start_ups

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRANTED = "HARNESS_SECRET_TEST_MODEL"
SITE_VALUE = "the-site-secret-key-that-must-never-leave-0123456789"


@pytest.fixture
def server():
    s = FakeModelServer().start()
    yield s
    s.stop()


def _http_agent(server, **over):
    data = dict(
        name="a",
        provider="openai",
        model="m",
        base_url=server.base_url,
        api_key_env=GRANTED,
        system_prompt="",
        connect_timeout_seconds=2.0,
        read_timeout_seconds=5.0,
    )
    data.update(over)
    return SimpleNamespace(**data)


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["SECRET_KEY", "DATABASE_URL", "HOME", "CELERY_BROKER_URL", "HARNESS_SECRET_"])
def test_it_refuses_an_agent_naming_a_variable_that_was_not_granted(name):
    with pytest.raises(ValidationError) as info:
        Agent(name="a", provider="openai", model="m", base_url="http://127.0.0.1:9/v1", api_key_env=name).full_clean()

    assert "not granted" in " ".join(info.value.message_dict["api_key_env"]).lower()


@pytest.mark.django_db
def test_it_accepts_a_granted_variable_and_one_listed_in_harness_secrets(settings):
    settings.HARNESS_SECRETS = ["OPENAI_API_KEY"]
    settings.HARNESS_SECRET_GRANTS = {
        **settings.HARNESS_SECRET_GRANTS,
        "OPENAI_API_KEY": Grant("model", ("http://127.0.0.1",)),
    }
    for name in (GRANTED, "OPENAI_API_KEY"):
        Agent(name="a", provider="openai", model="m", base_url="http://127.0.0.1:9/v1", api_key_env=name).full_clean()


@pytest.mark.django_db
def test_it_refuses_a_base_url_the_deployment_does_not_allow(settings):
    settings.HARNESS_AGENT_URL_ALLOW = ["https://api.example.com/v1"]

    with pytest.raises(ValidationError) as info:
        Agent(
            name="a", provider="openai", model="m", base_url="https://attacker.example/v1", api_key_env=GRANTED
        ).full_clean()

    assert "HARNESS_AGENT_URL_ALLOW" in " ".join(info.value.message_dict["base_url"])


@pytest.mark.parametrize(
    ("allow", "url", "ok"),
    [
        (["https://api.example.com/v1"], "https://api.example.com/v1", True),
        (["https://api.example.com/v1"], "https://api.example.com/v1/", True),
        (["https://api.example.com/v1"], "https://API.example.com/v1/deployments/x", True),
        (["https://api.example.com/v1"], "https://api.example.com/v10", False),
        (["https://api.example.com/v1"], "https://api.example.com", False),
        (["https://api.example.com"], "https://api.example.com.attacker.test/v1", False),
        (["https://api.example.com"], "https://attacker.test/api.example.com", False),
        (["https://api.example.com"], "http://api.example.com/v1", False),
        (["https://api.example.com"], "https://api.example.com:8443/v1", True),
        (["https://api.example.com:443"], "https://api.example.com/v1", True),
        (["https://api.example.com:443"], "https://api.example.com:8443/v1", False),
        (["https://api.example.com:8443"], "https://api.example.com:8443/v1", True),
        (["http://127.0.0.1"], "http://127.0.0.1:51234/v1", True),
        (["http://127.0.0.1"], "http://127.0.0.1.nip.io:51234/v1", False),
        (["https://api.example.com/v1"], "https://api.example.com/v1/../../other", False),
        ([], "https://api.example.com/v1", False),
    ],
)
def test_it_matches_base_urls_by_scheme_host_port_and_path_segments(settings, allow, url, ok):
    settings.HARNESS_AGENT_URL_ALLOW = allow
    assert (agent_url_error(url) is None) == ok


def test_it_never_sends_an_ungranted_variable_at_call_time(server, monkeypatch):
    """An agent row saved behind validation's back (an old row, a raw update) still cannot send SECRET_KEY."""
    monkeypatch.setenv("SECRET_KEY", SITE_VALUE)
    server.respond(completion("{}"))
    agent = _http_agent(server, api_key_env="SECRET_KEY")

    with pytest.raises(ModelCallError) as info:
        chat(agent, build_messages(agent, "hi"), now=NOW)

    assert "not granted" in str(info.value) and SITE_VALUE not in str(info.value)
    assert server.requests == []


def test_it_never_sends_a_granted_key_to_a_url_the_deployment_does_not_allow(server, monkeypatch, settings):
    monkeypatch.setenv(GRANTED, "sk-granted-value-0123456789abcdef")
    settings.HARNESS_AGENT_URL_ALLOW = ["https://api.example.com/v1"]
    server.respond(completion("{}"))
    agent = _http_agent(server)

    with pytest.raises(ModelCallError) as info:
        chat(agent, build_messages(agent, "hi"), now=NOW)

    assert "HARNESS_AGENT_URL_ALLOW" in str(info.value)
    assert server.requests == []


def test_it_sends_a_granted_key_to_an_allowed_url(server, monkeypatch):
    monkeypatch.setenv(GRANTED, "sk-granted-value-0123456789abcdef")
    server.respond(completion("{}"))
    agent = _http_agent(server)

    chat(agent, build_messages(agent, "hi"), now=NOW)

    assert server.requests[0]["headers"]["Authorization"] == "Bearer sk-granted-value-0123456789abcdef"


@pytest.mark.django_db
def test_it_refuses_an_ungranted_variable_on_the_admin_form_as_an_operator(operator_client):
    data = {
        "name": "thief",
        "provider": "openai",
        "base_url": "http://127.0.0.1:9/v1",
        "model": "m",
        "api_key_env": "SECRET_KEY",
        "system_prompt": "",
        "allowed_tools": "[]",
        "connect_timeout_seconds": "5",
        "read_timeout_seconds": "60",
    }

    response = operator_client.post(reverse("admin:tasks_agent_add"), data)

    assert response.status_code == 200 and "not granted" in response.content.decode().lower()
    assert not Agent.objects.exists()


@pytest.mark.django_db
def test_it_shows_key_set_only_for_granted_variables(admin_client, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", SITE_VALUE)
    monkeypatch.setenv(GRANTED, "sk-granted-value-0123456789abcdef")
    # Rows saved before this deployment granted secrets (create() skips validation).
    Agent.objects.create(
        name="old", provider="openai", model="m", base_url="http://127.0.0.1:9/v1", api_key_env="SECRET_KEY"
    )
    Agent.objects.create(
        name="new", provider="openai", model="m", base_url="http://127.0.0.1:9/v1", api_key_env=GRANTED
    )

    html = admin_client.get(reverse("admin:tasks_agent_changelist")).content.decode()

    assert '<td class="field-key_state">set</td>' in html and "not granted" in html.lower()


@pytest.mark.django_db
def test_it_rejects_an_import_file_naming_an_ungranted_variable():
    doc = {
        "agents": [
            {
                "name": "thief",
                "provider": "openai",
                "model": "m",
                "base_url": "http://127.0.0.1:9/v1",
                "api_key_env": "DATABASE_URL",
            }
        ],
        "rules": [],
    }

    with pytest.raises(RuleImportError) as info:
        rule_import(json.dumps(doc))

    assert info.value.errors[0].lower().startswith("agent 'thief' field api_key_env: not granted")
    assert not Agent.objects.exists()


MALFORMED_ALLOW = ["ftp://files.example.com", "api.example.com", "https://user:pw@api.example.com", "https://"]


@pytest.fixture(scope="module")
def start_up_outcomes():
    cases = {value: {"HARNESS_AGENT_URL_ALLOW": value} for value in MALFORMED_ALLOW}
    return start_ups({**cases, "prefix": {"HARNESS_SECRET_PREFIX": "SECRET_"}}, env=child_env())


@pytest.mark.parametrize("value", MALFORMED_ALLOW)
def test_it_refuses_a_malformed_url_allow_list_at_start_up(start_up_outcomes, value):
    done = start_up_outcomes[value]
    assert done.returncode != 0 and "HARNESS_AGENT_URL_ALLOW" in done.stderr


def test_the_sites_own_keys_are_never_granted_whatever_the_prefix(settings):
    settings.HARNESS_SECRET_PREFIX = "SECRET_"  # a deployment's prefix that would cover SECRET_KEY
    settings.HARNESS_SECRETS = ["DATABASE_URL"]
    from tasks.secrets import secret_name_error, secret_value

    assert "not granted, ever" in secret_name_error("SECRET_KEY")
    assert "not granted, ever" in secret_name_error("DATABASE_URL")
    assert secret_value("SECRET_KEY", "model") is None
    assert secret_name_error("SECRET_OPENAI") is None


def test_a_prefix_covering_the_sites_own_keys_stops_the_start_up(start_up_outcomes):
    done = start_up_outcomes["prefix"]
    assert done.returncode != 0 and "may not cover the site's own keys" in done.stderr
