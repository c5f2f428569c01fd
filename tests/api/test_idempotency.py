"""An idempotency key names one request (Stripe's rule): the same key with the same body answers
the first result again; the same key with anything else in the body is a 409 naming the key, and
no second run is made. The request's fingerprint is kept with the run that recorded the key."""

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import TaskRun
from tests.support.api import assert_problem
from tests.support.desk import daily_report

pytestmark = [pytest.mark.django_db, pytest.mark.backend]

BODY = {"skill": "harness.noop", "params": {"note": "call back"}, "delay_seconds": 1800, "idempotency_key": "cb:7"}


def test_the_same_key_and_body_answers_the_first_run(admin_api):
    first = admin_api.post("/api/v1/runs", BODY)
    assert first.status_code == 201, first.content
    # Key order and spacing are not part of the request's meaning.
    again = admin_api.post(
        "/api/v1/runs",
        '{"idempotency_key":"cb:7","delay_seconds":1800,"params":{"note":"call back"},"skill":"harness.noop"}',
    )
    assert again.status_code == 200, again.content
    assert again.json() == {"created": False, "run": first.json()["run"] | {"dedupe_hits": 1}}
    assert TaskRun.objects.count() == 1


@pytest.mark.parametrize(
    "change",
    [
        {"delay_seconds": 5},
        {"params": {"note": "other"}},
        {"params": {}},
        {"delay_seconds": None, "run_at": (timezone.now() + timedelta(days=30)).isoformat()},
        {"skill": "harness.noop", "reason": "another reason"},
    ],
)
def test_the_same_key_with_another_request_is_409_naming_the_key(admin_api, change):
    first = admin_api.post("/api/v1/runs", BODY)
    assert first.status_code == 201
    other = {k: v for k, v in {**BODY, **change}.items() if v is not None}
    body = assert_problem(admin_api.post("/api/v1/runs", other), 409, code="idempotency-key-reused")
    assert body["key"] == "cb:7" and body["field"] == "idempotency_key" and "cb:7" in body["detail"]
    assert TaskRun.objects.count() == 1
    run = TaskRun.objects.get()
    assert run.payload["params"] == {"note": "call back"}


def test_the_fingerprint_is_kept_with_the_run_that_recorded_the_key(admin_api):
    rule = daily_report()
    admin_api.post("/api/v1/runs", {"rule": rule.name, "delay_seconds": 60, "idempotency_key": "k"})
    fingerprint = TaskRun.objects.get().payload["once"]["fingerprint"]
    assert len(fingerprint) == 64 and int(fingerprint, 16) >= 0
    assert (
        admin_api.post("/api/v1/runs", {"rule": rule.name, "delay_seconds": 60, "idempotency_key": "k"}).status_code
        == 200
    )
    assert_problem(
        admin_api.post("/api/v1/runs", {"rule": rule.name, "delay_seconds": 61, "idempotency_key": "k"}),
        409,
        code="idempotency-key-reused",
    )


def test_a_run_recorded_before_fingerprints_answers_as_before(admin_api):
    admin_api.post("/api/v1/runs", BODY)
    run = TaskRun.objects.get()
    del run.payload["once"]["fingerprint"]
    run.save(update_fields=["payload"])
    again = admin_api.post("/api/v1/runs", {**BODY, "delay_seconds": 5})
    assert again.status_code == 200 and again.json()["run"]["id"] == run.id
