"""/healthz for outside monitors: always JSON, 503 with a reason when something is wrong."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from harness_site.celery import app
from runs.models import SchedulerTick
from runs.selectors import scheduler_health
from tests.support.rules import make_rule
from tests.support.servers import free_port


def _ticked(at):
    SchedulerTick.objects.update_or_create(name="scheduler", defaults={"last_tick_at": at})


def _rule(due):
    make_rule("hourly", interval_seconds=3600, due=due)


@pytest.mark.django_db
def test_it_is_ok_while_the_scheduler_ticks_and_no_slot_is_overdue(client):
    _ticked(timezone.now())
    response = client.get("/healthz")
    assert response.status_code == 200, response.json()
    assert response.json()["ok"] is True and response.json()["broker"] == "ok"


@pytest.mark.django_db
def test_it_is_not_ok_as_soon_as_a_slot_is_overdue_beyond_its_grace(settings):
    now = timezone.now()
    _ticked(now)  # the tick itself is fresh: only the slot is late
    grace = settings.HARNESS["SLOT_GRACE_SECONDS"]
    _rule(due=now - timedelta(seconds=grace - 1))
    assert scheduler_health(now=now)["ok"] is True
    late = scheduler_health(now=now + timedelta(seconds=2))
    assert late["ok"] is False and "overdue" in late["reason"] and "hourly" in late["reason"]


@pytest.mark.django_db
def test_it_answers_503_json_with_a_reason_when_the_broker_is_unreachable(client, monkeypatch):
    _ticked(timezone.now())
    # Configuration, not a mock: the real transport is asked to connect where nothing listens.
    # (The app reads Django's settings under the CELERY_ namespace.)
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    monkeypatch.setitem(app.conf, "CELERY_BROKER_URL", nowhere)
    monkeypatch.setenv("CELERY_BROKER_URL", nowhere)  # Celery prefers the environment's
    monkeypatch.setitem(app.conf, "CELERY_BROKER_TRANSPORT", None)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert response.json()["reason"].startswith("broker unreachable")


@pytest.mark.django_db(transaction=True)
def test_it_answers_503_json_with_a_reason_when_the_database_is_unreachable(client):
    saved = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "postgresql":
        connection.settings_dict["PORT"] = str(free_port())  # nothing listens there
    else:
        connection.settings_dict["NAME"] = "/nonexistent/folder/harness.sqlite3"
    try:
        response = client.get("/healthz")
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"ok": False, "reason": "database unreachable", "detail": response.json()["detail"]}


# --- workers: alive but not consuming, or not responding ----------------------------------------


def _worker(name: str, *, beat_age: float, progress_age: float, stall: float = 60.0, stopping: bool = False):
    from runs.models import WorkerHeartbeat

    now = timezone.now()
    return WorkerHeartbeat.objects.create(
        name=name,
        hostname=name.split(":")[0],
        pid=int(name.split(":")[1]),
        started_at=now - timedelta(minutes=1),
        beat_at=now - timedelta(seconds=beat_age),
        progress_at=now - timedelta(seconds=progress_age),
        stall_seconds=stall,
        stopping=stopping,
        waiting=1,
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("beat_age", "progress_age", "status", "reason"),
    [
        (1, 1, 200, ""),
        (1, 29, 200, ""),  # work waited under half the stall period: not yet
        (1, 31, 503, "worker w1@h:7 not consuming for 31s"),
        (11, 11, 503, "worker w1@h:7 not responding for 11s"),
    ],
)
def test_it_reports_a_worker_that_takes_no_work_or_stopped_reporting(client, beat_age, progress_age, status, reason):
    _ticked(timezone.now())
    _worker("w1@h:7", beat_age=beat_age, progress_age=progress_age)
    response = client.get("/healthz")
    body = response.json()
    assert response.status_code == status, body
    assert body["reason"] == reason
    assert [w["name"] for w in body["workers"]] == ["w1@h:7"]
    assert set(body["queues"]) == {"celery", "harness_control"}


@pytest.mark.django_db
def test_a_worker_on_its_way_out_or_long_gone_does_not_fail_the_check(client):
    _ticked(timezone.now())
    _worker("w1@h:7", beat_age=20, progress_age=40, stopping=True)  # its watchdog ended it: restarting
    _worker("w2@h:8", beat_age=600, progress_age=600)  # forgotten: killed long ago, restarted under a new pid
    response = client.get("/healthz")
    assert response.status_code == 200, response.json()
    assert [w["name"] for w in response.json()["workers"]] == ["w1@h:7"]


@pytest.mark.django_db
def test_a_worker_its_runner_started_again_does_not_fail_the_check(client):
    _ticked(timezone.now())
    old = _worker("w1@h:7", beat_age=30, progress_age=30)  # killed 30 s ago
    new = _worker("w1@h:9", beat_age=1, progress_age=1)  # the same node, started again under a new pid
    new.hostname, new.started_at = old.hostname, timezone.now()
    new.save()
    response = client.get("/healthz")
    assert response.status_code == 200, response.json()
    assert {w["name"]: w["status"] for w in response.json()["workers"]} == {"w1@h:7": "restarted", "w1@h:9": "ok"}
