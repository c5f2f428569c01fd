"""Every refusal of every API surface (/api/v1, the flags and ping API, /metrics) is one RFC 9457
problem document, including the errors Django raises before any view runs: an oversized or lying
body, bad JSON, an unknown path, a wrong method, a CSRF failure."""

import json

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from harness_site.api.problems import MAX_BODY
from harness_site.api.tokens import token_create
from tests.support.api import assert_problem
from tests.support.desk import make_user

pytestmark = [pytest.mark.django_db, pytest.mark.backend]


@pytest.fixture
def auth():
    token = token_create(name="t", user=make_user("root", superuser=True), now=timezone.now())
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@pytest.mark.parametrize("url", ["/api/v1/rules", "/api/v1/runs", "/api/flags/set", "/api/rules/r/ping"])
def test_a_body_over_the_limit_is_413_problem(client, auth, url):
    body = json.dumps({"name": "x" * (MAX_BODY + 10)})
    assert_problem(client.post(url, body, content_type="application/json", **auth), 413, code="body-too-large")


@pytest.mark.parametrize("url", ["/api/v1/rules", "/api/flags/set"])
def test_a_5_mb_body_is_413_problem(client, auth, url):
    body = json.dumps({"name": "x" * (5 * 1024 * 1024)})
    assert_problem(client.post(url, body, content_type="application/json", **auth), 413, code="body-too-large")


@pytest.mark.parametrize("url", ["/api/v1/rules", "/api/v1/runs/1/cancel", "/api/flags/set"])
def test_a_lying_content_length_is_413_problem_without_reading_the_body(client, auth, url):
    response = client.post(url, b"{}", content_type="application/json", CONTENT_LENGTH=str(10 * 1024 * 1024), **auth)
    assert_problem(response, 413, code="body-too-large")


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_the_limit_is_the_smaller_of_ours_and_djangos(client, auth):
    response = client.post("/api/v1/rules", json.dumps({"name": "x" * 2000}), content_type="application/json", **auth)
    assert_problem(response, 413, code="body-too-large")


@pytest.mark.parametrize("url", ["/api/v1/rules", "/api/flags/set", "/api/rules/r/ping"])
@pytest.mark.parametrize("body", [b"{", b'{"a": NaN}', b"\xff\xfe", b'{"a": "\\u0000"}'])
def test_bad_json_is_400_problem(client, auth, url, body):
    assert_problem(client.post(url, body, content_type="application/json", **auth), 400)


@pytest.mark.parametrize(
    "url", ["/api/v1/nope", "/api/v1/runs/1/nope", "/api/nope", "/api/flags/nope", "/api/rules/a/b/ping"]
)
def test_an_unknown_api_path_is_404_problem(client, auth, url):
    assert_problem(client.get(url, **auth), 404, code="not-found")


@pytest.mark.parametrize(
    ("method", "url"),
    [("delete", "/api/v1/runs"), ("put", "/api/v1/runs/1"), ("get", "/api/flags/set"), ("post", "/api/flags")],
)
def test_a_wrong_method_is_405_problem_with_allow(auth, method, url):
    response = getattr(Client(), method)(url, **auth)
    assert_problem(response, 405, code="method-not-allowed")
    assert response["Allow"]


@pytest.mark.parametrize("url", ["/api/flags", "/api/v1/runs"])
def test_no_credentials_is_401_problem(client, url):
    response = client.get(url)
    assert_problem(response, 401, code="authentication-required")
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("url", ["/api/flags", "/api/v1/runs", "/api/rules/r/ping"])
@pytest.mark.parametrize("header", ["Basic abc", "Bearer", "Bearer  ", "bearer nope", "Bearer a\x00b"])
def test_a_bad_token_is_401_problem_the_same_everywhere(client, url, header):
    response = client.generic("GET" if "ping" not in url else "POST", url, HTTP_AUTHORIZATION=header)
    body = assert_problem(response, 401, code="authentication-failed")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert body["detail"] in ("Authorization must be 'Bearer <token>'.", "unknown or revoked token")


def test_a_session_without_csrf_is_403_problem():
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user("root", superuser=True))
    response = client.post("/api/flags/set", json.dumps({"name": "a.b", "scope": "s"}), content_type="application/json")
    assert "CSRF" in assert_problem(response, 403)["detail"]


def test_a_missing_permission_is_403_problem_naming_it(client):
    token = token_create(name="t", user=make_user("nobody"), now=timezone.now())
    response = client.post(
        "/api/flags/set", "{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert "tasks.add_readinessflag" in assert_problem(response, 403, code="permission-denied")["detail"]


def test_a_form_post_is_415_problem(client, auth):
    response = client.post("/api/flags/set", {"name": "a"}, **auth)
    assert_problem(response, 415, code="unsupported-media-type")


@pytest.mark.parametrize(
    ("body", "field"), [({"name": "bad name!", "scope": "s"}, "name"), ({"name": "a.b", "scope": "x\ny"}, "scope")]
)
def test_a_flag_refusal_names_its_field(client, auth, body, field):
    response = client.post("/api/flags/set", json.dumps(body), content_type="application/json", **auth)
    assert_problem(response, 400, field=field)


def test_an_unknown_rule_ping_is_404_problem(client, auth):
    assert_problem(client.post("/api/rules/nope/ping", "{}", content_type="application/json", **auth), 404)


def test_metrics_refusals_are_problems(client, settings):
    settings.HARNESS = {**settings.HARNESS, "METRICS_TOKEN": "metrics-secret-0123456789"}
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong")
    assert_problem(response, 401)
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert_problem(client.post("/metrics", HTTP_AUTHORIZATION="Bearer metrics-secret-0123456789"), 405)
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer metrics-secret-0123456789").status_code == 200


def test_metrics_off_is_404_problem(client, settings):
    settings.HARNESS = {**settings.HARNESS, "METRICS_TOKEN": ""}
    assert_problem(client.get("/metrics"), 404)


@pytest.mark.parametrize("length", ["\uff11\uff12", "12abc", "-1", " 12"])
def test_a_content_length_that_is_not_a_number_is_400_problem(client, auth, length):
    response = client.post("/api/v1/rules", b"{}", content_type="application/json", CONTENT_LENGTH=length, **auth)
    assert_problem(response, 400, code="bad-content-length")


def test_a_server_error_on_an_api_path_is_a_problem_that_tells_nothing(client, auth, monkeypatch):
    from harness_site.api import runs

    def broken(*args, **kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(runs, "run_get", broken)
    client.raise_request_exception = False
    response = client.get("/api/v1/runs/1", **auth)
    body = assert_problem(response, 500, code="internal-error")
    assert b"secret internals" not in response.content and "logged" in body["detail"]


def test_a_webhook_refusal_is_a_problem_too(client):
    response = client.post("/hooks/no-such-source/", b"{}", content_type="application/json")
    assert_problem(response, 404, code="unknown-source")
    response = client.get("/hooks/no-such-source/")
    assert_problem(response, 405, code="method-not-allowed")
    assert response["Allow"] == "POST"


def test_an_unknown_webhook_path_is_a_problem(client):
    assert_problem(client.post("/hooks/a/b/c", b"{}", content_type="application/json"), 404, code="not-found")
