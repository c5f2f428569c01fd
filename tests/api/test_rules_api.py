"""Rules over the API: the same checks and messages as `rules import`, If-Match on the version,
pause/resume with a reason, run now and trial deduped like the admin's buttons, explain and preview."""

import json

import pytest

from harness_site.audit.models import AuditEntry
from runs.models import TaskRun
from tasks.models import TriggerRule
from tasks.services import RuleImportError, rule_import
from tests.support.api import assert_problem

pytestmark = pytest.mark.django_db

RULE = {
    "name": "daily-report",
    "reason": "operators need it",
    "kind": "cron",
    "cron": "0 9 * * *",
    "timezone": "Europe/Berlin",
    "dedupe_key_template": "report:{business_date}",
    "skill": "harness.noop",
}


def create(api, **over):
    response = api.post("/api/v1/rules", {**RULE, **over})
    assert response.status_code == 201, response.content
    return response


def test_it_creates_gets_and_lists_a_rule_with_its_version_as_etag(admin_api):
    response = create(admin_api)
    body = response.json()
    assert body["name"] == "daily-report" and body["version"] == 1 and body["cron"] == "0 9 * * *"
    assert response["ETag"] == '"1"' and response["Location"] == "/api/v1/rules/daily-report"
    got = admin_api.get("/api/v1/rules/daily-report")
    assert got.status_code == 200 and got.json()["id"] == body["id"] and got["ETag"] == '"1"'
    assert [r["name"] for r in admin_api.get("/api/v1/rules").json()] == ["daily-report"]
    assert admin_api.get("/api/v1/rules", kind="interval").json() == []
    assert admin_api.get("/api/v1/rules", enabled="true", q="daily").json()[0]["name"] == "daily-report"
    assert TriggerRule.objects.get().next_fire_at is not None


def test_a_second_create_of_the_same_name_is_a_conflict(admin_api):
    create(admin_api)
    assert_problem(admin_api.post("/api/v1/rules", RULE), 409, field="name", code="rule-exists")
    assert TriggerRule.objects.count() == 1


def _import_errors(item: dict) -> list[str]:
    with pytest.raises(RuleImportError) as caught:
        rule_import(json.dumps({"rules": [item]}))
    return caught.value.errors


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"cron": "61 9 * * *"}, "cron"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"skill": "no.such.skill"}, "skill"),
        ({"dedupe_key_template": "{nope}"}, "dedupe_key_template"),
        ({"dedupe_key_template": "{rule}{slot}"}, "dedupe_key_template"),
        ({"reason": ""}, "reason"),
        ({"max_attempts": "three"}, "max_attempts"),
        ({"max_attempts": 10**20}, "max_attempts"),
        ({"params": [1, 2]}, "params"),
        ({"run_at": "tomorrow"}, "run_at"),
        ({"colour": "blue"}, "colour"),
        ({"agent": "nobody"}, "agent"),
        ({"pools": ["nowhere"]}, "pools"),
    ],
)
def test_bad_input_gives_the_import_s_message_for_the_field_at_fault(admin_api, over, field):
    response = admin_api.post("/api/v1/rules", {**RULE, **over})
    body = assert_problem(response, 400, field=field, code="invalid-rule")
    # The same words as `rules import` for the same rule: one home for the checks.
    expected = _import_errors({**RULE, **over})
    assert next(e["detail"] for e in body["errors"] if e["field"] == field) in " ".join(expected)
    assert not TriggerRule.objects.exists()


def test_a_missing_required_field_is_named(admin_api):
    body = {k: v for k, v in RULE.items() if k != "timezone"}
    assert_problem(admin_api.post("/api/v1/rules", body), 400, field="timezone")


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        ("{not json", "application/json", 400),
        ('{"name": NaN}', "application/json", 400),
        ('{"name": "a\\u0000b"}', "application/json", 400),
        ("[1, 2]", "application/json", 400),
        ("name=x", "application/x-www-form-urlencoded", 415),
        ("[" * 100 + "]" * 100, "application/json", 400),
    ],
)
def test_malformed_bodies_are_problems_not_500s(admin_api, body, content_type, status):
    assert_problem(admin_api.post("/api/v1/rules", body, content_type=content_type), status)


def test_an_update_needs_the_current_version_in_if_match(admin_api):
    create(admin_api)
    url = "/api/v1/rules/daily-report"
    assert_problem(admin_api.patch(url, {"cron": "0 10 * * *"}), 428, field="If-Match")
    stale = admin_api.patch(url, {"cron": "0 10 * * *"}, HTTP_IF_MATCH='"7"')
    assert assert_problem(stale, 412, field="If-Match")["current_version"] == 1
    done = admin_api.patch(url, {"cron": "0 10 * * *"}, HTTP_IF_MATCH='"1"')
    assert done.status_code == 200 and done.json()["cron"] == "0 10 * * *" and done["ETag"] == '"2"'
    # The first writer's ETag is stale now: a second writer with it changes nothing.
    lost = admin_api.patch(url, {"cron": "0 11 * * *"}, HTTP_IF_MATCH='"1"')
    assert_problem(lost, 412)
    assert TriggerRule.objects.get().cron == "0 10 * * *"


def test_an_update_is_checked_like_an_import_and_cannot_rename(admin_api):
    create(admin_api)
    url = "/api/v1/rules/daily-report"
    assert_problem(admin_api.patch(url, {"cron": "0 25 * * *"}, HTTP_IF_MATCH='"1"'), 400, field="cron")
    assert_problem(admin_api.patch(url, {"name": "other"}, HTTP_IF_MATCH='"1"'), 400, field="name")
    assert TriggerRule.objects.get().version == 1


def test_pause_and_resume_need_a_reason_and_are_audited(admin_api):
    create(admin_api)
    url = "/api/v1/rules/daily-report"
    assert_problem(admin_api.post(url + "/pause", {}), 400, field="reason")
    assert_problem(admin_api.post(url + "/pause", {"reason": "x" * 501}), 400, field="reason")
    paused = admin_api.post(url + "/pause", {"reason": "upstream down"})
    assert paused.status_code == 200 and paused.json()["enabled"] is False
    assert paused.json()["pause_reason"] == "upstream down"
    assert_problem(admin_api.post(url + "/pause", {"reason": "again"}), 409)
    resumed = admin_api.post(url + "/resume", {"reason": "upstream back"})
    assert resumed.status_code == 200 and resumed.json()["enabled"] is True
    actions = list(AuditEntry.objects.order_by("id").values_list("action", "reason"))
    assert actions == [("rule.pause", "upstream down"), ("rule.resume", "upstream back")]


def test_delete(admin_api):
    create(admin_api)
    assert_problem(admin_api.delete("/api/v1/rules/daily-report", HTTP_IF_MATCH='"9"'), 412)
    assert admin_api.delete("/api/v1/rules/daily-report").status_code == 204
    assert_problem(admin_api.get("/api/v1/rules/daily-report"), 404, code="unknown-rule")


def test_run_now_dedupes_a_second_click_and_a_trial_has_its_own_key(admin_api):
    create(admin_api)
    url = "/api/v1/rules/daily-report"
    first = admin_api.post(url + "/run-now", {"slot": "2026-12-01T09:00", "reason": "rerun"})
    assert first.status_code == 201 and first.json()["created"] is True
    again = admin_api.post(url + "/run-now", {"slot": "2026-12-01T09:00"})
    assert again.status_code == 200 and again.json()["created"] is False
    assert again.json()["run"]["id"] == first.json()["run"]["id"]
    assert first.json()["run"]["source"] == "manual" and first.json()["run"]["triggered_by"] == "root"
    trial = admin_api.post(url + "/trial", {"slot": "2026-12-01T09:00"})
    assert trial.status_code == 201 and trial.json()["run"]["is_trial"] is True
    by_key = admin_api.post(url + "/run-now", {"biz_key": "order:7"})
    assert by_key.json()["run"]["biz_key"].endswith("/manual-key/order%3A7")
    assert TaskRun.objects.get(id=again.json()["run"]["id"]).dedupe_hits == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"slot": "2026-12-01T09:00", "biz_key": "k"}, "slot"),
        ({"slot": "someday"}, "slot"),
        ({"biz_key": "k" * 300}, "biz_key"),
        ({"slot": 5}, "slot"),
    ],
)
def test_run_now_refuses_bad_input_with_the_field(admin_api, body, field):
    create(admin_api)
    assert_problem(admin_api.post("/api/v1/rules/daily-report/run-now", body), 400, field=field)
    assert not TaskRun.objects.exists()


def test_explain_and_preview(admin_api):
    create(admin_api)
    url = "/api/v1/rules/daily-report"
    explained = admin_api.get(url + "/explain", slot="2026-12-01T09:00")
    assert explained.status_code == 200 and explained.json()["rule"] == "daily-report"
    assert explained.json()["outcome"] in ("not_due", "no_record")
    by_key = admin_api.get(url + "/explain", biz_key="report:2026-12-01")
    assert by_key.status_code == 200
    assert_problem(admin_api.get(url + "/explain"), 400, field="slot")
    assert_problem(admin_api.get(url + "/explain", slot="nope"), 400, field="slot")
    assert_problem(admin_api.get(url + "/explain", slot="a\x00b"), 400, field="slot")
    preview = admin_api.get(url + "/preview", count="3")
    assert preview.status_code == 200 and len(preview.json()) == 3
    assert preview.json()[0]["local"].endswith(("+01:00", "+02:00"))
    assert_problem(admin_api.get(url + "/preview", count="0"), 400, field="count")
    assert_problem(admin_api.get(url + "/preview", count="x"), 400, field="count")


def test_unknown_paths_and_methods_are_problems(admin_api):
    assert_problem(admin_api.get("/api/v1/nothing-here"), 404)
    assert_problem(admin_api.get("/api/v1/rules/nope"), 404, field="name")
    assert_problem(admin_api.delete("/api/v1/rules"), 405)


@pytest.mark.parametrize(
    "slot", ["9999-12-31T23:59:59-12:00", "0001-01-01T00:00:00+14:00", "9999-12-31T23:59", "0001-01-01T00:00"]
)
def test_instants_at_the_ends_of_the_calendar_are_never_a_500(admin_api, slot):
    create(admin_api)
    url = "/api/v1/rules/daily-report"
    answers = [
        admin_api.get(url + "/explain", slot=slot),
        admin_api.post(url + "/run-now", {"slot": slot}),
        admin_api.post(url + "/trial", {"slot": slot}),
        admin_api.post("/api/v1/runs", {"rule": "daily-report", "run_at": slot, "idempotency_key": "a"}),
        admin_api.post(
            "/api/v1/runs",
            {"rule": "daily-report", "run_at": slot, "timezone": "Pacific/Kiritimati", "idempotency_key": "b"},
        ),
    ]
    assert all(a.status_code < 500 for a in answers), [(a.status_code, a.content[:200]) for a in answers]


def test_a_body_over_the_limit_is_refused_before_it_is_parsed(admin_api):
    big = '{"name": "x", "reason": "' + "r" * (1024 * 1024) + '"}'
    assert_problem(admin_api.post("/api/v1/rules", big), 413, code="body-too-large")


def test_an_update_keeps_what_it_does_not_name(admin_api):
    from tasks.models import Pool, ServiceIdentity

    ServiceIdentity.objects.create(name="reporter", allowed_skills=["harness.noop"])
    Pool.objects.create(name="reports", reason="at most two reports at once", max_concurrency=2)
    create(admin_api, identity="reporter", pools=["reports"], params={"channel": "email"})
    done = admin_api.patch("/api/v1/rules/daily-report", {"reason": "finance asked"}, HTTP_IF_MATCH='"1"')
    assert done.status_code == 200, done.content
    body = done.json()
    assert body["identity"] == "reporter" and body["pools"] == ["reports"] and body["params"] == {"channel": "email"}
    assert body["reason"] == "finance asked" and body["version"] == 2
