# ruff: noqa: F811  (pytest fixtures imported from tests.support.desk are redefined as arguments)
"""The incident page and its time-aligned grid: what an outage cost, in both languages, and a fixed
number of queries at 1,000 rules and a day of 10-second slots."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from runs.desk.incident_grid import COLUMNS, cell_state, grid_window
from runs.models import Decision, Incident, TaskRun
from tasks.models import TriggerRule
from tasks.triggers.scheduler import scheduler_tick
from tests.support.desk import oncall, oncall_client, viewer  # noqa: F401
from tests.support.rules import make_rule

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# --- the axis (pure) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("span", "zoom", "expected"),
    [
        (timedelta(minutes=3), None, "1h"),
        (timedelta(minutes=50), None, "6h"),
        (timedelta(hours=5), None, "1d"),
        (timedelta(hours=20), None, "7d"),
        (timedelta(days=30), None, "7d"),
        (timedelta(minutes=3), "1d", "1d"),
        (timedelta(minutes=3), "bogus", "1h"),
    ],
)
def test_the_axis_is_the_narrowest_zoom_that_holds_the_incident(span, zoom, expected):
    window = grid_window(started_at=T0, ended_at=T0 + span, now=T0 + span, zoom=zoom)
    assert window.zoom == expected
    assert window.start < T0 < window.end
    assert window.end - window.start == window.bucket * COLUMNS


def test_an_ongoing_incident_is_drawn_up_to_now():
    window = grid_window(started_at=T0, ended_at=None, now=T0 + timedelta(hours=2), zoom=None)
    assert window.zoom == "6h" and window.end > T0 + timedelta(hours=2)


def test_a_cell_shows_the_worst_of_its_slots():
    assert cell_state(missed=1, late=1, ran=5, other=1) == "missed"
    assert cell_state(missed=0, late=1, ran=5, other=0) == "late"
    assert cell_state(missed=0, late=0, ran=1, other=3) == "ran"
    assert cell_state(missed=0, late=0, ran=0, other=1) == "other"
    assert cell_state(missed=0, late=0, ran=0, other=0) == ""


# --- the page -----------------------------------------------------------------------------------


def outage() -> Incident:
    for i in range(3):
        make_rule(f"every-10s-{i}", interval_seconds=10, due=at(10), now=T0)
    scheduler_tick(now=at(0))
    scheduler_tick(now=at(125))  # beat was down: the tick after records the outage
    return Incident.objects.get()


@pytest.mark.django_db
@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_the_page_shows_what_the_outage_cost_and_its_missed_slots_to_choose(oncall_client, lang):
    incident = outage()
    url = reverse("admin:runs_incident_change", args=[incident.id])
    response = oncall_client.get(url, HTTP_ACCEPT_LANGUAGE=lang)
    assert response.status_code == 200
    html = response.content.decode()
    missed = Decision.objects.filter(reason="missed").order_by("slot")
    assert missed.count() == 33
    # Each missed slot is a checkbox posted to the decision list's re-run (plan first).
    for d in missed:
        assert f'name="_selected_action" value="{d.pk}"' in html
    assert 'name="action" value="rerun_slots"' in html
    assert 'id="incident-missed-count">33<' in html
    assert html.count('<i class="missed">') >= 3  # each rule's row has the outage's band
    if lang == "zh-hans":
        assert "调度器中断" in html and "错过的时间槽" in html
    else:
        assert "Scheduler outage" in html and "Missed slots" in html


@pytest.mark.django_db
def test_an_unknown_incident_is_a_404(oncall_client):
    assert oncall_client.get(reverse("admin:runs_incident_change", args=[999])).status_code == 404


@pytest.mark.django_db
def test_the_dashboard_lists_recent_incidents(oncall_client):
    incident = outage()
    html = oncall_client.get(reverse("harness-dashboard")).content.decode()
    assert reverse("admin:runs_incident_change", args=[incident.id]) in html


def seed(rules: int, *, slots: int) -> Incident:
    """`rules` rules, each with one missed slot inside a 10-minute outage, and one more rule with a
    day of 10-second slots (8,640: runs, then the outage's missed ones)."""
    day_start = T0 - timedelta(hours=12)
    first = make_rule("every-10s", interval_seconds=10, due=None, now=T0)
    others = TriggerRule.objects.bulk_create(
        [
            TriggerRule(
                name=f"bulk-{i:04}",
                reason="t",
                kind="interval",
                interval_seconds=60,
                timezone="UTC",
                skill="harness.noop",
                next_fire_at=None,
            )
            for i in range(rules - 1)
        ]
    )
    incident = Incident.objects.create(
        kind="scheduler", subject="scheduler", started_at=T0, detected_at=T0, ended_at=at(600)
    )
    decisions, runs = [], []
    for n in range(slots):
        slot = day_start + timedelta(seconds=10 * n)
        if T0 < slot <= at(600):
            decisions.append(Decision(rule=first, slot=slot, reason="missed", created_at=at(600)))
        else:
            runs.append(
                TaskRun(
                    biz_key=f"every-10s:{n}",
                    rule=first,
                    rule_name=first.name,
                    slot=slot,
                    trigger_at=slot,
                    run_after=slot,
                    source="scheduler",
                    skill="harness.noop",
                    state="succeeded",
                )
            )
    decisions += [Decision(rule=r, slot=at(60), reason="missed", created_at=at(600)) for r in others]
    Decision.objects.bulk_create(decisions, batch_size=2000)
    TaskRun.objects.bulk_create(runs, batch_size=2000)
    return incident


def page_statements(client, incident, zoom: str) -> int:
    url = reverse("admin:runs_incident_change", args=[incident.id]) + f"?zoom={zoom}"
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    return len(queries)


@pytest.mark.django_db
def test_the_page_and_its_grid_are_a_fixed_number_of_queries_at_a_thousand_rules(oncall_client):
    small = seed(10, slots=8640)
    few = {zoom: page_statements(oncall_client, small, zoom) for zoom in ("1h", "1d")}
    Decision.objects.all().delete()
    TaskRun.objects.all().delete()
    Incident.objects.all().delete()
    TriggerRule.objects.all().delete()
    big = seed(1000, slots=8640)
    many = {zoom: page_statements(oncall_client, big, zoom) for zoom in ("1h", "1d")}
    assert many == few
    assert many["1d"] <= 20
    html = oncall_client.get(reverse("admin:runs_incident_change", args=[big.id]) + "?zoom=1d").content.decode()
    assert "and 800 more rules" in html  # 1,000 rules: the 200 that cost most are drawn
