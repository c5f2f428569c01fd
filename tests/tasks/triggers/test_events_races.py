"""Concurrent copies of one event, on two real connections: exactly one run, one delivery per id."""

import threading
from datetime import UTC, datetime

import pytest
from django.db import connection

from runs.models import TaskRun
from tasks.models import EventDelivery, TriggerSource
from tasks.triggers.events import event_intake
from tests.support.rules import make_rule

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
PAYLOAD = {"object_id": "o-1", "action": "created", "version": 1}


def race(*calls):
    """Run the calls at once on their own threads (own database connections); return their results."""
    barrier = threading.Barrier(len(calls))
    results = [None] * len(calls)

    def go(i, kwargs):
        try:
            barrier.wait(timeout=10)
            results[i] = event_intake(now=NOW, **kwargs)
        finally:
            connection.close()

    threads = [threading.Thread(target=go, args=(i, kw)) for i, kw in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


@pytest.fixture
def source(transactional_db):
    rule = make_rule("race", kind="event")
    return TriggerSource.objects.create(name="racer", kind="python", identity="svc:r", rule=rule)


def test_it_gives_two_concurrent_copies_of_one_delivery_one_run(source):
    results = race(*[{"source": "racer", "payload": PAYLOAD, "delivery_id": "d-1"}] * 2)

    assert sorted(r.outcome for r in results) == ["accepted", "redelivery"]
    assert len({r.run_id for r in results}) == 1
    assert TaskRun.objects.count() == 1 and EventDelivery.objects.count() == 1


def test_it_gives_two_concurrent_deliveries_of_one_business_event_one_run(source):
    results = race(*[{"source": "racer", "payload": PAYLOAD, "delivery_id": d} for d in ("d-1", "d-2", "d-3")])

    assert sorted(r.outcome for r in results) == ["accepted", "duplicate", "duplicate"]
    assert len({r.run_id for r in results}) == 1
    assert TaskRun.objects.get().dedupe_hits == 2
    assert EventDelivery.objects.count() == 3
