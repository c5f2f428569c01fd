"""/healthz for outside monitors: always JSON, 503 with a reason code when something is wrong;
the details (names, ages, queues) only for a staff session or an API token."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.utils import timezone

from harness_site.api.tokens import token_create
from harness_site.celery import app
from runs.desk.selectors import scheduler_health
from runs.engine.workers import worker_progressed, worker_starting
from runs.models import SchedulerTick
from tests.support.rules import make_rule
from tests.support.servers import free_port


@pytest.fixture
def staff(client):
    """A client with a staff session (in no group: the details are operational, not business data)."""
    user = get_user_model().objects.create_user("oncall", password="pw-123456789", is_staff=True)
    client.force_login(user)
    return client


def _ticked(at):
    SchedulerTick.objects.update_or_create(name="scheduler", defaults={"last_tick_at": at})


def _rule(due):
    make_rule("hourly", interval_seconds=3600, due=due)


@pytest.mark.django_db
def test_it_is_ok_while_the_scheduler_ticks_and_no_slot_is_overdue(staff):
    _ticked(timezone.now())
    response = staff.get("/healthz")
    assert response.status_code == 200, response.json()
    assert response.json()["ok"] is True and response.json()["broker"] == "ok"
    assert response.json()["reason"] == "ok"


@pytest.mark.django_db
def test_anyone_gets_liveness_only_a_reason_code_that_names_nothing(client):
    _ticked(timezone.now())
    _rule(due=timezone.now() - timedelta(hours=1))  # overdue: the detail would name the rule
    _worker("w1@secret-host:7", beat_age=1, progress_age=1)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"ok": False, "reason": "slot_overdue"}


@pytest.mark.django_db
def test_a_session_that_is_not_staff_gets_liveness_only(client):
    _ticked(timezone.now())
    client.force_login(get_user_model().objects.create_user("someone", password="pw-123456789"))
    assert client.get("/healthz").json() == {"ok": True, "reason": "ok"}


@pytest.mark.django_db
def test_an_api_token_gets_the_details_and_an_unknown_one_a_401():
    _ticked(timezone.now())
    _worker("w1@h:7", beat_age=1, progress_age=1)
    user = get_user_model().objects.create_user("monitor", password="pw-123456789")
    token = token_create(name="monitor", user=user, now=timezone.now(), scopes=[])
    body = Client().get("/healthz", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert body["ok"] is True and [w["name"] for w in body["workers"]] == ["w1@h:7"] and "queues" in body

    refused = Client().get("/healthz", HTTP_AUTHORIZATION="Bearer hk_not-a-token")
    assert refused.status_code == 401
    assert refused.json() == {"ok": False, "reason": "unauthorized", "detail": "unknown or revoked token"}
    assert refused["WWW-Authenticate"].startswith("Bearer")


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
def test_it_answers_503_json_with_a_reason_when_the_broker_is_unreachable(staff, monkeypatch):
    _ticked(timezone.now())
    # Configuration, not a mock: the real transport is asked to connect where nothing listens.
    # (The app reads Django's settings under the CELERY_ namespace.)
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    monkeypatch.setitem(app.conf, "CELERY_BROKER_URL", nowhere)
    monkeypatch.setenv("CELERY_BROKER_URL", nowhere)  # Celery prefers the environment's
    monkeypatch.setitem(app.conf, "CELERY_BROKER_TRANSPORT", None)
    response = staff.get("/healthz")
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert response.json()["reason"] == "broker_unreachable"
    assert response.json()["detail"].startswith("broker unreachable")


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
    assert response.json() == {"ok": False, "reason": "database_unreachable"}


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
    ("beat_age", "progress_age", "status", "reason", "detail"),
    [
        (1, 1, 200, "ok", ""),
        (1, 29, 200, "ok", ""),  # work waited under half the stall period: not yet
        (1, 31, 503, "worker_not_consuming", "worker w1@h:7 not consuming for 31s"),
        (11, 11, 503, "worker_not_responding", "worker w1@h:7 not responding for 11s"),
    ],
)
def test_it_reports_a_worker_that_takes_no_work_or_stopped_reporting(
    staff, beat_age, progress_age, status, reason, detail
):
    _ticked(timezone.now())
    _worker("w1@h:7", beat_age=beat_age, progress_age=progress_age)
    response = staff.get("/healthz")
    body = response.json()
    assert response.status_code == status, body
    assert (body["reason"], body["detail"]) == (reason, detail)
    assert [w["name"] for w in body["workers"]] == ["w1@h:7"]
    assert set(body["queues"]) == {"celery", "agents", "harness_control"}


@pytest.mark.django_db
def test_a_worker_on_its_way_out_or_long_gone_does_not_fail_the_check(staff):
    _ticked(timezone.now())
    _worker("w1@h:7", beat_age=20, progress_age=40, stopping=True)  # its watchdog ended it: restarting
    _worker("w2@h:8", beat_age=600, progress_age=600)  # forgotten: killed long ago, restarted under a new pid
    response = staff.get("/healthz")
    assert response.status_code == 200, response.json()
    assert [w["name"] for w in response.json()["workers"]] == ["w1@h:7"]


@pytest.mark.django_db
def test_a_worker_its_runner_started_again_does_not_fail_the_check(staff):
    _ticked(timezone.now())
    old = _worker("w1@h:7", beat_age=30, progress_age=30)  # killed 30 s ago
    new = _worker("w1@h:9", beat_age=1, progress_age=1)  # the same node, started again under a new pid
    new.hostname, new.started_at = old.hostname, timezone.now()
    new.save()
    response = staff.get("/healthz")
    assert response.status_code == 200, response.json()
    assert {w["name"]: w["status"] for w in response.json()["workers"]} == {"w1@h:7": "restarted", "w1@h:9": "ok"}


@pytest.mark.django_db
def test_a_worker_replaces_its_dead_predecessor_as_soon_as_its_process_starts(staff):
    """Before its pool exists, a new process of the node reports (worker_starting): the old pid,
    silent for 11 s, counts as restarted at once, not one heartbeat after the new one is ready."""
    _ticked(timezone.now())
    _worker("w1@h:7", beat_age=11, progress_age=11)
    assert staff.get("/healthz").status_code == 503
    _worker("w1@h:3", beat_age=1, progress_age=1)  # an older process of the node, also alive: not newer
    worker_starting(name="w1@h:9", hostname="w1@h", pid=9, stall_seconds=60, now=timezone.now())
    response = staff.get("/healthz")
    assert response.status_code == 200, response.json()
    statuses = {w["name"]: w["status"] for w in response.json()["workers"]}
    assert statuses == {"w1@h:7": "restarted", "w1@h:3": "ok", "w1@h:9": "ok"}


# --- progress: work finished or started, not work received ---------------------------------------

IDLE = {"started": 0, "finished": 0, "active": 0, "waiting": 0, "concurrency": 2, "queued_too_long": False, "stuck": 0}


@pytest.mark.parametrize(
    ("change", "progressed"),
    [
        ({}, True),  # idle is healthy
        ({"finished": 1, "active": 1}, True),
        ({"started": 1, "active": 1}, True),
        ({"active": 2, "waiting": 3}, True),  # every pool process busy, with young tasks or live runs
        ({"active": 1, "waiting": 1}, False),  # a free pool process, and a message it does not start
        ({"waiting": 1}, False),  # received and never started: accepted is not progress
        ({"queued_too_long": True}, False),  # its queue holds old work and it takes none
        ({"active": 2, "queued_too_long": True}, True),  # busy: the queue waits for capacity, not for it
        ({"active": 1, "stuck": 1, "finished": 3, "started": 3}, False),  # one process stuck past the period
        ({"active": 1, "waiting": 1, "concurrency": 0}, False),  # unknown concurrency: may be free
    ],
)
def test_progress_is_work_finished_or_started(change, progressed):
    assert worker_progressed(**{**IDLE, **change}) is progressed
