"""Code and schema say where they stand (issue 36): a worker reports the migrations it was built for,
and /healthz names one whose code is older than the schema; that fact is a function others read."""

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from harness_site.release import behind, code_migrations, label, migrations_missing, schema_migrations
from runs.engine.workers import worker_starting, workers_older_than_schema
from runs.models import SchedulerTick, WorkerHeartbeat


def test_a_worker_is_behind_where_the_schema_is_past_its_code():
    schema = {"runs": "0020_b", "tasks": "0031_x"}
    assert behind({"runs": "0020_b", "tasks": "0031_x"}, schema) == {}
    assert behind({"runs": "0019_a", "tasks": "0031_x"}, schema) == {"runs": "0020_b"}
    assert behind({"runs": "0021_c", "tasks": "0031_x"}, schema) == {}  # newer code: not behind
    assert behind({"tasks": "0031_x"}, schema) == {"runs": "0020_b"}  # an app its code does not know yet
    assert behind(None, schema) == schema  # a release from before workers reported it
    assert label({"tasks": "0031_x", "runs": "0020_b"}) == "runs.0020_b, tasks.0031_x"


@pytest.mark.django_db
def test_the_schema_of_the_test_database_is_this_code_s():
    assert migrations_missing() == []
    assert schema_migrations()["runs"] == code_migrations()["runs"]


@pytest.mark.django_db
def test_a_worker_reports_its_migrations_and_an_older_one_is_named_with_release_and_schema():
    now = timezone.now()
    worker_starting(name="agents@host:1", hostname="agents@host", pid=1, stall_seconds=60, now=now)
    assert WorkerHeartbeat.objects.get(name="agents@host:1").migrations == code_migrations()
    assert workers_older_than_schema(now=now) == []

    runs_at = schema_migrations()["runs"]
    older = {**code_migrations(), "runs": "0001_initial"}
    worker_starting(name="agents@old:2", hostname="agents@old", pid=2, stall_seconds=60, now=now)
    WorkerHeartbeat.objects.filter(name="agents@old:2").update(migrations=older)
    worker_starting(name="agents@older:3", hostname="agents@older", pid=3, stall_seconds=60, now=now)
    WorkerHeartbeat.objects.filter(name="agents@older:3").update(migrations=None)

    found = workers_older_than_schema(now=now)
    assert [w["name"] for w in found] == ["agents@old:2", "agents@older:3"]
    assert found[0]["detail"] == f"agents@old:2 runs release runs.0001_initial; the schema is at runs.{runs_at}"
    assert found[1]["release"] == "unknown"


@pytest.mark.django_db
def test_healthz_details_name_a_worker_older_than_the_schema_and_stay_ok(client):
    now = timezone.now()
    SchedulerTick.objects.update_or_create(name="scheduler", defaults={"last_tick_at": now})
    worker_starting(name="agents@old:2", hostname="agents@old", pid=2, stall_seconds=60, now=now)
    WorkerHeartbeat.objects.filter(name="agents@old:2").update(migrations={**code_migrations(), "runs": "0001_initial"})
    client.force_login(get_user_model().objects.create_user("oncall", password="pw-123456789", is_staff=True))

    body = client.get("/healthz").json()

    runs_at = schema_migrations()["runs"]
    assert body["workers_older_than_schema"] == [
        f"agents@old:2 runs release runs.0001_initial; the schema is at runs.{runs_at}"
    ]
    assert body["reason"] == "ok"  # a warning: an older worker keeps working on an expanded schema
