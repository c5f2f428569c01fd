"""Python intake (tasks.triggers.events.event_intake), event rules and the event admin pages, on the real database."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from runs.models import TaskRun
from tasks.models import EventDelivery, EventMetric, EventRefusal, TriggerRule, TriggerSource
from tasks.triggers.events import event_intake, event_records_prune
from tasks.triggers.scheduler import scheduler_tick
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
PAYLOAD = {"object_id": "order-7", "action": "shipped", "version": "2", "carrier": "dhl", "label": {"pdf": "…"}}


def event_rule(name="order-events", **over) -> TriggerRule:
    """An event rule in Shanghai, one run per object, action and version."""
    return make_rule(name, **{"kind": "event", "timezone": "Asia/Shanghai", **over})


def make_source(name="orders", kind="python", **over) -> TriggerSource:
    values = {"identity": f"svc:{name}", "rule": over.pop("rule", None) or event_rule(), **over}
    source = TriggerSource(name=name, kind=kind, **values)
    source.full_clean()
    source.save()
    return source


def test_it_accepts_an_event_from_python_and_dedupes_it_by_business_key():
    make_source(snapshot_fields=["carrier"])

    first = event_intake(source="orders", payload=PAYLOAD, now=NOW)
    again = event_intake(source="orders", payload=PAYLOAD, now=NOW + timedelta(minutes=1))

    assert (first.status, first.outcome, first.created) == (202, "accepted", True)
    assert (again.status, again.outcome, again.run_id) == (200, "duplicate", first.run_id)
    run = TaskRun.objects.get()
    assert (run.source, run.triggered_by, run.biz_key) == (
        "event",
        "svc:orders",
        f"rule/{run.rule_id}/event/order-events:order-7:shipped:2",
    )
    assert run.payload["event"]["snapshot"] == {"carrier": "dhl"}
    assert run.payload["event"]["channel"] == "python"
    assert "rule_version" in run.payload and run.retry_policy() == run.rule.run_policy().retry  # as the scheduler's


def test_it_remembers_a_python_delivery_id_like_a_webhooks():
    make_source()
    first = event_intake(source="orders", payload=PAYLOAD, now=NOW, delivery_id="m-1")
    again = event_intake(source="orders", payload=dict(reversed(PAYLOAD.items())), now=NOW, delivery_id="m-1")
    replay = event_intake(source="orders", payload={**PAYLOAD, "version": "3"}, now=NOW, delivery_id="m-1")

    assert (again.status, again.outcome, again.run_id) == (200, "redelivery", first.run_id)  # key order is not a change
    assert (replay.status, replay.outcome) == (409, "replayed_delivery")
    assert TaskRun.objects.count() == 1


@pytest.mark.parametrize(
    ("payload", "kwargs", "code", "status"),
    [
        (["not", "an", "object"], {}, "malformed_json", 400),
        ({**PAYLOAD, "pad": "x" * 70000}, {}, "body_too_large", 413),
        ({**PAYLOAD, "object_id": None}, {}, "invalid_payload", 422),
        (PAYLOAD, {"source": "nope"}, "unknown_source", 404),
        (PAYLOAD, {"channel": "queue"}, "wrong_channel", 403),
        (PAYLOAD, {"delivery_id": "bad id"}, "bad_delivery_id", 400),
    ],
)
def test_it_refuses_bad_python_events_with_a_reason_and_no_run(payload, kwargs, code, status):
    make_source()
    result = event_intake(**{"source": "orders", "payload": payload, "now": NOW, **kwargs})

    assert (result.status, result.outcome, result.ok) == (status, code, False)
    assert result.as_json() == {"error": code, "detail": result.detail}
    assert not TaskRun.objects.exists()
    assert EventRefusal.objects.get().reason == code
    assert EventMetric.objects.get(outcome=code).count == 1


def test_it_renders_business_date_in_the_rule_zone():
    make_source(rule=event_rule(dedupe_key_template="{rule}:{object_id}:{business_date}", event_key_by_date=True))
    # 2026-12-01 20:00 UTC is already 2026-12-02 in Shanghai.
    result = event_intake(source="orders", payload=PAYLOAD, now=NOW.replace(hour=20))
    assert result.biz_key.endswith("/event/order-events:order-7:2026-12-02")


def test_it_keeps_event_rules_out_of_the_scheduler_tick():
    rule = event_rule()
    assert rule.next_fire_at is None
    assert scheduler_tick(now=NOW + timedelta(days=1)).claimed == 0


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"dedupe_key_template": "{rule}:{slot}"}, "dedupe_key_template"),
        ({"dedupe_key_template": "{rule}:{action}"}, "dedupe_key_template"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
    ],
)
def test_it_rejects_an_event_rule_that_cannot_key_its_events(over, field):
    with pytest.raises(ValidationError) as exc:
        event_rule(**over)
    assert field in exc.value.message_dict


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"kind": "webhook", "secret_env": ""}, "secret_env"),
        ({"kind": "webhook", "secret_env": "not-an-env-name"}, "secret_env"),
        ({"kind": "webhook", "secret_env": "HOME"}, "secret_env"),
        ({"kind": "file", "watch_dir": "relative/dir"}, "watch_dir"),
        ({"snapshot_fields": {"amount": 1}}, "snapshot_fields"),
        ({"reference_fields": ["ok", "bad path"]}, "reference_fields"),
        ({"object_id_path": ""}, "object_id_path"),
    ],
)
def test_it_rejects_a_source_that_cannot_work(over, field):
    with pytest.raises(ValidationError) as exc:
        make_source(**over)
    assert field in exc.value.message_dict


def test_it_rejects_a_source_pointing_at_a_scheduled_rule():
    cron = make_rule("cron-rule", kind="cron", cron="0 9 * * *")
    with pytest.raises(ValidationError) as exc:
        make_source(rule=cron)
    assert "rule" in exc.value.message_dict


def test_it_prunes_old_event_records_only():
    make_source()
    event_intake(source="orders", payload=PAYLOAD, now=NOW - timedelta(days=40))
    event_intake(source="nope", payload=PAYLOAD, now=NOW - timedelta(days=40))
    event_intake(source="orders", payload={**PAYLOAD, "version": "9"}, now=NOW)
    assert event_records_prune(now=NOW) == 2
    assert EventDelivery.objects.count() == 1 and not EventRefusal.objects.exists()
    assert TaskRun.objects.count() == 2  # runs are not event records


def test_it_shows_sources_deliveries_refusals_and_counters_in_the_admin_without_the_secret(admin_client, monkeypatch):
    monkeypatch.setenv("HARNESS_SECRET_HOOK_ADMIN", "do-not-show-me-0000-abcdefghijklmnopqrstuvwxyz")
    source = make_source(name="hooked", kind="webhook", secret_env="HARNESS_SECRET_HOOK_ADMIN")
    make_source(name="orders", rule=source.rule)
    event_intake(source="orders", payload=PAYLOAD, now=NOW)
    event_intake(source="ghost", payload=PAYLOAD, now=NOW)

    pages = [
        reverse("admin:tasks_triggersource_changelist"),
        reverse("admin:tasks_triggersource_change", args=[source.pk]),
        reverse("admin:tasks_eventdelivery_changelist"),
        reverse("admin:tasks_eventdelivery_change", args=[EventDelivery.objects.get().pk]),
        reverse("admin:tasks_eventrefusal_changelist"),
        reverse("admin:tasks_eventrefusal_change", args=[EventRefusal.objects.get().pk]),
        reverse("admin:tasks_eventmetric_changelist"),
    ]
    for url in pages:
        response = admin_client.get(url)
        assert response.status_code == 200, url
        assert "do-not-show-me" not in response.content.decode()
    text = admin_client.get(pages[1]).content.decode()
    assert "$HARNESS_SECRET_HOOK_ADMIN set" in text and "/hooks/hooked/" in text
    assert "unknown_source" in admin_client.get(pages[4]).content.decode()
    assert "(unknown sources)" in admin_client.get(pages[6]).content.decode()
    assert admin_client.get(reverse("admin:tasks_eventrefusal_add")).status_code == 403
    rules = admin_client.get(reverse("admin:tasks_triggerrule_changelist")).content.decode()
    assert "on event: hooked, orders" in rules


def test_it_shows_a_bad_source_as_a_form_error_and_saves_nothing(admin_client):
    rule = event_rule()
    response = admin_client.post(
        reverse("admin:tasks_triggersource_add"),
        {
            "name": "bad",
            "enabled": "on",
            "kind": "webhook",
            "identity": "svc:x",
            "rule": rule.pk,
            "secret_env": "",
            "object_id_path": "object_id",
            "action_path": "action",
            "version_path": "version",
            "snapshot_fields": "[]",
            "reference_fields": "[]",
            "max_body_bytes": "1024",
            "watch_dir": "",
            "settle_seconds": "5",
        },
    )
    assert response.status_code == 200
    assert "NAME of an environment variable" in response.content.decode()
    assert not TriggerSource.objects.exists()


def test_it_stores_only_plain_json_from_python_payloads():
    make_source(snapshot_fields=["at"])
    result = event_intake(source="orders", payload={**PAYLOAD, "at": datetime(2026, 1, 1, tzinfo=UTC)}, now=NOW)
    assert result.created
    snapshot = TaskRun.objects.get().payload["event"]["snapshot"]
    assert json.loads(json.dumps(snapshot)) == {"at": "2026-01-01 00:00:00+00:00"}
