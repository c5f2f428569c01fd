"""Who may do what: the admin's roles, enforced the same way (refusals per role), token scopes,
session + CSRF, and unauthenticated or unknown tokens as problems."""

from datetime import UTC, datetime

import pytest
from django.test import Client
from django.utils import timezone

from deadletters.models import DeadLetter
from runs.models import TaskRun
from tasks.models import ApiToken
from tests.support.api import Api, api_for, assert_problem
from tests.support.desk import daily_report, make_failed_run, make_user

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)

RULE = {
    "name": "api-made",
    "reason": "r",
    "kind": "interval",
    "interval_seconds": 60,
    "timezone": "UTC",
    "dedupe_key_template": "{rule}:{slot}",
    "skill": "harness.noop",
}


def calls(rule: str, ticket: int, run: int, pending: int) -> dict:
    """Every write endpoint, with the body that would succeed for a role allowed to call it."""
    r = f"/api/v1/rules/{rule}"
    return {
        "rules.create": ("post", "/api/v1/rules", RULE, {}),
        "rules.update": ("patch", r, {"reason": "changed"}, {"HTTP_IF_MATCH": '"1"'}),
        "rules.delete": ("delete", r, None, {}),
        "rules.pause": ("post", r + "/pause", {"reason": "why"}, {}),
        "rules.run_now": ("post", r + "/run-now", {}, {}),
        "rules.trial": ("post", r + "/trial", {}, {}),
        "runs.schedule_once_rule": (
            "post",
            "/api/v1/runs",
            {"rule": rule, "delay_seconds": 60, "idempotency_key": "k"},
            {},
        ),
        "runs.schedule_once_skill": (
            "post",
            "/api/v1/runs",
            {"skill": "harness.noop", "delay_seconds": 60, "idempotency_key": "k"},
            {},
        ),
        "runs.retry": ("post", f"/api/v1/runs/{run}/retry", {}, {}),
        "runs.cancel": ("post", f"/api/v1/runs/{pending}/cancel", {}, {}),
        "deadletters.replay": ("post", f"/api/v1/deadletters/{ticket}/replay", {}, {}),
        "deadletters.close": ("post", f"/api/v1/deadletters/{ticket}/close", {"note": "n"}, {}),
        "deadletters.assign": ("post", f"/api/v1/deadletters/{ticket}/assign", {"owner": None}, {}),
    }


# What each admin group may write (harness_site/audit/roles.py); every other call is refused.
ALLOWED = {
    "Viewers": set(),
    "Operators": {
        "rules.create",
        "rules.update",
        "rules.pause",
        "rules.run_now",
        "rules.trial",
        "runs.schedule_once_rule",
        "runs.schedule_once_skill",
        "runs.retry",
        "runs.cancel",
    },
    "On-call": {"runs.retry", "runs.cancel", "deadletters.replay", "deadletters.close", "deadletters.assign"},
}
READS = ["/api/v1/rules", "/api/v1/rules/{rule}", "/api/v1/runs", "/api/v1/runs/{run}", "/api/v1/deadletters"]


@pytest.mark.parametrize("group", sorted(ALLOWED))
@pytest.mark.parametrize("call", sorted(calls("x", 0, 0, 0)))
def test_each_role_may_write_what_the_admin_lets_it_and_nothing_else(group, call):
    rule = daily_report()
    run = make_failed_run(rule=rule)
    ticket = DeadLetter.objects.get(run=run).id
    pending = TaskRun.objects.create(
        biz_key="later", rule_name="r", skill="harness.noop", source="api", trigger_at=T0, run_after=T0
    )
    api = api_for(make_user("u", group))
    method, path, body, headers = calls(rule.name, ticket, run.id, pending.id)[call]
    response = api.delete(path, **headers) if method == "delete" else getattr(api, method)(path, body, **headers)
    if call in ALLOWED[group]:
        assert response.status_code in (200, 201, 204), (call, response.content)
    else:
        body = assert_problem(response, 403, code="permission-denied")
        assert "permission" in body["detail"]


@pytest.mark.parametrize("group", sorted(ALLOWED))
def test_every_role_reads(group):
    rule = daily_report()
    run = make_failed_run(rule=rule)
    api = api_for(make_user("u", group))
    for path in READS:
        assert api.get(path.format(rule=rule.name, run=run.id)).status_code == 200, path


def test_a_user_in_no_group_reads_nothing():
    api = api_for(make_user("nobody"))
    for path in ("/api/v1/rules", "/api/v1/runs", "/api/v1/deadletters"):
        assert_problem(api.get(path), 403)


def test_a_token_acts_only_within_its_scopes():
    rule = daily_report()
    root = make_user("root", superuser=True)
    reader = api_for(root, scopes=["rules:read"])
    assert reader.get("/api/v1/rules").status_code == 200
    assert reader.get(f"/api/v1/rules/{rule.name}/preview").status_code == 200
    assert "rules:write" in assert_problem(reader.post(f"/api/v1/rules/{rule.name}/run-now"), 403)["detail"]
    assert_problem(reader.get("/api/v1/runs"), 403)
    runner = api_for(root, scopes=["runs:write"])
    scheduled = runner.post("/api/v1/runs", {"skill": "harness.noop", "delay_seconds": 5, "idempotency_key": "k"})
    assert scheduled.status_code == 201
    assert_problem(runner.get("/api/v1/runs"), 403)
    everything = api_for(root)
    assert ApiToken.objects.filter(scopes=["*"]).exists()
    assert everything.get("/api/v1/deadletters").status_code == 200


def test_an_unknown_scope_is_refused_when_the_token_is_made():
    from django.core.exceptions import ValidationError

    from harness_site.api.tokens import token_create

    with pytest.raises(ValidationError):
        token_create(name="t", user=make_user("u"), now=timezone.now(), scopes=["rules:everything"])


@pytest.mark.parametrize(
    ("header", "code"),
    [
        (None, "authentication-required"),
        ("Bearer hk_unknown", "authentication-failed"),
        ("Basic dTpw", "authentication-failed"),
        ("Bearer ", "authentication-failed"),
    ],
)
def test_no_or_a_bad_token_is_a_401_problem(header, code):
    client = Client()
    headers = {"HTTP_AUTHORIZATION": header} if header is not None else {}
    response = client.get("/api/v1/rules", **headers)
    assert_problem(response, 401, code=code)
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_an_inactive_user_s_token_is_refused():
    user = make_user("gone", superuser=True)
    api = api_for(user)
    user.is_active = False
    user.save()
    assert_problem(api.get("/api/v1/rules"), 401)


def test_a_session_must_pass_the_csrf_check_for_writes():
    rule = daily_report()
    user = make_user("olga", "Operators")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    api = Api(client=client)
    assert api.get("/api/v1/rules").status_code == 200  # reads need no CSRF token
    refused = api.post(f"/api/v1/rules/{rule.name}/run-now", {})
    assert "CSRF" in assert_problem(refused, 403)["detail"]
    token = "k" * 32  # the csrftoken cookie a page of the site would have set
    client.cookies["csrftoken"] = token
    done = api.post(f"/api/v1/rules/{rule.name}/run-now", {}, HTTP_X_CSRFTOKEN=token)
    assert done.status_code == 201


def test_the_schema_and_docs_are_served_from_our_own_static_files():
    client = Client()
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200 and schema.json()["openapi"].startswith("3.")
    assert "/api/v1/runs" in schema.json()["paths"]
    for page in ("/api/v1/docs/", "/api/v1/redoc/"):
        html = client.get(page).content.decode()
        assert "/static/drf_spectacular_sidecar/" in html and "cdn" not in html.lower()


def test_the_flags_api_honours_token_scopes_too():
    root = make_user("root", superuser=True)
    flag = {"name": "pipeline.ready", "scope": "2026-12-01"}
    runs_only = api_for(root, scopes=["runs:write"])
    refused = runs_only.post("/api/flags/set", flag)
    assert "lacks the scope 'flags:write'" in assert_problem(refused, 403, code="permission-denied")["detail"]
    assert "lacks the scope 'flags:read'" in assert_problem(runs_only.get("/api/flags"), 403)["detail"]
    reader = api_for(root, scopes=["flags:read"])
    assert reader.get("/api/flags").status_code == 200
    assert reader.post("/api/flags/set", flag).status_code == 403
    assert api_for(root, scopes=["flags:write"]).post("/api/flags/set", flag).status_code == 201


def test_the_token_command_takes_scopes():
    from io import StringIO

    from django.core.management import CommandError, call_command

    make_user("olga", "Operators")
    out = StringIO()
    call_command("harness", "token", "create", "ci", "--user", "olga", "--scope", "runs:write", stdout=out)
    assert ApiToken.objects.get(name="ci").scopes == ["runs:write"]
    token = out.getvalue().strip().rsplit(" ", 1)[-1]
    api = Api(token)
    assert (
        api.post("/api/v1/runs", {"skill": "harness.noop", "delay_seconds": 5, "idempotency_key": "k"}).status_code
        == 201
    )
    assert_problem(api.get("/api/v1/rules"), 403)
    with pytest.raises(CommandError, match="scopes"):
        call_command("harness", "token", "create", "bad", "--user", "olga", "--scope", "everything")


def test_the_admin_lists_a_token_s_scopes():
    from tests.support.desk import client_for

    root = make_user("root", superuser=True)
    api_for(root, scopes=["deadletters:read"])
    page = client_for(root).get("/admin/tasks/apitoken/")
    assert page.status_code == 200 and "deadletters:read" in page.content.decode()
