"""The model client against a real HTTP server on loopback that speaks chat completions.

Each failure a provider can produce maps to one error kind; Retry-After travels on the exception;
usage is read from the response. No database: chat() is the HTTP edge only.
"""

import json
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from types import SimpleNamespace

import pytest

from tasks.agents.client import (
    ModelCallError,
    build_messages,
    chat,
    http_client,
    input_sha256,
    kind_for_status,
    parse_retry_after,
)
from tasks.skills.sdk import ErrorKind
from tests.support.fake_model import FakeModelServer, Reply, completion
from tests.support.secret_forms import forms, found

KEY_ENV = "HARNESS_SECRET_H9_TEST_MODEL"
KEY = "sk-test-4c1b2e9f0d7a6b5c3e8f"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def server():
    s = FakeModelServer().start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


def agent(server: FakeModelServer, **over) -> SimpleNamespace:
    data = dict(
        name="writer",
        provider="openai",
        base_url=server.base_url,
        model="gpt-test",
        api_key_env=KEY_ENV,
        system_prompt="Answer in JSON.",
        connect_timeout_seconds=2.0,
        read_timeout_seconds=5.0,
    )
    data.update(over)
    return SimpleNamespace(**data)


def call(server, **over):
    a = agent(server, **over)
    return chat(a, build_messages(a, "say hi"), now=NOW)


def failure(server, **over) -> ModelCallError:
    with pytest.raises(ModelCallError) as info:
        call(server, **over)
    return info.value


def test_it_returns_content_and_token_usage(server):
    server.respond(completion('{"ok": true}', prompt_tokens=21, completion_tokens=4))

    reply = call(server)

    assert (reply.content, reply.status, reply.prompt_tokens, reply.completion_tokens) == ('{"ok": true}', 200, 21, 4)
    [request] = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    assert request["body"]["model"] == "gpt-test"
    assert request["body"]["messages"] == [
        {"role": "system", "content": "Answer in JSON."},
        {"role": "user", "content": "say hi"},
    ]


def test_it_maps_429_to_rate_limited_with_retry_after(server):
    server.respond(Reply(429, '{"error": "slow down"}', {"Retry-After": "30"}))

    error = failure(server)

    assert error.kind == ErrorKind.RATE_LIMITED and error.retry_after == 30.0 and error.status == 429


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (500, ErrorKind.DEPENDENCY_UNREACHABLE),
        (502, ErrorKind.DEPENDENCY_UNREACHABLE),
        (503, ErrorKind.DEPENDENCY_UNREACHABLE),
        (401, ErrorKind.PERMISSION_DENIED),
        (403, ErrorKind.PERMISSION_DENIED),
        (400, ErrorKind.INVALID_PARAM),
        (404, ErrorKind.INVALID_PARAM),
    ],
)
def test_it_maps_http_errors_to_error_kinds(server, status, kind):
    server.respond(Reply(status, '{"error": {"message": "no"}}'))

    error = failure(server)

    assert error.kind == kind and error.status == status and f"HTTP {status}" in str(error)


def test_it_times_out_on_a_hung_response(server):
    server.respond(Reply(hang=30, body="{}"))
    started = time.monotonic()

    error = failure(server, read_timeout_seconds=0.3)

    assert error.kind == ErrorKind.TIMEOUT
    assert time.monotonic() - started < 25  # it gave up on its own, long before the server answered


def test_it_maps_a_refused_connection_to_dependency_unreachable(server):
    url = server.base_url
    server.stop()

    with pytest.raises(ModelCallError) as info:
        a = agent(server, base_url=url)
        chat(a, build_messages(a, "x"), now=NOW)

    assert info.value.kind == ErrorKind.DEPENDENCY_UNREACHABLE


@pytest.mark.parametrize(
    "body", ["<html>gateway</html>", '{"choices": []}', '{"choices": [{"message": {"content": null}}]}']
)
def test_it_maps_a_malformed_response_to_model_invalid_output_with_the_raw_text(server, body):
    server.respond(Reply(200, body))

    error = failure(server)

    assert error.kind == ErrorKind.MODEL_INVALID_OUTPUT and error.raw_output == body


def test_it_redacts_a_key_the_provider_echoes_back(server):
    server.respond(Reply(401, '{"error": "bad key {authorization}"}'))

    error = failure(server)

    assert error.kind == ErrorKind.PERMISSION_DENIED
    assert KEY not in str(error) and "[redacted]" in str(error)


def test_it_refuses_to_call_when_the_key_variable_is_unset(server, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    server.respond(completion("{}"))

    error = failure(server)

    assert error.kind == ErrorKind.INVALID_PARAM and KEY_ENV in str(error)
    assert server.requests == []


def test_it_answers_locally_with_the_echo_provider():
    echo = SimpleNamespace(name="demo", provider="echo", model="echo", system_prompt="")

    first = chat(echo, build_messages(echo, '{"b": 1, "a": [2]}'), now=NOW)
    again = chat(echo, build_messages(echo, '{"b": 1, "a": [2]}'), now=NOW)
    text = chat(echo, build_messages(echo, "hello there"), now=NOW)

    assert first == again and json.loads(first.content) == {"a": [2], "b": 1}
    assert json.loads(text.content) == {"echo": "hello there"} and text.prompt_tokens == 2


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (200, None),
        (201, None),
        (408, ErrorKind.TIMEOUT),
        (422, ErrorKind.INVALID_PARAM),
        (429, ErrorKind.RATE_LIMITED),
        (504, ErrorKind.DEPENDENCY_UNREACHABLE),
        (599, ErrorKind.DEPENDENCY_UNREACHABLE),
    ],
)
def test_it_classifies_statuses(status, kind):
    assert kind_for_status(status) == kind


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        ("", None),
        ("0", 0.0),
        ("120", 120.0),
        (format_datetime(NOW + timedelta(seconds=90), usegmt=True), 90.0),
        (format_datetime(NOW - timedelta(seconds=90), usegmt=True), 0.0),
        ("soon", None),
        ("-5", None),
        ("\u00b2", None),  # str.isdigit() is true for a superscript two, which float() refuses
        ("\u0661\u0662", None),  # Arabic-Indic digits: not an HTTP delta-seconds
    ],
)
def test_it_parses_retry_after(value, seconds):
    assert parse_retry_after(value, now=NOW) == seconds


def test_it_hashes_the_input_stably():
    messages = [{"role": "user", "content": "x"}]
    assert input_sha256("m", messages) == input_sha256("m", [dict(messages[0])])
    assert input_sha256("m", messages) != input_sha256("n", messages)


# A key with the characters escapers touch (/ + =), echoed back in every common form.
ECHO_KEY = "sk-proj/Zq81+mXc0=VbN2lKj7HgF5dS3aP9oI"
ECHO_FORMS = sorted(forms(ECHO_KEY))


def _assert_no_form_of(key: str, *texts: str) -> None:
    for text in texts:
        assert found(text, key) == [], text


@pytest.mark.parametrize("form", ECHO_FORMS)
def test_it_redacts_every_form_of_the_key_in_an_error_body(server, monkeypatch, form):
    monkeypatch.setenv(KEY_ENV, ECHO_KEY)
    server.respond(Reply(401, '{"error": "bad key: {key:' + form + '} (sent as {key:raw})"}'))

    error = failure(server)

    assert server.requests[0]["headers"]["Authorization"] == f"Bearer {ECHO_KEY}"
    _assert_no_form_of(ECHO_KEY, str(error), error.raw_output)
    assert "[redacted]" in str(error)


@pytest.mark.parametrize("form", ECHO_FORMS)
def test_it_redacts_every_form_of_the_key_in_a_completion_even_once_decoded(server, monkeypatch, form):
    """The body is JSON, and llm_json parses the content as JSON again: no decoding may reveal the key."""
    monkeypatch.setenv(KEY_ENV, ECHO_KEY)
    content = '{\\"summary\\": \\"echo {key:' + form + '}\\"}'
    server.respond(Reply(200, '{"choices": [{"message": {"role": "assistant", "content": "' + content + '"}}]}'))

    reply = call(server)

    decoded = json.loads(reply.content)
    _assert_no_form_of(ECHO_KEY, reply.content, decoded["summary"], json.dumps(decoded))
    assert "[redacted]" in decoded["summary"]


@pytest.mark.parametrize("form", ECHO_FORMS)
def test_it_redacts_every_form_of_the_key_in_output_that_is_not_a_completion(server, monkeypatch, form):
    monkeypatch.setenv(KEY_ENV, ECHO_KEY)
    server.respond(Reply(200, "<html>debug: {key:" + form + "}</html>"))

    error = failure(server)

    assert error.kind == ErrorKind.MODEL_INVALID_OUTPUT
    _assert_no_form_of(ECHO_KEY, str(error), error.raw_output)


def test_a_cookie_the_provider_sets_is_never_sent_back(server):
    """A thread's HTTP client serves all its calls, whatever the agent: it must not carry one call's
    session to the next, which may use another agent's key."""
    reply = completion("hi")
    reply.headers["Set-Cookie"] = "session=agent-a; Path=/"
    server.respond(reply)
    call(server)
    call(server, name="other", api_key_env=KEY_ENV)
    assert len(server.requests) == 2
    assert "Cookie" not in server.requests[1]["headers"]


def test_calls_at_once_wait_together_not_in_turn(server):
    """Many runs wait on the provider at the same time: the shared client does not queue them
    behind a connection limit (httpx's default is 100)."""
    server.respond(Reply(200, completion("hi").body, {"Content-Type": "application/json"}, hang=30))
    threads = [threading.Thread(target=call, args=(server,), kwargs={"read_timeout_seconds": 60}) for _ in range(120)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(server.requests) < 120 and time.monotonic() < deadline:
        time.sleep(0.05)
    arrived = len(server.requests)
    server.release()
    for t in threads:
        t.join()
    assert arrived == 120


def test_calls_from_many_threads_keep_their_connections_alive(server):
    """A worker's threads call the provider again and again: each thread's next call reuses its
    connection, however many call at once. (httpcore's shared pool closes idle connections while it
    holds more than its keep-alive limit, and scans all of them on every call: encode/httpcore#1035.)"""
    threads = 150
    server.respond(Reply(200, completion("hi").body, {"Content-Type": "application/json"}, hang=30))
    done, again = threading.Barrier(threads + 1), threading.Barrier(threads + 1)

    def twice() -> None:
        call(server, read_timeout_seconds=60)
        done.wait()
        again.wait()
        call(server, read_timeout_seconds=60)

    def all_waiting(count: int) -> None:  # every call of the round open at once, then answered
        deadline = time.monotonic() + 30
        while len(server.requests) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        server.release()

    workers = [threading.Thread(target=twice) for _ in range(threads)]
    for t in workers:
        t.start()
    all_waiting(threads)
    done.wait()
    server.hold()
    again.wait()
    all_waiting(2 * threads)
    for t in workers:
        t.join()
    assert len(server.requests) == 2 * threads
    assert server.connections == threads


def test_a_forked_child_calls_on_a_client_of_its_own(server):
    """A prefork pool child must not share its parent's kept-alive connection to the provider."""
    server.respond(completion("hi"))
    call(server)
    parents = http_client()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            ours = http_client()
            call(server)
            code = 0 if ours is not parents and http_client() is ours else 1
        finally:
            os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(server.requests) == 2 and server.connections == 2
