"""An agent's base URL is compared with HARNESS_AGENT_URL_ALLOW only once it is plain: percent-encoding
decoded until it stops changing, no dot segments left, no `;` path parameters, backslashes, encoded
separators or characters a server might fold into them. A URL that sits under an allowed root only by
its raw text (`/v1/..;/exfil`, `/v1/%252e%252e/exfil`) is refused when the agent is saved and again at
call time, before the key is sent."""

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from django.core.exceptions import ValidationError

from tasks.agents.client import ModelCallError, build_messages, chat
from tasks.models import Agent
from tasks.secrets import Grant, agent_url_error
from tests.support.fake_model import FakeModelServer, completion

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ROOT = "https://api.example.com/v1"
KEY_ENV = "HARNESS_SECRET_TEST_URL_MODEL"

ODD = [
    "/v1/..;/exfil",  # Tomcat-style path parameter on a dot segment
    "/v1;x=1/exfil",
    "/v1/%3b/exfil",
    "/v1/%252e%252e/exfil",  # double-encoded ..
    "/v1/%25252e%25252e/exfil",  # triple-encoded ..
    "/v1/%2e%2e/exfil",
    "/v1/.%2E/exfil",
    "/v1/%2E/exfil",
    "/v1/../exfil",
    "/v1/./models",
    "/v1%2F..%2Fexfil",  # an encoded separator
    "/v1/%2fexfil",
    "/v1\\..\\exfil",  # a backslash some servers read as /
    "/v1/%5c..%5cexfil",
    "/v1/%255c..%255cexfil",
    "/v1/\uff0e\uff0e/exfil",  # full-width dots, folded to .. by NFKC-normalizing servers
    "/v1/%EF%BC%8E%EF%BC%8E/exfil",
    "/v1/%00/models",
    "/v1/%0d%0aX-Injected:%201",
    "/v1/a%20b",
    "/v1//exfil",
    "/v1/%ff",  # not UTF-8 once decoded
]
PLAIN = ["/v1", "/v1/", "/v1/deployments/gpt-4o", "/v1/openai/v1", "/v1/a-b_c~d"]


@pytest.fixture(autouse=True)
def allow(settings):
    settings.HARNESS_AGENT_URL_ALLOW = [ROOT, "http://127.0.0.1"]


@pytest.mark.parametrize("path", ODD)
def test_it_refuses_a_base_url_that_is_under_the_root_only_by_its_raw_text(path):
    assert agent_url_error("https://api.example.com" + path) is not None


@pytest.mark.parametrize("path", PLAIN)
def test_it_accepts_a_plain_url_under_the_root(path):
    assert agent_url_error("https://api.example.com" + path) is None


@pytest.mark.parametrize(
    "url",
    [
        "https://user@api.example.com/v1",
        "https://api.example.com/v1?x=1",
        "https://api.example.com/v1#/chat",
        "https://api.example.com%2eattacker.test/v1",
    ],
)
def test_it_refuses_userinfo_query_fragment_and_odd_hosts(url):
    assert agent_url_error(url) is not None


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/v1/..;/exfil", "/v1/%252e%252e/exfil", "/v1%2F..%2Fexfil"])
def test_the_agent_form_says_why_an_odd_url_is_refused(path):
    agent = Agent(
        name="a", provider="openai", model="m", base_url="https://api.example.com" + path, api_key_env=KEY_ENV
    )

    with pytest.raises(ValidationError) as info:
        agent.full_clean()

    message = " ".join(info.value.message_dict["base_url"])
    assert "plain URL" in message, message


def test_it_never_sends_the_key_to_an_odd_url_at_call_time(monkeypatch):
    """A row saved behind validation's back (an old row, a raw update) still cannot send the key."""
    server = FakeModelServer().start()
    try:
        monkeypatch.setenv(KEY_ENV, "sk-granted-value-0123456789abcdef")
        server.respond(completion("{}"))
        agent = SimpleNamespace(
            name="a",
            provider="openai",
            model="m",
            base_url=server.base_url + "/..;/exfil",
            api_key_env=KEY_ENV,
            system_prompt="",
            connect_timeout_seconds=2.0,
            read_timeout_seconds=5.0,
        )

        with pytest.raises(ModelCallError) as info:
            chat(agent, build_messages(agent, "hi"), now=NOW)

        assert "plain URL" in str(info.value)
        assert server.requests == []
    finally:
        server.stop()


def test_a_name_that_resolves_to_loopback_never_gets_the_key(monkeypatch, settings):
    """Allowed by name, yet resolving to this host at call time (DNS rebinding): refused before sending,
    since only the address written out (http://127.0.0.1) may reach loopback (tasks/outbound.py)."""
    server = FakeModelServer().start()
    try:
        monkeypatch.setenv(KEY_ENV, "sk-granted-value-0123456789abcdef")
        server.respond(completion("{}"))
        base_url = server.base_url.replace("127.0.0.1", "localhost")
        settings.HARNESS_AGENT_URL_ALLOW = ["http://localhost"]
        settings.HARNESS_SECRET_GRANTS = {
            **settings.HARNESS_SECRET_GRANTS,
            KEY_ENV: Grant("model", ("http://localhost",)),
        }
        agent = SimpleNamespace(
            name="a",
            provider="openai",
            model="m",
            base_url=base_url,
            api_key_env=KEY_ENV,
            system_prompt="",
            connect_timeout_seconds=2.0,
            read_timeout_seconds=5.0,
        )

        with pytest.raises(ModelCallError) as info:
            chat(agent, build_messages(agent, "hi"), now=NOW)

        assert info.value.kind == "invalid_param"
        assert "refused" in str(info.value) and "loopback" in str(info.value)
        assert server.requests == []
    finally:
        server.stop()
