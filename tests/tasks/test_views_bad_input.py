"""Every bad input to the flags/ping API and /healthz is a 4xx with a reason (problem details for the
API), never a 500.

NUL characters (PostgreSQL refuses them in text), NaN and deep JSON, wrong content types, wrong
methods and lying Content-Length headers. Marked `backend`: the NUL cases only failed on PostgreSQL.
"""

import json
import socket
from urllib.parse import urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from harness_site.api.tokens import token_create
from tasks.models import ReadinessFlag
from tests.support.api import assert_problem
from tests.support.rules import make_rule

pytestmark = [pytest.mark.django_db, pytest.mark.backend]

FLAG = {"name": "pipeline.raw_data.ready", "scope": "2026-12-01"}


@pytest.fixture
def auth():
    user = get_user_model().objects.create_superuser("root", password="pw-123456789")
    return {"HTTP_AUTHORIZATION": f"Bearer {token_create(name='t', user=user, now=timezone.now())}"}


def post(client, url, data, auth, content_type="application/json", **extra):
    raw = data if isinstance(data, str | bytes) else json.dumps(data)
    return client.post(url, data=raw, content_type=content_type, **auth, **extra)


DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize(
    ("url", "body", "status", "reason"),
    [
        ("/api/flags/set", {**FLAG, "scope": "2026\x00-12-01"}, 400, "malformed-json"),
        ("/api/flags/set", {**FLAG, "note": "a\x00b"}, 400, "malformed-json"),
        ("/api/flags/set", {**FLAG, "name": "a\x00b"}, 400, "malformed-json"),
        ("/api/flags/set", {**FLAG, "note": "\ud800"}, 400, "malformed-json"),
        ("/api/flags/clear", {**FLAG, "scope": "\x00"}, 400, "malformed-json"),
        ("/api/flags/set", '{"name": "a", "scope": "s", "note": NaN}', 400, "malformed-json"),
        ("/api/flags/set", '{"name": "a", "scope": "s", "x": Infinity}', 400, "malformed-json"),
        ("/api/flags/set", '{"name": "a", "scope": "s", "x": 1e999}', 400, "malformed-json"),
        ("/api/flags/set", '{"name": "a", "scope": "s", "x": ' + DEEP + "}", 400, "malformed-json"),
        ("/api/flags/clear", DEEP, 400, "malformed-json"),
        ("/api/flags/set", b"\xff\xfe{}", 400, "malformed-json"),
        ("/api/flags/set", "[1, 2]", 400, "malformed-json"),
        ("/api/flags/set", {**FLAG, "note": "x" * 300_000}, 413, "body-too-large"),
        ("/api/rules/no%00such/ping", {}, 404, "unknown-rule"),
        ("/api/rules/no-such/ping", {}, 404, "unknown-rule"),
    ],
)
def test_a_bad_body_is_a_4xx_with_a_reason(client, auth, url, body, status, reason):
    response = post(client, url, body, auth)
    assert response.status_code == status, response.content
    assert_problem(response, status, code=reason)
    assert not ReadinessFlag.objects.exists()


@pytest.mark.parametrize("query", [{"name": "a\x00"}, {"scope": "\x00"}, {"name": "x" * 300}])
def test_a_bad_query_is_a_400(client, auth, query):
    response = client.get("/api/flags", query, **auth)
    assert_problem(response, 400, code="invalid-field")


def test_a_form_post_is_415(client, auth):
    response = post(client, "/api/flags/set", "name=a&scope=b", auth, content_type="application/x-www-form-urlencoded")
    assert_problem(response, 415, code="unsupported-media-type")


def test_a_lying_content_length_is_413_unread(client, auth):
    response = post(client, "/api/flags/set", FLAG, auth, CONTENT_LENGTH=str(10**30))
    assert_problem(response, 413, code="body-too-large")


@pytest.mark.parametrize(
    ("method", "url"),
    [("put", "/api/flags/set"), ("get", "/api/flags/clear"), ("delete", "/api/flags"), ("get", "/api/rules/x/ping")],
)
def test_a_wrong_method_is_405_with_allow(auth, method, url):
    response = getattr(Client(enforce_csrf_checks=True), method)(url, **auth)
    assert_problem(response, 405, code="method-not-allowed")
    assert response["Allow"]


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_healthz_answers_only_get_and_head(method):
    # With CSRF enforced as for a real client: the answer is the JSON 405, not the middleware's HTML 403.
    response = getattr(Client(enforce_csrf_checks=True), method)("/healthz")
    assert (response.status_code, response.json()["reason"]) == (405, "method_not_allowed")
    assert response["Allow"] == "GET, HEAD"


def test_a_ping_for_a_rule_that_is_not_a_heartbeat_is_400(client, auth):
    make_rule("cron-rule", kind="cron", cron="0 9 * * *")
    response = post(client, "/api/rules/cron-rule/ping", {}, auth)
    assert_problem(response, 400, code="not-a-heartbeat-rule")


def raw_request(live_server, path: str, headers: str) -> bytes:
    """One HTTP/1.1 request over a plain socket: the test client cannot send a Content-Length it does not mean.

    Only the head is sent: the answer must come without the body (a server that closes with unread bytes
    in its buffer resets the connection, which could lose the answer)."""
    url = urlsplit(live_server.url)
    with socket.create_connection((url.hostname, url.port), timeout=30) as conn:
        conn.sendall(f"POST {path} HTTP/1.1\r\nHost: {url.hostname}\r\n{headers}Connection: close\r\n\r\n".encode())
        conn.shutdown(socket.SHUT_WR)  # the development server drains the body it did not read until EOF
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("length", [str(10**30), str(2**63), "99999999"])
def test_a_huge_content_length_over_a_real_socket_is_413(live_server, length):
    user = get_user_model().objects.create_superuser("sock", password="pw-123456789")
    token = token_create(name="t", user=user, now=timezone.now())
    answer = raw_request(
        live_server,
        "/api/flags/set",
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n",
    )
    status_line, _, rest = answer.partition(b"\r\n")
    assert b" 413 " in status_line, answer[:300]
    assert json.loads(rest.partition(b"\r\n\r\n")[2])["type"].endswith(":body-too-large")
