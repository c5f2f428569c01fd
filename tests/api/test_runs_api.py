"""Runs over the API: the admin's filters with cursor pagination, a run with its attempts and
decisions, retry now and cancel (the admin's services), and delayed one-time runs kept in the
database as pending runs due later, deduped by their idempotency key and cancellable in the admin."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from deadletters.models import DeadLetter
from runs.models import Decision, TaskRun
from tests.support.api import assert_problem
from tests.support.desk import client_for, daily_report, make_failed_run, make_user

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def make_run(biz_key: str, **over) -> TaskRun:
    fields = {
        "rule_name": "r",
        "skill": "harness.noop",
        "source": "scheduler",
        "trigger_at": T0,
        "run_after": T0,
        "state": TaskRun.State.SUCCEEDED,
    }
    return TaskRun.objects.create(biz_key=biz_key, **{**fields, **over})


def test_it_lists_runs_newest_first_with_a_cursor(admin_api):
    made = [make_run(f"k{i}", trigger_at=T0 + timedelta(minutes=i)) for i in range(5)]
    first = admin_api.get("/api/v1/runs", limit="2").json()
    assert [r["id"] for r in first["results"]] == [made[4].id, made[3].id]
    assert first["previous"] is None and "cursor=" in first["next"]
    second = admin_api.client.get(first["next"], **admin_api.headers).json()
    assert [r["id"] for r in second["results"]] == [made[2].id, made[1].id]
    # A run inserted meanwhile does not shift the pages already cut (no OFFSET).
    make_run("k-new")
    third = admin_api.client.get(second["next"], **admin_api.headers).json()
    assert [r["id"] for r in third["results"]] == [made[0].id] and third["next"] is None


def test_it_filters_like_the_admin(admin_api):
    make_run("a", state="failed", last_error_kind="timeout", rule_name="nightly")
    make_run("b", state="pending", source="manual", is_trial=True, trigger_at=T0 + timedelta(days=1))
    make_run("order:7")

    def keys(**params):
        return sorted(r["biz_key"] for r in admin_api.get("/api/v1/runs", **params).json()["results"])

    assert keys(state="failed") == ["a"]
    assert keys(source="manual") == ["b"]
    assert keys(rule="nightly") == ["a"]
    assert keys(error_kind="timeout") == ["a"]
    assert keys(trial="true") == ["b"]
    assert keys(trial="false") == ["a", "order:7"]
    assert keys(triggered_after="2026-03-02T12:00:00Z") == ["b"]
    assert keys(triggered_before="2026-03-02T12:00:00+00:00") == ["a", "order:7"]
    assert keys(q="order") == ["order:7"]
    assert keys(q=str(TaskRun.objects.get(biz_key="b").id)) == ["b"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"state": "sleeping"}, "state"),
        ({"source": "x"}, "source"),
        ({"trial": "maybe"}, "trial"),
        ({"triggered_after": "yesterday"}, "triggered_after"),
        ({"triggered_after": "2026-03-02T12:00"}, "triggered_after"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1000"}, "limit"),
        ({"q": "a\x00b"}, "q"),
        ({"rule": "r" * 300}, "rule"),
    ],
)
def test_bad_filters_are_problems_with_the_parameter(admin_api, params, field):
    assert_problem(admin_api.get("/api/v1/runs", **params), 400, field=field)


def test_it_gets_a_run_with_its_attempts_decisions_and_tickets(admin_api):
    rule = daily_report()
    run = make_failed_run(rule=rule)
    run.slot = T0
    run.save(update_fields=["slot"])
    Decision.objects.create(rule=rule, slot=T0, reason=Decision.Reason.OVERLAP, created_at=T0)
    body = admin_api.get(f"/api/v1/runs/{run.id}").json()
    assert body["biz_key"] == run.biz_key and body["state"] == "failed"
    assert [a["outcome"] for a in body["attempt_list"]] == ["failed"]
    assert [d["reason"] for d in body["decisions"]] == ["overlap"]
    assert [t["state"] for t in body["tickets"]] == ["pending_manual"]
    assert_problem(admin_api.get("/api/v1/runs/999999"), 404, field="id")
    assert_problem(admin_api.get("/api/v1/runs/abc"), 404, field="id")
    assert_problem(admin_api.get("/api/v1/runs/" + "9" * 40), 404)


def test_retry_now_and_cancel_use_the_admin_s_services(admin_api):
    failed = make_failed_run()
    retried = admin_api.post(f"/api/v1/runs/{failed.id}/retry", {"reason": "fixed upstream"})
    assert retried.status_code == 200 and retried.json()["state"] == "pending"
    assert DeadLetter.objects.get(run=failed).state == DeadLetter.State.REPLAYED
    assert_problem(admin_api.post(f"/api/v1/runs/{make_run('done').id}/retry"), 409, code="not-retryable")
    cancelled = admin_api.post(f"/api/v1/runs/{failed.id}/cancel", {"reason": "not needed"})
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert_problem(admin_api.post(f"/api/v1/runs/{failed.id}/cancel"), 409, code="not-cancellable")
    assert_problem(admin_api.post(f"/api/v1/runs/{failed.id}/cancel", {"reason": ["x"]}), 400, field="reason")


# --- delayed one-time runs -----------------------------------------------------------------------


def test_a_delayed_run_is_a_pending_run_due_later_and_a_repeat_returns_it(admin_api):
    before = timezone.now()
    body = {"skill": "harness.noop", "params": {"note": "call back"}, "delay_seconds": 1800, "idempotency_key": "cb:7"}
    first = admin_api.post("/api/v1/runs", body)
    assert first.status_code == 201, first.content
    run = TaskRun.objects.get(id=first.json()["run"]["id"])
    assert run.state == TaskRun.State.PENDING and run.source == TaskRun.Source.API
    assert before + timedelta(seconds=1800) <= run.run_after <= timezone.now() + timedelta(seconds=1800)
    assert run.biz_key == "skill/harness.noop/once-key/cb%3A7" and run.payload["params"] == {"note": "call back"}
    assert run.dispatched_at is None  # no broker countdown: the sweeper sends it when due
    assert first["Location"] == f"/api/v1/runs/{run.id}"
    again = admin_api.post("/api/v1/runs", body)
    assert again.status_code == 200 and again.json() == {"created": False, "run": again.json()["run"]}
    assert again.json()["run"]["id"] == run.id and TaskRun.objects.count() == 1
    assert TaskRun.objects.get().dedupe_hits == 1


def test_a_delayed_run_of_a_rule_carries_the_rule_and_reads_a_local_time_in_its_zone(admin_api):
    rule = daily_report(params={"channel": "email"})
    body = {"rule": rule.name, "run_at": "2027-03-28T02:30", "timezone": "Europe/Berlin", "idempotency_key": "k"}
    response = admin_api.post("/api/v1/runs", {**body, "params": {"to": "ops"}})
    assert response.status_code == 201, response.content
    run = TaskRun.objects.get()
    # 02:30 does not exist in Berlin that night (DST gap): the rule's policy "shift" moves it to the
    # first valid time after the gap, 03:00 CEST, as for a one-time rule (docs/schedule.md).
    assert run.run_after == datetime(2027, 3, 28, 1, 0, tzinfo=UTC)
    assert run.rule == rule and run.biz_key == f"rule/{rule.id}/once-key/k" and run.slot is None
    assert run.payload["params"] == {"channel": "email", "to": "ops"}
    offset = admin_api.post(
        "/api/v1/runs", {"rule": rule.name, "run_at": "2027-01-01T09:00:00+08:00", "idempotency_key": "k2"}
    )
    assert TaskRun.objects.get(id=offset.json()["run"]["id"]).run_after == datetime(2027, 1, 1, 1, 0, tzinfo=UTC)


def test_the_same_key_for_two_rules_or_a_skill_makes_distinct_runs(admin_api):
    a, b = daily_report(name="a"), daily_report(name="b")
    for target in ({"rule": "a"}, {"rule": "b"}, {"skill": "harness.noop"}, {"skill": "harness.record"}):
        response = admin_api.post("/api/v1/runs", {**target, "delay_seconds": 60, "idempotency_key": "same"})
        assert response.status_code == 201
    assert TaskRun.objects.count() == 4
    # An operator's run-now by the same key is another namespace again.
    admin_api.post("/api/v1/rules/a/run-now", {"biz_key": "same"})
    assert TaskRun.objects.count() == 5 and a.pk != b.pk


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"skill": "harness.noop", "delay_seconds": 5}, "idempotency_key"),
        ({"skill": "harness.noop", "delay_seconds": 5, "idempotency_key": ""}, "idempotency_key"),
        ({"skill": "harness.noop", "delay_seconds": 5, "idempotency_key": "a\nb"}, "idempotency_key"),
        ({"skill": "harness.noop", "delay_seconds": 5, "idempotency_key": "k" * 201}, "idempotency_key"),
        ({"skill": "no.such", "delay_seconds": 5, "idempotency_key": "k"}, "skill"),
        ({"delay_seconds": 5, "idempotency_key": "k"}, "skill"),
        ({"rule": "nope", "delay_seconds": 5, "idempotency_key": "k"}, "rule"),
        ({"rule": "daily-report", "skill": "harness.noop", "delay_seconds": 5, "idempotency_key": "k"}, "skill"),
        ({"skill": "harness.noop", "idempotency_key": "k"}, "run_at"),
        (
            {"skill": "harness.noop", "delay_seconds": 5, "run_at": "2099-01-01T00:00Z", "idempotency_key": "k"},
            "run_at",
        ),
        ({"skill": "harness.noop", "delay_seconds": -1, "idempotency_key": "k"}, "delay_seconds"),
        ({"skill": "harness.noop", "delay_seconds": 10**9, "idempotency_key": "k"}, "delay_seconds"),
        ({"skill": "harness.noop", "delay_seconds": "soon", "idempotency_key": "k"}, "delay_seconds"),
        ({"skill": "harness.noop", "run_at": "2099-01-01T09:00", "idempotency_key": "k"}, "run_at"),
        ({"skill": "harness.noop", "run_at": "next week", "idempotency_key": "k"}, "run_at"),
        ({"skill": "harness.noop", "run_at": "9999-12-31T23:00:00-05:00", "idempotency_key": "k"}, "run_at"),
        (
            {"skill": "harness.noop", "run_at": "2099-01-01T09:00", "timezone": "Mars/x", "idempotency_key": "k"},
            "timezone",
        ),
        (
            {"skill": "harness.noop", "run_at": "2099-01-01T09:00Z", "timezone": "UTC", "idempotency_key": "k"},
            "timezone",
        ),
        ({"skill": "harness.noop", "delay_seconds": 5, "idempotency_key": "k", "params": [1]}, "params"),
    ],
)
def test_a_bad_delayed_run_is_refused_with_the_field(admin_api, body, field):
    daily_report()
    assert_problem(admin_api.post("/api/v1/runs", body), 400, field=field)
    assert not TaskRun.objects.exists()


def test_a_delayed_run_is_visible_and_cancellable_in_the_admin(admin_api):
    operator = make_user("olga", "Operators")
    created = admin_api.post("/api/v1/runs", {"skill": "harness.noop", "delay_seconds": 600, "idempotency_key": "x"})
    run_id = created.json()["run"]["id"]
    desk = client_for(operator)
    page = desk.get("/admin/runs/taskrun/", {"state__exact": "pending"})
    assert page.status_code == 200 and "skill/harness.noop/once-key/x" in page.content.decode()
    done = desk.post(f"/admin/runs/taskrun/{run_id}/cancel/", {"reason": "not needed"})
    assert done.status_code == 302
    assert TaskRun.objects.get(id=run_id).state == TaskRun.State.CANCELLED


def test_explain_answers_for_a_delayed_run_by_its_idempotency_key(admin_api):
    rule = daily_report()
    admin_api.post("/api/v1/runs", {"rule": rule.name, "delay_seconds": 60, "idempotency_key": "remind:1"})
    explained = admin_api.get(f"/api/v1/rules/{rule.name}/explain", biz_key="remind%3A1").json()
    assert explained["outcome"] == "run" and explained["biz_key"] == f"rule/{rule.id}/once-key/remind%3A1"


def test_a_run_is_found_by_the_raw_key_the_client_sent(admin_api):
    for key in ("callback:order-7", "订单:7", "callback:order-70"):
        body = {"skill": "harness.noop", "delay_seconds": 60, "idempotency_key": key}
        assert admin_api.post("/api/v1/runs", body).status_code == 201
    stored = dict(TaskRun.objects.values_list("biz_key", "id"))
    assert (
        "skill/harness.noop/once-key/callback%3Aorder-7" in stored and "skill/harness.noop/once-key/订单%3A7" in stored
    )
    # A whole stored key finds its run alone; a raw key or part of one every key containing it.
    for q, expected in (
        # The client's key is the tail of the stored one: every key containing it (-70 contains -7).
        (
            "callback:order-7",
            ["skill/harness.noop/once-key/callback%3Aorder-7", "skill/harness.noop/once-key/callback%3Aorder-70"],
        ),
        ("skill/harness.noop/once-key/callback%3Aorder-7", ["skill/harness.noop/once-key/callback%3Aorder-7"]),
        ("订单:7", ["skill/harness.noop/once-key/订单%3A7"]),
        (
            "back:order",
            ["skill/harness.noop/once-key/callback%3Aorder-7", "skill/harness.noop/once-key/callback%3Aorder-70"],
        ),
    ):
        found = admin_api.get("/api/v1/runs", q=q)
        assert found.status_code == 200, found.content
        assert sorted(r["biz_key"] for r in found.json()["results"]) == expected, q
