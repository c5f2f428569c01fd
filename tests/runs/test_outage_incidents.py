"""Database and broker outages: recorded, once over, by the workers that lived through them; several
workers that saw one outage record one incident whose span covers what each saw, paged once."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from deadletters.models import Alert
from runs.engine.incidents import incident_record_outage
from runs.models import Decision, Incident
from tasks.triggers.scheduler import scheduler_tick
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
JOIN = timedelta(seconds=4)  # two heartbeats of 2 s
SUBJECTS = {"database": "postgresql:db.internal:5432/harness", "broker": "redis://10.0.0.7:6379/0"}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def record(kind: str, start: float, end: float, *, by: str = "w1@host:1", now: float | None = None):
    return incident_record_outage(
        kind=kind,
        subject=SUBJECTS[kind],
        started_at=at(start),
        ended_at=at(end),
        join=JOIN,
        seen_by=by,
        now=at(end if now is None else now),
    )


def closing_alerts():
    return list(Alert.objects.filter(channel=None, kind="incident_closed"))


@pytest.mark.parametrize("kind", ["database", "broker"])
def test_a_worker_records_the_outage_it_lived_through_with_one_page(kind):
    incident, new = record(kind, 10, 40)
    assert new
    incident.refresh_from_db()
    assert (incident.kind, incident.started_at, incident.ended_at) == (kind, at(10), at(40))
    assert incident.subject == SUBJECTS[kind]
    assert "w1@host:1" in incident.detail
    assert incident.summary == {"missed": 0, "caught_up": 0, "rules_affected": 0, "alerts": 0}
    [alert] = closing_alerts()
    assert alert.payload["incident_id"] == incident.id
    assert alert.payload["link"].endswith(f"/admin/runs/incident/{incident.id}/change/")
    assert alert.payload["duration_s"] == "30"


def test_its_cost_is_counted_like_the_other_kinds():
    make_rule("every-10s", interval_seconds=10, due=at(10), now=T0)
    scheduler_tick(now=at(0))
    scheduler_tick(now=at(25))  # a short gap: its missed slots are decisions inside the outage
    missed = Decision.objects.filter(reason__in=["missed", "superseded", "catchup_capped"]).count()
    assert missed
    incident, _ = record("database", 5, 30)
    incident.refresh_from_db()
    assert incident.summary["missed"] == missed
    assert incident.summary["rules_affected"] == 1


def test_workers_that_saw_one_outage_record_one_incident_covering_what_each_saw():
    first, _ = record("database", 10, 40, by="w1")
    second, new = record("database", 12, 43, by="w2")  # overlaps
    third, new3 = record("database", 5, 38, by="w3")  # starts earlier
    adjoining, new4 = record("database", 46, 50, by="w4")  # 3 s after the end: within two heartbeats
    assert (new, new3, new4) == (False, False, False)
    assert first.id == second.id == third.id == adjoining.id
    incident = Incident.objects.get()
    assert (incident.started_at, incident.ended_at) == (at(5), at(50))
    assert len(closing_alerts()) == 1  # one page, not one per worker


def test_a_later_outage_or_another_kind_is_its_own_incident():
    record("database", 10, 40)
    record("database", 60, 80)  # 20 s later: another outage
    record("broker", 10, 40)  # the same span of the other part
    got = sorted(Incident.objects.values_list("kind", "started_at", "ended_at"))
    assert got == [("broker", at(10), at(40)), ("database", at(10), at(40)), ("database", at(60), at(80))]
    assert len(closing_alerts()) == 3


def test_a_span_that_starts_where_one_recorded_starts_widens_it():
    record("broker", 10, 40)
    _, new = record("broker", 10, 45)  # the same first failure, a later success
    assert not new
    assert Incident.objects.get().ended_at == at(45)


@pytest.mark.django_db(transaction=True)
def test_workers_recording_one_outage_at_once_record_one_incident():
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def one_worker(i: int):
        try:
            barrier.wait()
            record("database", 10 + i, 40 + i, by=f"w{i}")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()  # the thread's own connection

    threads = [threading.Thread(target=one_worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    incident = Incident.objects.get()
    assert (incident.started_at, incident.ended_at) == (at(10), at(43))
    assert len(closing_alerts()) == 1


def test_a_worker_names_the_part_by_its_address_without_credentials():
    from harness_site.worker_watch import broker_address, database_address

    db = {"ENGINE": "django.db.backends.postgresql", "HOST": "db.internal", "PORT": "5432", "NAME": "harness"}
    assert database_address({**db, "USER": "ops", "PASSWORD": "s3cret"}) == "postgresql:db.internal:5432/harness"
    assert (
        database_address({"ENGINE": "django.db.backends.sqlite3", "NAME": "/srv/h.sqlite3"}) == "sqlite3:/srv/h.sqlite3"
    )
    assert broker_address("redis://:s3cret@10.0.0.7:6379/0") == "redis://10.0.0.7:6379/0"
    assert broker_address("amqp://ops:s3cret@mq:5672//") == "amqp://mq:5672//"
    assert broker_address("filesystem://") == "filesystem://"
