"""The webhook endpoint through the Django test client, on the real database.

Each refusal has its own reason code and status, creates no run, leaves a refusal record and
counts one on the source's metric; a valid delivery creates exactly one run, and sending it again
answers with the same run id.
"""

import json
import time

import pytest
from django.urls import reverse
from django.utils import timezone

from harness_site.api.problems import TYPE_PREFIX as PROBLEM
from runs.models import TaskRun
from tasks.models import EventDelivery, EventMetric, EventRefusal, RefusalCount, TriggerRule, TriggerSource
from tasks.rules import events
from tasks.triggers.events import webhook_intake
from tests.support.webhooks import EVENT, SECRET, SECRET_ENV, billing_source, post, sign  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db


@pytest.fixture
def source(billing_source):  # noqa: F811 - the tests below call it by its short name
    return billing_source


def metric(source_name, outcome) -> int:
    row = EventMetric.objects.filter(source_name=source_name, outcome=outcome).first()
    return row.count if row else 0


def test_it_runs_a_valid_signed_delivery_once_keeping_criteria_snapshot_and_references(client, source):
    response = post(client, EVENT)

    assert response.status_code == 202, response.content
    body = response.json()
    run = TaskRun.objects.get()
    assert body == {
        "outcome": "accepted",
        "run_id": run.id,
        "biz_key": f"rule/{run.rule_id}/event/invoice-paid:inv-42:paid:3",
        "created": True,
    }
    assert (run.biz_key, run.source, run.triggered_by, run.rule_id) == (
        f"rule/{source.rule_id}/event/invoice-paid:inv-42:paid:3",
        "event",
        "svc:billing",
        source.rule_id,
    )
    event = run.payload["event"]
    assert event["criteria"] == {"object_id": "inv-42", "action": "paid", "version": "3"}
    assert event["snapshot"] == {"amount": 120.5, "customer.tier": "gold"}
    assert event["refs"] == {"pdf_url": "https://files.example/inv-42.pdf"}
    assert (event["source"], event["channel"], event["delivery_id"]) == ("billing", "webhook", "dlv-1")
    # Not the whole document: nothing undeclared reaches the run.
    assert "Ada" not in json.dumps(run.payload) and "large document" not in json.dumps(run.payload)
    assert EventDelivery.objects.get().run_id == run.id
    assert metric("billing", "accepted") == 1


def test_it_answers_the_same_delivery_again_with_the_same_run(client, source):
    first = post(client, EVENT).json()
    # The sender retries: same delivery id, same body, a fresh timestamp and signature.
    again = post(client, EVENT, ts=str(int(time.time()) + 1))

    assert again.status_code == 200
    assert again.json() == {
        "outcome": "redelivery",
        "run_id": first["run_id"],
        "biz_key": first["biz_key"],
        "created": False,
    }
    assert TaskRun.objects.count() == 1
    assert EventDelivery.objects.count() == 1
    assert metric("billing", "redelivery") == 1


def test_it_answers_a_new_delivery_of_the_same_business_event_with_the_existing_run(client, source):
    first = post(client, EVENT).json()
    other = post(client, {**EVENT, "amount": 1}, delivery="dlv-2")

    assert other.status_code == 200
    assert other.json()["outcome"] == "duplicate" and other.json()["run_id"] == first["run_id"]
    run = TaskRun.objects.get()
    assert run.dedupe_hits == 1
    assert run.payload["event"]["snapshot"]["amount"] == 120.5  # the first event's snapshot stays
    assert metric("billing", "duplicate") == 1


def test_it_runs_a_new_version_of_the_object_as_a_new_run(client, source):
    post(client, EVENT)
    response = post(client, {**EVENT, "version": 4}, delivery="dlv-2")
    assert response.status_code == 202
    assert sorted(TaskRun.objects.values_list("biz_key", flat=True)) == [
        f"rule/{source.rule_id}/event/invoice-paid:inv-42:paid:3",
        f"rule/{source.rule_id}/event/invoice-paid:inv-42:paid:4",
    ]


def _replayed(client, source):
    post(client, EVENT)
    return post(client, {**EVENT, "version": 4})  # the same delivery id with another body


def _disabled(client, source):
    TriggerSource.objects.filter(pk=source.pk).update(enabled=False)
    return post(client, EVENT)


def _paused_rule(client, source):
    TriggerRule.objects.filter(pk=source.rule_id).update(enabled=False)
    return post(client, EVENT)


def _wrong_kind(client, source):
    TriggerSource.objects.filter(pk=source.pk).update(kind="queue")
    return post(client, EVENT)


def _secret_unset(client, source):
    TriggerSource.objects.filter(pk=source.pk).update(secret_env="HOOK_NOT_SET_ANYWHERE")
    return post(client, EVENT)


REFUSALS = {
    # name: (send, status, code, source_name the metric is counted under)
    "bad signature": (lambda c, s: post(c, EVENT, secret="wrong-secret"), 401, "bad_signature", "billing"),
    "tampered body": (
        lambda c, s: post(c, EVENT, signature=sign(SECRET, str(int(time.time())), b"{}")),
        401,
        "bad_signature",
        "billing",
    ),
    "stale timestamp": (
        lambda c, s: post(c, EVENT, ts=str(int(time.time()) - 400)),
        401,
        "timestamp_too_old",
        "billing",
    ),
    "future timestamp": (
        lambda c, s: post(c, EVENT, ts=str(int(time.time()) + 400)),
        401,
        "timestamp_too_new",
        "billing",
    ),
    "malformed timestamp": (lambda c, s: post(c, EVENT, ts="yesterday"), 400, "bad_timestamp", "billing"),
    "replayed delivery id": (_replayed, 409, "replayed_delivery", "billing"),
    "unknown source": (lambda c, s: post(c, EVENT, source="no-such-source"), 404, "unknown_source", ""),
    "disabled source": (_disabled, 403, "source_disabled", "billing"),
    "not a webhook source": (_wrong_kind, 403, "wrong_channel", "billing"),
    "paused rule": (_paused_rule, 409, "rule_paused", "billing"),
    "oversized body": (lambda c, s: post(c, {**EVENT, "pad": "x" * 5000}), 413, "body_too_large", "billing"),
    "missing signature": (
        lambda c, s: post(c, EVENT, drop=[events.HEADER_SIGNATURE]),
        400,
        "missing_header",
        "billing",
    ),
    "missing delivery id": (
        lambda c, s: post(c, EVENT, drop=[events.HEADER_DELIVERY]),
        400,
        "missing_header",
        "billing",
    ),
    "bad delivery id": (lambda c, s: post(c, EVENT, delivery="has space"), 400, "bad_delivery_id", "billing"),
    "malformed json": (lambda c, s: post(c, b"{not json"), 400, "malformed_json", "billing"),
    "missing object id": (lambda c, s: post(c, {"action": "paid", "version": 1}), 422, "invalid_payload", "billing"),
    "missing version": (lambda c, s: post(c, {"object_id": "1", "action": "paid"}), 422, "invalid_payload", "billing"),
    "secret not configured": (_secret_unset, 503, "secret_unavailable", "billing"),
}


AFTER_AUTHENTICATION = {"replayed_delivery", "rule_paused", "malformed_json", "invalid_payload"}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_it_refuses_with_its_own_reason_runs_nothing_and_counts_it(client, source, case):
    send, status, code, metric_source = REFUSALS[case]

    response = send(client, source)

    assert response.status_code == status, response.content
    body = response.json()
    assert body["type"] == PROBLEM + code.replace("_", "-") and body["detail"] and body["status"] == status
    # The replay case makes one run first, with the original delivery; the refused one adds none.
    assert TaskRun.objects.count() == (1 if code == "replayed_delivery" else 0)
    refusal = EventRefusal.objects.get()
    assert (refusal.reason, refusal.status) == (code, status)
    assert metric(metric_source, code) == 1
    # Signed and fresh: an auditable row. Before that: a sample row, and counted per hour.
    assert refusal.authenticated == (code in AFTER_AUTHENTICATION)
    counted = RefusalCount.objects.filter(source_name=metric_source, reason=code).values_list("count", flat=True)
    assert list(counted) == ([] if refusal.authenticated else [1])
    assert SECRET not in refusal.detail and SECRET not in json.dumps(body)


def test_it_refuses_an_oversized_body_that_lies_about_its_length(source):
    # Content-Length says little; the body read is still capped at the limit + 1 byte.
    reads = []

    def read(n):
        reads.append(n)
        return b"x" * n

    result = webhook_intake(source_name="billing", headers={}, read_body=read, content_length=None, now=timezone.now())
    assert (result.status, result.outcome) == (413, "body_too_large")
    assert reads == [4097]


def test_it_answers_other_methods_with_json_405(client, source):
    response = client.get("/hooks/billing/")
    assert response.status_code == 405
    assert response.json()["type"] == PROBLEM + "method-not-allowed"
    assert response["Allow"] == "POST"


def test_it_accepts_the_url_with_and_without_a_trailing_slash(client, source):
    assert reverse("event-webhook", kwargs={"source": "billing"}) == "/hooks/billing/"
    raw = json.dumps(EVENT).encode()
    ts = str(int(time.time()))
    response = client.post(
        "/hooks/billing",
        data=raw,
        content_type="application/json",
        headers={
            events.HEADER_TIMESTAMP: ts,
            events.HEADER_DELIVERY: "d",
            events.HEADER_SIGNATURE: sign(SECRET, ts, raw, "d"),
        },
    )
    assert response.status_code == 202


def test_it_refuses_a_body_the_client_stops_sending(source):
    def read(n):
        raise OSError("connection reset")

    result = webhook_intake(source_name="billing", headers={}, read_body=read, content_length=10, now=timezone.now())
    assert (result.status, result.outcome) == (400, "body_unreadable")
    assert not TaskRun.objects.exists()
