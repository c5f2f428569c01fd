"""The readiness-flag and ping HTTP API: token or session auth, JSON in, problem details with a reason out."""

import json
from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from harness_site.api.tokens import token_create
from tasks.models import ApiToken, ReadinessFlag
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

FLAG = {"name": "pipeline.raw_data.ready", "scope": "2026-12-01"}


def user_with(*codenames: str, username: str = "pipeline"):
    user = get_user_model().objects.create_user(username, password="pw-123456789")
    for code in codenames:
        user.user_permissions.add(Permission.objects.get(codename=code))
    return user


def bearer(user) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token_create(name='t', user=user, now=timezone.now())}"}


def post(client, url, body, **headers):
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(url, data=data, content_type="application/json", **headers)


def test_a_token_sets_lists_and_clears_a_flag(client):
    auth = bearer(user_with("add_readinessflag", "view_readinessflag", "delete_readinessflag"))
    created = post(client, "/api/flags/set", {**FLAG, "note": "load done"}, **auth)
    assert created.status_code == 201
    assert created.json()["flag"]["set_by"] == "pipeline"
    again = post(client, "/api/flags/set", FLAG, **auth)
    assert (again.status_code, again.json()["created"]) == (200, False)
    assert ReadinessFlag.objects.count() == 1

    listed = client.get("/api/flags", {"name": FLAG["name"]}, **auth)
    assert [f["scope"] for f in listed.json()["flags"]] == ["2026-12-01"]

    cleared = post(client, "/api/flags/clear", FLAG, **auth)
    assert cleared.json() == {"ok": True, "cleared": True}
    assert post(client, "/api/flags/clear", FLAG, **auth).json()["cleared"] is False
    assert ApiToken.objects.get().last_used_at is not None


@pytest.mark.parametrize(
    ("headers", "status", "reason"),
    [
        ({}, 401, "Authentication required"),
        ({"HTTP_AUTHORIZATION": "Bearer nope"}, 401, "unknown or revoked token"),
        ({"HTTP_AUTHORIZATION": "Basic abc"}, 401, "Bearer <token>"),
    ],
)
def test_it_refuses_without_valid_credentials(client, headers, status, reason):
    response = post(client, "/api/flags/set", FLAG, **headers)
    assert response.status_code == status
    assert reason in response.json()["detail"]
    assert not ReadinessFlag.objects.exists()


def test_it_refuses_without_the_permission(client):
    response = post(client, "/api/flags/set", FLAG, **bearer(user_with("view_readinessflag")))
    assert response.status_code == 403
    assert "tasks.add_readinessflag" in response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ({"scope": "2026-12-01"}, "name: required"),
        ({"name": "has spaces", "scope": "2026-12-01"}, "name: required"),
        ({"name": "ok.flag", "scope": ""}, "scope: required"),
        ({"name": "ok.flag", "scope": "x" * 201}, "scope: required"),
        ({"name": "ok.flag", "scope": "d", "note": 5}, "note:"),
    ],
)
def test_it_refuses_bad_bodies_with_a_reason(client, body, reason):
    response = post(client, "/api/flags/set", body, **bearer(user_with("add_readinessflag")))
    assert response.status_code == 400
    assert reason in response.json()["detail"]
    assert not ReadinessFlag.objects.exists()


def test_it_refuses_an_oversized_body_and_a_wrong_method(client):
    auth = bearer(user_with("add_readinessflag"))
    big = post(client, "/api/flags/set", {**FLAG, "note": "x" * 300_000}, **auth)
    assert big.status_code == 413
    assert client.get("/api/flags/set", **auth).status_code == 405


def test_a_session_needs_the_csrf_token():
    user = user_with("add_readinessflag", username="browser")
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    refused = post(strict, "/api/flags/set", FLAG)
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    strict.get("/admin/login/")  # sets the csrftoken cookie
    token = strict.cookies["csrftoken"].value
    accepted = post(strict, "/api/flags/set", FLAG, HTTP_X_CSRFTOKEN=token)
    assert accepted.status_code == 201


def test_a_heartbeat_ping_through_the_api(client):
    make_rule("hb", kind="heartbeat")
    make_rule("cron", kind="cron", cron="0 9 * * *")
    auth = bearer(user_with("send_ping"))
    ok = post(client, "/api/rules/hb/ping", {}, **auth)
    assert ok.status_code == 200
    fires = datetime.fromisoformat(ok.json()["fires_if_silent_until"])
    assert fires > datetime.now(UTC)
    assert post(client, "/api/rules/nope/ping", {}, **auth).status_code == 404
    wrong = post(client, "/api/rules/cron/ping", {}, **auth)
    assert wrong.status_code == 400 and "not a heartbeat rule" in wrong.json()["detail"]


# "$" matches before a trailing newline, and a scope was any text: a flag could forge log lines.
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**FLAG, "name": "pipeline.raw_data.ready\n"}, "name"),
        ({**FLAG, "name": "pipeline.raw_data.ready\n2026-12-01 INFO harness.flags flag set name=x"}, "name"),
        ({**FLAG, "scope": "2026-12-01\n2026-12-01 12:00:00 INFO harness.flags flag cleared name=x"}, "scope"),
        ({**FLAG, "scope": "2026-12-01\r"}, "scope"),
        ({**FLAG, "scope": "2026-12-01\x1b[2K"}, "scope"),
        ({**FLAG, "scope": "2026-12-01\u202e"}, "scope"),  # a bidi override reorders what the log shows
    ],
)
def test_it_refuses_names_and_scopes_with_line_breaks_or_control_characters(client, caplog, body, field):
    auth = bearer(user_with("add_readinessflag"))

    response = post(client, "/api/flags/set", body, **auth)

    assert response.status_code == 400 and response.json()["field"] == field
    assert not ReadinessFlag.objects.exists()


def test_it_logs_flag_values_quoted_so_a_value_cannot_start_a_line(caplog):
    from tasks.flags import flag_set

    caplog.set_level("INFO", logger="harness.flags")
    flag_set(name="pipeline.ready", scope="key with spaces", actor="ops\nFAKE", now=datetime(2026, 3, 1, tzinfo=UTC))

    [record] = [r for r in caplog.records if r.name == "harness.flags"]
    assert "\n" not in record.getMessage() and "'key with spaces'" in record.getMessage()


@pytest.mark.parametrize(
    ("query", "field"),
    [({"scope": "2026-12-01\x00"}, "scope"), ({"name": "a\x00b"}, "name"), ({"name": "ready\n"}, "name")],
)
def test_it_refuses_a_list_filter_with_a_nul_or_a_line_break(client, query, field):
    """PostgreSQL refuses a NUL in a query parameter outright: a 400 with the field, not a 500."""
    auth = bearer(user_with("view_readinessflag"))

    response = client.get("/api/flags", query, **auth)

    assert response.status_code == 400 and response.json()["field"] == field


def test_it_refuses_a_note_with_a_nul(client):
    auth = bearer(user_with("add_readinessflag"))

    response = post(client, "/api/flags/set", {**FLAG, "note": "load done\x00"}, **auth)

    # Strict JSON refuses it before any field is read, naming where it is.
    assert response.status_code == 400 and response.json()["type"].endswith(":malformed-json")
    assert "$.note: contains a NUL character" in response.json()["detail"]
    assert not ReadinessFlag.objects.exists()
