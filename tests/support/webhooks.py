"""A signed webhook delivery to the billing source, as a sender would post it through the test client.

`billing_source` is the fixture: an event rule's webhook source whose secret is in the environment; `post`
signs and sends a body to it (or to another source), with any header dropped or forged.
"""

import json
import time

import pytest

from tasks.models import TriggerSource
from tasks.rules import events, signatures
from tests.support.rules import make_rule

SECRET = "hs-test-billing-0123456789abcdefghijklmnop"
SECRET_ENV = "HARNESS_SECRET_TEST_BILLING"
EVENT = {
    "object_id": "inv-42",
    "action": "paid",
    "version": 3,
    "amount": 120.5,
    "customer": {"tier": "gold", "name": "Ada", "history": [1, 2, 3]},
    "pdf_url": "https://files.example/inv-42.pdf",
    "document": {"lines": ["a very large document"] * 50},
}


@pytest.fixture
def billing_source(monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    rule = make_rule("invoice-paid", kind="event", timezone="Europe/Berlin")
    return TriggerSource.objects.create(
        name="billing",
        kind="webhook",
        identity="svc:billing",
        rule=rule,
        secret_env=SECRET_ENV,
        snapshot_fields=["amount", "customer.tier"],
        reference_fields=["pdf_url"],
        max_body_bytes=4096,
    )


def sign(secret, ts, raw, delivery="dlv-1"):
    key = secret.encode()
    return signatures.sign(signatures.HARNESS, key, timestamp=ts, delivery_id=delivery, body=raw)


def post(client, body, *, source="billing", delivery="dlv-1", ts=None, secret=SECRET, signature=None, drop=()):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    ts = str(int(time.time())) if ts is None else ts
    headers = {
        events.HEADER_TIMESTAMP: ts,
        events.HEADER_DELIVERY: delivery,
        events.HEADER_SIGNATURE: signature or sign(secret, ts, raw, delivery),
    }
    for name in drop:
        headers.pop(name)
    return client.post(f"/hooks/{source}/", data=raw, content_type="application/json", headers=headers)
