"""Freshness objectives over the API and in the admin: set and refused with a message, exported,
each rule's status and cause in the list (a fixed number of queries), a filter by status."""

from datetime import UTC, datetime, time, timedelta

import pytest

from runs.engine.objectives import objective_evaluate
from tasks.models import TriggerRule
from tasks.services import rule_export
from tasks.triggers.scheduler import scheduler_tick
from tests.support.api import assert_problem
from tests.support.desk import client_for, make_user
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

RULE = {
    "name": "daily-report",
    "reason": "operators need it",
    "kind": "cron",
    "cron": "0 8 * * *",
    "timezone": "Asia/Shanghai",
    "dedupe_key_template": "report:{business_date}",
    "skill": "harness.noop",
}
SLOT = datetime(2026, 12, 2, 0, 0, tzinfo=UTC)  # 08:00 Shanghai


def test_an_objective_is_set_read_and_exported(admin_api):
    response = admin_api.post("/api/v1/rules", {**RULE, "objective": "wall", "objective_time": "09:30:00"})
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["objective"], body["objective_time"], body["objective_status"]) == ("wall", "09:30:00", None)
    [exported] = rule_export()["rules"]
    assert (exported["objective"], exported["objective_time"], exported["objective_offset_seconds"]) == (
        "wall",
        "09:30:00",
        None,
    )


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"objective": "wall"}, "objective_time"),
        ({"objective": "offset"}, "objective_offset_seconds"),
        ({"objective": "offset", "objective_offset_seconds": 0}, "objective_offset_seconds"),
        ({"objective": "soon"}, "objective"),
        ({"objective": "wall", "objective_time": "9.30"}, "objective_time"),
        ({"kind": "event", "objective": "offset", "objective_offset_seconds": 60}, "objective"),
    ],
)
def test_an_unusable_objective_is_refused_with_the_field_named(admin_api, over, field):
    body = {**RULE, **over}
    if over.get("kind") == "event":
        body["dedupe_key_template"] = "{rule}:{object_id}:{action}:{version}"
        body.pop("cron")
    assert_problem(admin_api.post("/api/v1/rules", body), 400, field=field)


def test_a_latest_start_and_lead_time_are_set_exported_and_shown_in_the_rule_form(admin_api):
    body = {
        **RULE,
        "objective": "wall",
        "objective_time": "09:30:00",
        "objective_start_before_seconds": 900,
        "objective_lead_seconds": 1200,
    }
    response = admin_api.post("/api/v1/rules", body)
    assert response.status_code == 201, response.content
    got = response.json()
    assert (got["objective_start_before_seconds"], got["objective_lead_seconds"]) == (900, 1200)
    [exported] = rule_export()["rules"]
    assert (exported["objective_start_before_seconds"], exported["objective_lead_seconds"]) == (900, 1200)
    spec = TriggerRule.objects.get().objective_spec()
    assert spec is not None and (spec.start_before, spec.lead) == (timedelta(minutes=15), timedelta(minutes=20))
    browser = client_for(make_user("desk", superuser=True))
    form = browser.get(f"/admin/tasks/triggerrule/{got['id']}/change/").content.decode()
    assert 'name="objective_start_before_seconds"' in form and 'name="objective_lead_seconds"' in form
    assert "warns if not started by 09:15" in form


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"objective_start_before_seconds": 600}, "objective_start_before_seconds"),
        (
            {"objective": "offset", "objective_offset_seconds": 600, "objective_lead_seconds": 600},
            "objective_lead_seconds",
        ),
        (
            {"objective": "offset", "objective_offset_seconds": 600, "objective_lead_seconds": -1},
            "objective_lead_seconds",
        ),
        (
            {"objective": "offset", "objective_offset_seconds": 600, "objective_lead_seconds": "soon"},
            "objective_lead_seconds",
        ),
    ],
)
def test_an_unusable_latest_start_or_lead_time_is_refused_with_the_field_named(admin_api, over, field):
    assert_problem(admin_api.post("/api/v1/rules", {**RULE, **over}), 400, field=field)


def test_the_list_carries_each_rules_status_and_filters_by_it(admin_api, django_assert_max_num_queries):
    held = make_rule(
        "held",
        due=SLOT,
        kind="cron",
        cron="0 8 * * *",
        timezone="Asia/Shanghai",
        depends_on=["raw_data.ready"],
        ready_deadline=time(12, 0),
        objective="offset",
        objective_offset_seconds=60,
    )
    for i in range(5):
        make_rule(
            f"fine-{i}", due=SLOT, kind="cron", cron="0 8 * * *", objective="offset", objective_offset_seconds=7200
        )
    scheduler_tick(now=datetime(2026, 12, 2, 0, 0, 5, tzinfo=UTC))
    # 08:00:30 Shanghai: the held slot cannot be done by 08:01 even if its flag came now (10 s + 60 s).
    objective_evaluate(now=datetime(2026, 12, 2, 0, 0, 30, tzinfo=UTC))

    with django_assert_max_num_queries(12):
        rules = admin_api.get("/api/v1/rules").json()
    status = {r["name"]: r["objective_status"] for r in rules}
    assert status["held"]["status"] == "at_risk"
    assert status["held"]["cause"].startswith("waiting for readiness flag raw_data.ready")
    assert {status[f"fine-{i}"]["status"] for i in range(5)} == {"on_track"}

    at_risk = admin_api.get("/api/v1/rules?objective=at_risk").json()
    assert [r["name"] for r in at_risk] == ["held"]
    assert_problem(admin_api.get("/api/v1/rules?objective=late"), 400, field="objective")

    # The admin's rule list: the same status in a column, the same filter; the rule page: its status.
    browser = client_for(make_user("desk", superuser=True))
    page = browser.get("/admin/tasks/triggerrule/?objective=at_risk")
    assert page.status_code == 200
    html = page.content.decode()
    assert "held" in html and "fine-0" not in html and "waiting for readiness flag raw_data.ready" in html
    rule_page = browser.get(f"/admin/tasks/triggerrule/{held.id}/change/").content.decode()
    assert 'id="objective-status"' in rule_page and rule_page.count('class="objective-cell"') == 30
    assert TriggerRule.objects.count() == 6
