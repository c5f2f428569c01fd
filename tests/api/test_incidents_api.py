"""GET /api/incidents and /api/incidents/<id>: read-only, the desk's permissions, problem details."""

from datetime import UTC, datetime, timedelta

import pytest

from runs.models import Incident
from tasks.triggers.scheduler import scheduler_tick
from tests.support.api import api_for, assert_problem
from tests.support.desk import make_user
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def outage() -> Incident:
    make_rule("every-10s", interval_seconds=10, due=T0 + timedelta(seconds=10), now=T0)
    scheduler_tick(now=T0)
    scheduler_tick(now=T0 + timedelta(seconds=125))
    return Incident.objects.get()


def test_it_lists_incidents_and_gives_one_with_what_it_cost(admin_api):
    incident = outage()
    listed = admin_api.get("/api/v1/incidents").json()
    assert [i["id"] for i in listed["results"]] == [incident.id]
    assert listed["results"][0]["kind"] == "scheduler"
    assert listed["results"][0]["duration_seconds"] == 125.0
    assert admin_api.get("/api/v1/incidents?open=true").json()["results"] == []
    one = admin_api.get(f"/api/v1/incidents/{incident.id}").json()
    assert (one["missed"], one["caught_up"]) == (11, 1)
    assert one["rules"] == [{"rule": "every-10s", "missed": 11, "caught_up": 1, "other": 0}]
    assert len(one["missed_slots"]) == 11
    assert one["link"].endswith(f"/admin/runs/incident/{incident.id}/change/")


@pytest.mark.parametrize(("path", "status"), [("/api/v1/incidents/999", 404), ("/api/v1/incidents/x", 404)])
def test_an_unknown_incident_is_a_problem_not_a_500(admin_api, path, status):
    assert_problem(admin_api.get(path), status, field="id")


def test_a_bad_filter_is_a_400(admin_api):
    assert_problem(admin_api.get("/api/v1/incidents?kind=volcano"), 400, field="kind")
    assert_problem(admin_api.post("/api/v1/incidents", {}), 405)


def test_a_viewer_may_read_incidents():
    api = api_for(make_user("v", "Viewers"))
    assert api.get("/api/v1/incidents").status_code == 200
