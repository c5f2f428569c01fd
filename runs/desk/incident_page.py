"""What an incident's page shows, read in a fixed number of queries (tests/runs/test_incident_page.py)."""

from datetime import datetime
from typing import Any

from django.urls import reverse

from deadletters.alert_texts import alert_title
from runs.desk.incident_grid import grid_build, grid_window
from runs.desk.selectors import duration_text
from runs.engine.incidents import incident_actions, incident_alerts, incident_cost, incident_missed
from runs.models import Incident

# The decision list's "re-run chosen slots" action (plan first): the missed slots are posted to it.
RERUN_ACTION = "rerun_slots"


def incident_page(incident: Incident, *, now: datetime, zoom: str | None = None) -> dict[str, Any]:
    """Start, end, duration, what it cost per rule, its missed slots (selectable), alerts, operator
    actions, and the rules on one time axis at `zoom`."""
    until = incident.ended_at or now
    window = grid_window(started_at=incident.started_at, ended_at=incident.ended_at, now=now, zoom=zoom)
    grid = grid_build(window)
    # The incident's own row: the buckets it covers, drawn above the rules.
    grid["span"] = [e < until and e + window.bucket > incident.started_at for e in grid["columns"]]
    return {
        "incident": incident,
        "duration": duration_text(until - incident.started_at),
        "cost": incident_cost(incident, until=until),
        "missed_slots": incident_missed(incident, now=now),
        "alerts": [(a, alert_title(a.payload)) for a in incident_alerts(incident, now=now)],
        "actions": incident_actions(incident, now=now),
        "grid": grid,
        "rerun_url": reverse("admin:runs_decision_changelist"),
        "rerun_action": RERUN_ACTION,
    }
