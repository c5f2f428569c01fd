"""A Redis that accepts connections and never answers (a hung process, a stuck proxy) cannot stall
/healthz, the worker heartbeat's look into its queues or the sweeper's: every probe command is bounded
(harness_site/broker.py probe_options), not only its connect, and the probe comes back failed.
The server is real (a TCP listener on loopback that never writes); the transport is Celery's own."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from harness_site.broker import queue_probe
from harness_site.celery import app
from harness_site.worker_watch import QueueWatch
from runs.models import SchedulerTick
from tests.support.servers import SilentServer

# Generous: the machine is loaded. Without the bound, the probe never returns at all.
DEADLINE_SECONDS = 60


@pytest.fixture
def hung_broker(monkeypatch):
    server = SilentServer()
    # Configuration, not a mock: the real Redis transport is asked to talk to a server that never answers.
    hung = f"redis://127.0.0.1:{server.port}/0"
    monkeypatch.setitem(app.conf, "CELERY_BROKER_URL", hung)
    monkeypatch.setenv("CELERY_BROKER_URL", hung)  # Celery prefers the environment's
    monkeypatch.setitem(app.conf, "CELERY_BROKER_TRANSPORT", None)
    monkeypatch.setitem(app.conf, "CELERY_BROKER_TRANSPORT_OPTIONS", {})
    yield server
    server.close()


def test_a_queue_probe_fails_instead_of_waiting_for_an_answer(hung_broker):
    with pytest.raises(Exception) as info:  # whichever the transport raises: it must raise
        queue_probe(app, "default", timeout=0.5)
    assert "timeout" in f"{type(info.value).__name__} {info.value}".lower(), repr(info.value)


def test_the_worker_heartbeats_queue_look_comes_back_with_the_queue_unknown(hung_broker):
    watch = QueueWatch(["default"], outage_after=timedelta(seconds=4))
    watch.oldest_age["default"] = 1.0  # an earlier answer, from before the broker hung
    watch.start()
    try:
        watch.ask()
        assert watch.looked.wait(DEADLINE_SECONDS), "the look never came back"
        assert "default" not in watch.oldest_age  # unknown, not the stale answer
        assert watch.broker.down  # seen down since this look: an incident if it lasts (runs/engine/downtime.py)
    finally:
        watch.stop()


@pytest.mark.django_db
def test_healthz_answers_with_the_broker_marked_unreachable(hung_broker):
    SchedulerTick.objects.update_or_create(name="scheduler", defaults={"last_tick_at": timezone.now()})
    user = get_user_model().objects.create_user("ops", password="x", is_staff=True)
    client = Client()
    client.force_login(user)
    response = client.get("/healthz")  # returns: before the bound, this waited on Redis forever
    assert response.status_code == 503
    body = response.json()
    assert body["reason"] == "broker_unreachable" and body["broker"] == "unreachable"
