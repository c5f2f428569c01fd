"""Dead letters over the API: list and find by biz_key, replay with the original biz_key (a second
replay queues nothing), close with a note, assign, all through the desk's services."""

import pytest

from deadletters.models import DeadLetter
from harness_site.audit.models import AuditEntry
from runs.models import TaskRun
from tests.support.api import assert_problem
from tests.support.desk import make_failed_run, make_user

pytestmark = pytest.mark.django_db


def test_it_lists_and_finds_tickets_by_biz_key(admin_api):
    make_failed_run("report:2026-03-01")
    make_failed_run("report:2026-03-02", kind="rate_limited")
    listed = admin_api.get("/api/v1/deadletters").json()
    assert sorted(t["biz_key"] for t in listed["results"]) == ["report:2026-03-01", "report:2026-03-02"]
    found = admin_api.get("/api/v1/deadletters", biz_key="report:2026-03-02").json()["results"]
    assert [t["error_kind"] for t in found] == ["rate_limited"]
    assert admin_api.get("/api/v1/deadletters", error_kind="timeout").json()["results"][0]["attempts"] == 1
    assert admin_api.get("/api/v1/deadletters", state="closed").json()["results"] == []
    assert_problem(admin_api.get("/api/v1/deadletters", state="lost"), 400, field="state")
    ticket = found[0]
    assert admin_api.get(f"/api/v1/deadletters/{ticket['id']}").json()["run"] == ticket["run"]
    assert_problem(admin_api.get("/api/v1/deadletters/424242"), 404, field="id")


def test_replay_keeps_the_biz_key_and_a_second_replay_changes_nothing(admin_api):
    run = make_failed_run()
    ticket = DeadLetter.objects.get(run=run)
    first = admin_api.post(f"/api/v1/deadletters/{ticket.id}/replay", {"reason": "fixed"})
    assert first.status_code == 200 and first.json()["ticket"]["state"] == "replayed"
    assert TaskRun.objects.get().state == TaskRun.State.PENDING and TaskRun.objects.count() == 1
    assert TaskRun.objects.get().biz_key == run.biz_key
    assert_problem(admin_api.post(f"/api/v1/deadletters/{ticket.id}/replay"), 409, code="not-open")
    assert AuditEntry.objects.filter(action="deadletter.replay").count() == 1


def test_close_needs_a_note_and_assign_a_staff_user(admin_api):
    ticket = DeadLetter.objects.get(run=make_failed_run())
    url = f"/api/v1/deadletters/{ticket.id}"
    assert_problem(admin_api.post(url + "/close", {}), 400, field="note")
    assert_problem(admin_api.post(url + "/close", {"note": "  "}), 400, field="note")
    make_user("sam", "On-call")
    assigned = admin_api.post(url + "/assign", {"owner": "sam", "reason": "yours"})
    assert assigned.status_code == 200 and assigned.json()["owner"] == "sam"
    assert_problem(admin_api.post(url + "/assign", {"owner": "nobody"}), 400, field="owner")
    assert_problem(admin_api.post(url + "/assign", {}), 400, field="owner")
    assert admin_api.post(url + "/assign", {"owner": None}).json()["owner"] is None
    closed = admin_api.post(url + "/close", {"note": "duplicate of #7"})
    assert (
        closed.status_code == 200 and closed.json()["state"] == "closed" and closed.json()["note"] == "duplicate of #7"
    )
    assert_problem(admin_api.post(url + "/close", {"note": "again"}), 409)
    assert_problem(admin_api.post(url + "/replay"), 409)
