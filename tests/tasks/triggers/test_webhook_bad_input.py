"""No unauthenticated 500 from the webhook: each bad input is a 4xx with a reason.

A huge Content-Length (once over a real socket), a NUL byte in the delivery id or the source name
(PostgreSQL refuses NUL in text), NaN, Infinity, 1e999, NUL, lone surrogates and very deep JSON in a
signed body. Marked `backend`: several of these only failed on PostgreSQL.
"""

import json
import socket
import time
from urllib.parse import urlsplit

import pytest

from harness_site.api.problems import TYPE_PREFIX as PROBLEM
from runs.models import TaskRun
from tasks.models import EventRefusal, TriggerSource
from tasks.rules import signatures
from tasks.triggers.events import event_intake
from tests.support.rules import make_rule

pytestmark = [pytest.mark.django_db, pytest.mark.backend]

SECRET = "hs-bad-input-0123456789abcdefghijklmnopqrstuvwxyz"
SECRET_ENV = "HARNESS_SECRET_TEST_BAD_INPUT"
EVENT = {"object_id": "inv-1", "action": "paid", "version": 1}


@pytest.fixture
def source(monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    rule = make_rule("bad-input", kind="event")
    return TriggerSource.objects.create(
        name="billing",
        kind="webhook",
        identity="svc:billing",
        rule=rule,
        secret_env=SECRET_ENV,
        snapshot_fields=["note", "n"],
    )


def signed_headers(raw: bytes, delivery: str = "d-1") -> dict:
    ts = str(int(time.time()))
    signature = signatures.sign(signatures.HARNESS, SECRET.encode(), timestamp=ts, delivery_id=delivery, body=raw)
    return {"X-Harness-Timestamp": ts, "X-Harness-Delivery": delivery, "X-Harness-Signature": signature}


def post(client, raw: bytes, *, path="/hooks/billing/", headers=None, **extra):
    headers = signed_headers(raw) if headers is None else headers
    return client.post(path, data=raw, content_type="application/json", headers=headers, **extra)


DEEP = b'{"object_id": "x", "action": "a", "version": 1, "n": ' + b"[" * 20000 + b"]" * 20000 + b"}"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"object_id": "x", "action": "a", "version": 1, "n": NaN}',
        b'{"object_id": "x", "action": "a", "version": 1, "n": Infinity}',
        b'{"object_id": "x", "action": "a", "version": 1, "n": -Infinity}',
        b'{"object_id": "x", "action": "a", "version": 1, "n": 1e999}',
        b'{"object_id": "a\\u0000b", "action": "a", "version": 1}',
        b'{"object_id": "x", "action": "a", "version": 1, "note": "\\u0000"}',
        b'{"object_id": "x", "action": "a", "version": 1, "k\\u0000": 1}',
        b'{"object_id": "\\ud800", "action": "a", "version": 1}',
        b'{"object_id": "x", "action": "a", "version": 1, "n": ' + b"1" * 5000 + b"}",
        DEEP,
        b'{"object_id": "x", "action": "a", "version": 1, "n": ' + b'{"a":' * 40 + b"1" + b"}" * 40 + b"}",
        b"\xff\xfe\x00{",
    ],
    ids=[
        "NaN",
        "Infinity",
        "-Infinity",
        "1e999",
        "NUL in criteria",
        "NUL in snapshot",
        "NUL in key",
        "lone surrogate",
        "5000 digits",
        "20000 deep",
        "41 deep",
        "not UTF-8",
    ],
)
def test_a_signed_body_we_cannot_store_is_400_malformed_json(client, source, raw, settings):
    source.max_body_bytes = 100_000
    source.save()
    response = post(client, raw)
    assert response.status_code == 400, response.content
    assert response.json()["type"] == PROBLEM + "malformed-json" and response.json()["detail"]
    assert not TaskRun.objects.exists()
    assert EventRefusal.objects.get().authenticated  # signed and fresh: an auditable row


@pytest.mark.parametrize("delivery", ["a\x00b", "\x00", "ok\n", "é"])
def test_a_bad_delivery_id_is_400_and_stored_escaped(client, source, delivery):
    raw = json.dumps(EVENT).encode()
    response = post(client, raw, headers=signed_headers(raw, delivery))
    assert (response.status_code, response.json()["type"]) == (400, PROBLEM + "bad-delivery-id")
    assert EventRefusal.objects.get().delivery_id == ""  # never the unchecked value


@pytest.mark.parametrize("path", ["/hooks/bil%00ling/", "/hooks/%00/", "/hooks/" + "a" * 101 + "/", "/hooks/a%20b/"])
def test_a_source_name_that_cannot_exist_is_404(client, source, path):
    raw = json.dumps(EVENT).encode()
    response = post(client, raw, path=path)
    assert (response.status_code, response.json()["type"]) == (404, PROBLEM + "unknown-source")
    assert "\x00" not in EventRefusal.objects.get().source_name


def test_a_python_caller_with_a_nul_is_refused_too(source):
    TriggerSource.objects.filter(pk=source.pk).update(kind="python")
    nan = event_intake(source="billing", payload={**EVENT, "n": float("nan")}, now=source.created_at)
    nul = event_intake(source="billing", payload={**EVENT, "object_id": "a\x00"}, now=source.created_at)
    name = event_intake(source="bil\x00ling", payload=EVENT, now=source.created_at)
    # A lone surrogate, e.g. a non-UTF-8 file name as os.listdir returns it: refused, not raised.
    surrogate = event_intake(source="billing", payload={**EVENT, "object_id": "inv-\udcff"}, now=source.created_at)
    assert (surrogate.status, surrogate.outcome) == (400, "malformed_json")
    assert (nan.status, nan.outcome) == (400, "malformed_json")
    assert (nul.status, nul.outcome) == (400, "malformed_json")
    assert (name.status, name.outcome) == (404, "unknown_source")


@pytest.mark.parametrize("length", [str(10**30), str(2**63), "99999999"])
def test_a_huge_content_length_is_413_through_the_test_client(client, source, length):
    response = post(client, json.dumps(EVENT).encode(), CONTENT_LENGTH=length)
    assert (response.status_code, response.json()["type"]) == (413, PROBLEM + "body-too-large")
    assert EventRefusal.objects.get().body_bytes is None  # the claim is in the detail only


@pytest.mark.parametrize("length", ["-1", "abc", "1" * 5000])
def test_a_negative_or_unreadable_content_length_is_no_500(client, source, length):
    response = post(client, json.dumps(EVENT).encode(), CONTENT_LENGTH=length)
    assert 400 <= response.status_code < 500, response.content
    assert response.json()["type"].startswith(PROBLEM)


def test_a_huge_content_length_over_a_real_socket_is_413(live_server, source):
    url = urlsplit(live_server.url)
    raw = json.dumps(EVENT).encode()
    headers = "".join(f"{k}: {v}\r\n" for k, v in signed_headers(raw).items())
    request = (
        f"POST /hooks/billing/ HTTP/1.1\r\nHost: {url.hostname}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {10**30}\r\n{headers}Connection: close\r\n\r\n"
    ).encode()
    with socket.create_connection((url.hostname, url.port), timeout=30) as conn:
        # The head only: the answer must come unread (unread bytes at close could reset the connection).
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)  # the development server drains the body it did not read until EOF
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    assert b" 413 " in status_line, answer[:300]
    assert json.loads(rest.partition(b"\r\n\r\n")[2])["type"] == PROBLEM + "body-too-large"
