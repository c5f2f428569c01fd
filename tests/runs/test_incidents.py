"""Incidents as records: opened and closed from /healthz's figures by the alerts pass, or by the first
tick after a gap no pass saw; one page when one opens and one when it closes, not one per slot."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings

from deadletters.models import Alert
from harness_site.audit.models import AuditEntry
from runs.desk.harness_health import health_figures
from runs.engine.incidents import incident_actions, incident_cost, incident_problems, incident_sync
from runs.models import Decision, Incident, TaskRun
from tasks.triggers.scheduler import scheduler_tick
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
QUEUES = ["default"]  # one task queue, so only the scheduler and this queue can be down


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def figures(now, *, workers_on: list[str] | None = None) -> dict:
    found = health_figures(now=now)
    if workers_on is not None:  # the worker facts, as a worker's heartbeat would give them
        found["queues_without_worker"] = [q for q in QUEUES if q not in workers_on]
    return found


def test_it_names_a_stalled_scheduler_by_its_last_tick_and_each_queue_without_a_worker():
    found = incident_problems(
        {"code": "scheduler_stalled", "last_tick_at": T0, "reason": "r", "queues_without_worker": ["agents"]},
        now=at(90),
    )
    assert [(p.kind, p.subject, p.started_at) for p in found] == [
        ("scheduler", "scheduler", T0),
        ("queue", "agents", at(90)),
    ]
    # A scheduler that never ticked is starting, not down; an overdue slot is no outage of the harness.
    assert incident_problems({"code": "scheduler_stalled", "last_tick_at": None, "reason": "r"}, now=at(90)) == []
    assert incident_problems({"code": "slot_overdue", "last_tick_at": T0, "reason": "r"}, now=at(90)) == []


def test_a_pass_opens_one_incident_per_outage_and_the_first_tick_after_closes_it():
    rules = [make_rule(f"every-10s-{i}", interval_seconds=10, due=at(10), now=T0) for i in range(3)]
    scheduler_tick(now=at(0))
    for when in (at(60), at(90), at(120)):  # the pass runs every 30 s while the scheduler is down
        incident_sync(figures=figures(when, workers_on=QUEUES), now=when)
    incident = Incident.objects.get()
    assert (incident.kind, incident.started_at, incident.ended_at) == ("scheduler", at(0), None)
    opened = Alert.objects.filter(channel=None, kind="scheduler_stalled").get()
    assert opened.payload["link"].endswith(f"/admin/runs/incident/{incident.id}/change/")

    scheduler_tick(now=at(125))  # beat is back: the slots of the outage are missed (catch-up none)
    incident.refresh_from_db()
    assert incident.ended_at == at(125)
    missed = Decision.objects.filter(reason=Decision.Reason.MISSED).count()
    assert missed == 3 * 11  # 10 s … 110 s; the slot at 120 s is within the grace and runs, late
    assert incident.summary == {"missed": missed, "caught_up": 3, "rules_affected": 3, "alerts": 1}
    # One page for the outage and one for its end: none of the missed slots pages on its own.
    assert Alert.objects.filter(channel=None, kind="slot_missed").count() == 0
    closed = Alert.objects.filter(channel=None, kind="incident_closed").get()
    assert (closed.payload["missed"], closed.payload["rules_affected"]) == (missed, 3)
    # A later pass finds the scheduler well: nothing to open or close.
    result = incident_sync(figures=figures(at(130), workers_on=QUEUES), now=at(130))
    assert (result.opened, result.closed) == ([], [])
    assert {r.name for r in rules} == {row["name"] for row in incident_cost(incident, until=at(125)).rules.values()}


def test_the_first_tick_after_a_gap_no_pass_saw_records_the_whole_outage():
    make_rule("every-10s", interval_seconds=10, due=at(10), now=T0, catchup="latest", catchup_max_delay_seconds=3600)
    scheduler_tick(now=at(0))
    scheduler_tick(now=at(200))  # beat (and so every pass) was down for 200 s
    incident = Incident.objects.get()
    assert (incident.started_at, incident.ended_at, incident.detected_at) == (at(0), at(200), at(200))
    cost = incident_cost(incident, until=incident.ended_at)
    assert cost.caught_up == 1  # catch-up latest ran the last slot of the outage (190 s), late
    assert cost.missed == 18  # the others were superseded by it; the slot at 200 s was on time
    assert Alert.objects.filter(channel=None, kind="incident_closed").count() == 1
    assert Alert.objects.filter(channel=None, kind="scheduler_stalled").count() == 0
    scheduler_tick(now=at(201))  # a short gap after: no incident
    assert Incident.objects.count() == 1


def test_a_short_gap_is_no_incident_and_its_missed_slots_alert_as_before():
    make_rule("every-10s", interval_seconds=10, due=at(10), now=T0)
    scheduler_tick(now=at(0))
    with override_settings(HARNESS={**settings.HARNESS, "SLOT_GRACE_SECONDS": 1}):
        scheduler_tick(now=at(25))  # within the stall period (30 s): behind, not down
    assert Incident.objects.count() == 0
    assert Alert.objects.filter(channel=None, kind="slot_missed").count() >= 1


def test_a_queue_without_a_consuming_worker_opens_and_closes_with_one_page_each():
    scheduler_tick(now=at(0))
    incident_sync(figures=figures(at(5), workers_on=[]), now=at(5))
    incident_sync(figures=figures(at(10), workers_on=[]), now=at(10))
    incident = Incident.objects.get()
    assert (incident.kind, incident.subject, incident.started_at) == ("queue", "default", at(5))
    incident_sync(figures=figures(at(15), workers_on=QUEUES), now=at(15))
    incident.refresh_from_db()
    assert incident.ended_at == at(15)
    assert list(Alert.objects.filter(channel=None).values_list("kind", flat=True).order_by("id")) == [
        "incident_opened",
        "incident_closed",
    ]


def test_operator_actions_in_the_span_belong_to_the_incident():
    scheduler_tick(now=at(0))
    scheduler_tick(now=at(100))
    incident = Incident.objects.get()
    AuditEntry.objects.create(at=at(50), actor="alice", action="pause", target_type="rule", target_id="1")
    AuditEntry.objects.create(
        at=at(100) + timedelta(hours=2), actor="bob", action="pause", target_type="rule", target_id="1"
    )
    assert [a.actor for a in incident_actions(incident, now=at(200))] == ["alice"]


@pytest.mark.django_db(transaction=True)
def test_several_passes_at_once_open_one_incident():
    scheduler_tick(now=at(0))
    stalled = figures(at(90), workers_on=QUEUES)
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def one_pass():
        try:
            barrier.wait()
            incident_sync(figures=stalled, now=at(90))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()  # the thread's own connection

    threads = [threading.Thread(target=one_pass) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert Incident.objects.filter(ended_at=None).count() == 1
    assert Alert.objects.filter(channel=None, kind="scheduler_stalled").count() == 1
    assert TaskRun.objects.count() == 0


def test_metrics_count_open_incidents_by_kind_and_every_incident_ever():
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from runs.desk.metrics import metrics_registry

    scheduler_tick(now=at(0))
    scheduler_tick(now=at(100))  # one scheduler outage, over
    incident_sync(figures=figures(at(105), workers_on=[]), now=at(105))  # the queue has no worker: open
    samples = {
        (s.name, s.labels["kind"]): s.value
        for family in text_string_to_metric_families(generate_latest(metrics_registry(lambda: at(106))).decode())
        for s in family.samples
        if s.name.startswith("harness_incidents")
    }
    assert samples == {
        ("harness_incidents_open", "scheduler"): 0,
        ("harness_incidents_open", "queue"): 1,
        ("harness_incidents_total", "scheduler"): 1,
        ("harness_incidents_total", "queue"): 1,
        **{
            (name, kind): 0
            for name in ("harness_incidents_open", "harness_incidents_total")
            for kind in ("database", "broker")
        },
    }
