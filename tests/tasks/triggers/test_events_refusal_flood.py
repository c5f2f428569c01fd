"""Refusals before authentication are counted, not stored one by one.

1,000 unauthenticated refused requests (bad signatures, unknown and made-up sources, missing headers,
stale timestamps, oversized bodies) through the real URL and the real database must add a bounded
number of rows to every table; each refusal is still counted. A refusal after authentication (signed,
fresh, then refused) stays a row each. Marked `backend`: run on SQLite and on PostgreSQL.
"""

import json
import threading
import time

import pytest
from django.apps import apps
from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from harness_site.api.problems import TYPE_PREFIX as PROBLEM
from tasks.models import EventMetric, EventRefusal, RefusalCount, TriggerRule, TriggerSource
from tasks.rules import signatures
from tasks.triggers.events import REFUSAL_SAMPLE, webhook_intake
from tests.support.rules import make_rule

pytestmark = [pytest.mark.django_db, pytest.mark.backend]

SECRET = "hs-flood-" + "0123456789abcdefghijklmnopqrstuvwxyz"
SECRET_ENV = "HARNESS_SECRET_TEST_FLOOD"
EVENT = json.dumps({"object_id": "inv-1", "action": "paid", "version": 1}).encode()


@pytest.fixture
def source(monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    rule = make_rule("flooded", kind="event")
    return TriggerSource.objects.create(
        name="billing", kind="webhook", identity="svc:billing", rule=rule, secret_env=SECRET_ENV, max_body_bytes=1024
    )


def rows() -> dict[str, int]:
    return {m._meta.label: m.objects.count() for m in apps.get_models()}


def send(client, i: int):
    ts = str(int(time.time()))
    good = {
        "X-Harness-Timestamp": ts,
        "X-Harness-Delivery": f"d-{i}",
        "X-Harness-Signature": signatures.sign(
            signatures.HARNESS, SECRET.encode(), timestamp=ts, delivery_id=f"d-{i}", body=EVENT
        ),
    }
    kind = i % 5
    if kind == 0:  # a forged signature
        headers, path, body = {**good, "X-Harness-Signature": "v2=" + f"{i:064x}"}, "/hooks/billing/", EVENT
    elif kind == 1:  # a made-up source name per request
        headers, path, body = good, f"/hooks/made-up-{i}/", EVENT
    elif kind == 2:  # no signature at all
        headers, path, body = {k: v for k, v in good.items() if k != "X-Harness-Signature"}, "/hooks/billing/", EVENT
    elif kind == 3:  # a captured request replayed long after
        old = str(int(time.time()) - 3600)
        signature = signatures.sign(
            signatures.HARNESS, SECRET.encode(), timestamp=old, delivery_id=f"d-{i}", body=EVENT
        )
        headers = {**good, "X-Harness-Timestamp": old, "X-Harness-Signature": signature}
        path, body = "/hooks/billing/", EVENT
    else:  # oversized
        headers, path, body = good, "/hooks/billing/", b"x" * 2000
    return client.post(path, data=body, content_type="application/json", headers=headers)


# Five times the sample per reason: enough that an unbounded table would show.
FLOOD = 5 * 5 * REFUSAL_SAMPLE


def test_a_flood_of_unauthenticated_refusals_adds_a_bounded_number_of_rows(client, source):
    before = rows()
    statuses = [send(client, i).status_code for i in range(FLOOD)]
    after = rows()

    assert sorted(set(statuses)) == [400, 401, 404, 413]
    grown = {label: after[label] - before[label] for label in after if after[label] != before[label]}
    # 5 reasons x REFUSAL_SAMPLE sample rows, one counter per reason and hour (two if the hour turns),
    # one metric per reason; nothing else.
    assert sum(grown.values()) <= 5 * REFUSAL_SAMPLE + 2 * 5 + 5, grown
    assert set(grown) <= {"tasks.EventRefusal", "tasks.RefusalCount", "tasks.EventMetric"}, grown
    assert not EventRefusal.objects.filter(authenticated=True).exists()
    # Every refusal is still counted.
    assert RefusalCount.objects.aggregate(n=Sum("count"))["n"] == FLOOD
    assert EventMetric.objects.exclude(outcome="accepted").aggregate(n=Sum("count"))["n"] == FLOOD
    by_reason = dict(RefusalCount.objects.values_list("reason").annotate(n=Sum("count")))
    per_reason = FLOOD // 5
    assert by_reason == {
        "bad_signature": per_reason,
        "unknown_source": per_reason,
        "missing_header": per_reason,
        "timestamp_too_old": per_reason,
        "body_too_large": per_reason,
    }
    # Unknown names share one counter row per hour, whatever name was made up.
    assert set(RefusalCount.objects.filter(reason="unknown_source").values_list("source_name", flat=True)) == {""}


def test_the_sample_keeps_the_newest_refusals(client, source):
    for i in range(0, 5 * (REFUSAL_SAMPLE + 3), 5):  # forged signatures only
        send(client, i)
    kept = list(
        EventRefusal.objects.filter(reason="bad_signature").order_by("id").values_list("delivery_id", flat=True)
    )
    newest = [f"d-{i}" for i in range(0, 5 * (REFUSAL_SAMPLE + 3), 5)][-REFUSAL_SAMPLE:]
    assert kept == newest


def test_authenticated_refusals_stay_one_row_each(client, source):
    TriggerRule.objects.filter(pk=source.rule_id).update(enabled=False)
    for i in range(REFUSAL_SAMPLE + 5):
        ts = str(int(time.time()))
        signature = signatures.sign(
            signatures.HARNESS, SECRET.encode(), timestamp=ts, delivery_id=f"ok-{i}", body=EVENT
        )
        headers = {"X-Harness-Timestamp": ts, "X-Harness-Delivery": f"ok-{i}", "X-Harness-Signature": signature}
        response = client.post("/hooks/billing/", data=EVENT, content_type="application/json", headers=headers)
        assert response.json()["type"] == PROBLEM + "rule-paused"
    assert EventRefusal.objects.filter(authenticated=True, reason="rule_paused").count() == REFUSAL_SAMPLE + 5
    assert not RefusalCount.objects.exists()


def test_the_admin_shows_the_counts_where_refusals_are_listed(client, admin_client, source):
    for i in range(12):
        send(client, i)
    page = admin_client.get("/admin/tasks/eventrefusal/").content.decode()
    assert "counted-refusals" in page and "bad_signature" in page
    assert admin_client.get("/admin/tasks/refusalcount/").status_code == 200
    source_page = admin_client.get(f"/admin/tasks/triggersource/{source.pk}/change/").content.decode()
    assert "Refused before authentication" in source_page
    zh = admin_client.get("/admin/tasks/eventrefusal/", headers={"accept-language": "zh-hans"}).content.decode()
    assert "认证之前被拒绝" in zh and "最近 24 小时" in zh and "次数" in zh


def test_concurrent_refusals_in_a_new_hour_share_one_counter(transactional_db):
    """Several intakes create the hour's counter at once: insert-and-catch, so none is lost or doubled."""
    now = timezone.now()
    barrier = threading.Barrier(4)
    errors = []

    def go():
        try:
            barrier.wait(timeout=10)
            for _ in range(10):
                result = webhook_intake(
                    source_name="nobody-here", headers={}, read_body=lambda n: b"", content_length=0, now=now
                )
                assert result.outcome == "unknown_source"
        except Exception as exc:  # reported below, with the thread's error
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert list(RefusalCount.objects.values_list("source_name", "reason", "count")) == [("", "unknown_source", 40)]
    # Concurrent trims each see only committed rows, so the sample may overshoot by the other writers
    # (at most 3 here); the next refusal trims it back.
    assert REFUSAL_SAMPLE <= EventRefusal.objects.count() <= REFUSAL_SAMPLE + 3
    webhook_intake(source_name="nobody-here", headers={}, read_body=lambda n: b"", content_length=0, now=now)
    assert EventRefusal.objects.count() == REFUSAL_SAMPLE


def test_a_replayed_refused_request_is_counted_not_stored_again(client, source):
    # Anyone holding one captured signed request could replay it within the freshness window; a
    # refused one (here: the rule is paused) must not add a row per replay. The first stays auditable.
    TriggerRule.objects.filter(pk=source.rule_id).update(enabled=False)
    ts = str(int(time.time()))
    signature = signatures.sign(signatures.HARNESS, SECRET.encode(), timestamp=ts, delivery_id="cap-1", body=EVENT)
    headers = {"X-Harness-Timestamp": ts, "X-Harness-Delivery": "cap-1", "X-Harness-Signature": signature}
    before = rows()

    first_hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    answers = {
        client.post("/hooks/billing/", data=EVENT, content_type="application/json", headers=headers).json()["type"]
        for _ in range(200)
    }
    # Counters are per hour: requests that straddle one count in both.
    hours = 1 + (timezone.now().replace(minute=0, second=0, microsecond=0) != first_hour)

    grown = {label: n - before[label] for label, n in rows().items() if n != before[label]}
    assert answers == {PROBLEM + "rule-paused"}
    assert EventRefusal.objects.filter(authenticated=True, delivery_id="cap-1").count() == 1
    assert RefusalCount.objects.filter(reason="rule_paused").aggregate(n=Sum("count"))["n"] == 199  # the repeats
    assert sum(grown.values()) <= 2 + hours, grown  # the row, a counter per hour, one metric
