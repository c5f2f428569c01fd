"""Signature schemes, rotation and granted, strong secrets for webhook sources.

Standard Webhooks requests are signed by the `standardwebhooks` library itself (a client nobody here
wrote); harness v2 requests by the documented recipe, by hand.
"""

import base64
import hashlib
import hmac
import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from standardwebhooks import Webhook

from harness_site.api.problems import TYPE_PREFIX as PROBLEM
from runs.models import TaskRun
from tasks.models import EventRefusal, TriggerRule, TriggerSource

pytestmark = pytest.mark.django_db

OLD_ENV, NEW_ENV = "HARNESS_SECRET_TEST_HOOK_OLD", "HARNESS_SECRET_TEST_HOOK_NEW"
OLD = "whsec_" + base64.b64encode(hashlib.sha256(b"old secret").digest()).decode()
NEW = "whsec_" + base64.b64encode(hashlib.sha256(b"new secret").digest()).decode()
OTHER = "whsec_" + base64.b64encode(hashlib.sha256(b"someone else").digest()).decode()
HARNESS_SECRET = "hs-" + hashlib.sha256(b"harness secret").hexdigest()  # 67 characters
EVENT = {"object_id": "inv-42", "action": "paid", "version": 3}


def make_source(scheme="standard", secret_env=OLD_ENV, secret_env_next="", name="billing") -> TriggerSource:
    rule, _ = TriggerRule.objects.get_or_create(
        name="invoice-paid",
        defaults={
            "reason": "test",
            "kind": "event",
            "timezone": "UTC",
            "dedupe_key_template": "{rule}:{object_id}:{action}:{version}",
            "skill": "harness.noop",
        },
    )
    source = TriggerSource(
        name=name,
        kind="webhook",
        identity="svc:billing",
        rule=rule,
        signature_scheme=scheme,
        secret_env=secret_env,
        secret_env_next=secret_env_next,
    )
    source.full_clean()
    source.save()
    return source


@pytest.fixture
def secrets_set(monkeypatch):
    monkeypatch.setenv(OLD_ENV, OLD)
    monkeypatch.setenv(NEW_ENV, NEW)


def standard_post(client, *signers, msg_id="msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", at=None, body=None, send_id=None):
    """POST signed by the standardwebhooks library with each secret in `signers` (one signature each)."""
    raw = json.dumps(EVENT if body is None else body)
    at = at or datetime.now(tz=UTC)
    signature = " ".join(Webhook(secret).sign(msg_id, at, raw) for secret in signers)
    headers = {
        "webhook-id": send_id or msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature,
    }
    return client.post("/hooks/billing/", data=raw.encode(), content_type="application/json", headers=headers)


def test_it_accepts_a_request_signed_by_the_standardwebhooks_library(client, secrets_set):
    make_source()
    response = standard_post(client, OLD)
    assert response.status_code == 202, response.content
    run = TaskRun.objects.get()
    assert run.payload["event"]["delivery_id"] == "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
    # The library itself accepts what we accept: same secret, same headers, same bytes.
    assert not EventRefusal.objects.exists()


def test_it_accepts_the_old_secret_the_new_one_and_both_listed_during_a_rotation(client, secrets_set):
    make_source(secret_env_next=NEW_ENV)
    assert standard_post(client, OLD, msg_id="msg_old").status_code == 202
    assert standard_post(client, NEW, msg_id="msg_new", body={**EVENT, "version": 4}).status_code == 202
    both = standard_post(client, OTHER, NEW, msg_id="msg_both", body={**EVENT, "version": 5})
    assert both.status_code == 202, both.content
    assert TaskRun.objects.count() == 3


def test_it_refuses_a_third_secret_an_expired_signature_and_a_changed_id(client, secrets_set):
    make_source(secret_env_next=NEW_ENV)
    wrong = standard_post(client, OTHER)
    expired = standard_post(client, OLD, at=datetime.now(tz=UTC) - timedelta(minutes=6))
    # The webhook-id is signed: the same signature under another id does not verify.
    moved = standard_post(client, OLD, msg_id="msg_a", send_id="msg_b")

    assert (wrong.status_code, wrong.json()["type"]) == (401, PROBLEM + "bad-signature")
    assert (expired.status_code, expired.json()["type"]) == (401, PROBLEM + "timestamp-too-old")
    assert (moved.status_code, moved.json()["type"]) == (401, PROBLEM + "bad-signature")
    assert not TaskRun.objects.exists()


def test_the_new_secret_alone_works_once_the_rotation_is_done(client, secrets_set):
    source = make_source(secret_env_next=NEW_ENV)
    source.secret_env, source.secret_env_next = NEW_ENV, ""
    source.full_clean()
    source.save()
    assert standard_post(client, OLD).status_code == 401
    assert standard_post(client, NEW).status_code == 202


def harness_post(client, secret, *, delivery="dlv-1", signed_delivery=None, scheme_v1=False):
    raw = json.dumps(EVENT).encode()
    ts = str(int(time.time()))
    if scheme_v1:
        signature = "sha256=" + hmac.new(secret.encode(), ts.encode() + b"." + raw, hashlib.sha256).hexdigest()
    else:
        signed = f"{ts}.{signed_delivery or delivery}.".encode() + raw
        signature = "v2=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    headers = {"X-Harness-Timestamp": ts, "X-Harness-Delivery": delivery, "X-Harness-Signature": signature}
    return client.post("/hooks/billing/", data=raw, content_type="application/json", headers=headers)


def test_the_harness_scheme_signs_the_delivery_id(client, monkeypatch):
    monkeypatch.setenv(OLD_ENV, HARNESS_SECRET)
    make_source(scheme="harness")
    moved = harness_post(client, HARNESS_SECRET, delivery="dlv-2", signed_delivery="dlv-1")
    assert (moved.status_code, moved.json()["type"]) == (401, PROBLEM + "bad-signature")
    assert harness_post(client, HARNESS_SECRET, scheme_v1=True).status_code == 401  # v1 is not v2
    assert harness_post(client, HARNESS_SECRET).status_code == 202


def test_a_harness_v1_source_keeps_todays_senders_working(client, monkeypatch):
    monkeypatch.setenv(OLD_ENV, HARNESS_SECRET)
    make_source(scheme="harness-v1")
    assert harness_post(client, HARNESS_SECRET, scheme_v1=True).status_code == 202


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"secret_env": "HOME"}, "secret_env"),
        ({"secret_env": "SECRET_KEY"}, "secret_env"),
        ({"secret_env_next": "DATABASE_URL"}, "secret_env_next"),
        ({"secret_env_next": OLD_ENV}, "secret_env_next"),  # the same variable twice is no rotation
    ],
)
def test_a_source_can_only_name_a_granted_secret(over, field):
    with pytest.raises(ValidationError) as exc:
        make_source(**over)
    assert field in exc.value.message_dict


def test_it_never_reads_an_ungranted_variable_even_if_the_row_names_one(client, monkeypatch):
    # A row written around the model's validation (an old row, a raw update) still cannot pick HOME.
    home = "whsec_" + base64.b64encode(hashlib.sha256(b"home").digest()).decode()
    monkeypatch.setenv("HOME", home)
    source = make_source()
    TriggerSource.objects.filter(pk=source.pk).update(secret_env="HOME")
    response = standard_post(client, home)
    assert (response.status_code, response.json()["type"]) == (503, PROBLEM + "secret-unavailable")
    assert not TaskRun.objects.exists()


@pytest.mark.parametrize(
    ("scheme", "value"),
    [
        ("standard", "whsec_" + base64.b64encode(b"short").decode()),
        ("standard", "whsec_" + base64.b64encode(b"a" * 32).decode()),
        ("standard", "not base64 at all!"),
        ("harness", "password123"),
        ("harness", "0" * 64),
    ],
)
def test_a_weak_secret_is_our_fault_503_and_a_warning_in_the_admin(client, admin_client, monkeypatch, scheme, value):
    monkeypatch.setenv(OLD_ENV, value)
    source = make_source(scheme=scheme)
    response = harness_post(client, value) if scheme == "harness" else standard_post(client, OLD)
    assert (response.status_code, response.json()["type"]) == (503, PROBLEM + "secret-weak")
    assert value not in response.content.decode() and OLD_ENV not in response.content.decode()
    page = admin_client.get(reverse("admin:tasks_triggersource_change", args=[source.pk])).content.decode()
    assert f"${OLD_ENV} TOO WEAK" in page and value not in page


def test_an_unset_next_secret_is_503_until_it_is_deployed(client, monkeypatch):
    monkeypatch.setenv(OLD_ENV, OLD)
    make_source(secret_env_next=NEW_ENV)
    response = standard_post(client, OLD)
    assert (response.status_code, response.json()["type"]) == (503, PROBLEM + "secret-unavailable")
    monkeypatch.setenv(NEW_ENV, NEW)
    assert standard_post(client, OLD).status_code == 202


def form(rule, **over):
    return {
        "name": "from-admin",
        "enabled": "on",
        "kind": "webhook",
        "identity": "svc:x",
        "rule": rule.pk,
        "signature_scheme": "standard",
        "secret_env": OLD_ENV,
        "secret_env_next": NEW_ENV,
        "object_id_path": "object_id",
        "action_path": "action",
        "version_path": "version",
        "snapshot_fields": "[]",
        "reference_fields": "[]",
        "max_body_bytes": "1024",
        "watch_dir": "",
        "settle_seconds": "5",
        **over,
    }


def test_the_admin_saves_a_standard_source_with_two_secrets_and_refuses_an_ungranted_name(admin_client, secrets_set):
    rule = make_source().rule
    url = reverse("admin:tasks_triggersource_add")
    refused = admin_client.post(url, form(rule, secret_env_next="HOME"))
    assert refused.status_code == 200 and "not granted" in refused.content.decode()
    assert not TriggerSource.objects.filter(name="from-admin").exists()

    saved = admin_client.post(url, form(rule))
    assert saved.status_code == 302, saved.content.decode()[:2000]
    source = TriggerSource.objects.get(name="from-admin")
    assert (source.signature_scheme, source.secret_env, source.secret_env_next) == ("standard", OLD_ENV, NEW_ENV)
    page = admin_client.get(reverse("admin:tasks_triggersource_change", args=[source.pk])).content.decode()
    assert f"${OLD_ENV} set" in page and f"${NEW_ENV} set" in page and OLD not in page and NEW not in page
