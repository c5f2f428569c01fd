"""The dashboard page under /admin/dashboard/: server-rendered CSS bars, no JavaScript, no CDN."""

import time

from django.contrib import admin
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _

from harness_site.desk import now
from runs.dashboard import dashboard_build
from runs.models import TaskRun

STATE_COLOURS = {
    TaskRun.State.PENDING: "#79aec8",
    TaskRun.State.RUNNING: "#417690",
    TaskRun.State.WAITING_RETRY: "#e0a800",
    TaskRun.State.SUCCEEDED: "#3c9a5f",
    TaskRun.State.FAILED: "#ba2121",
    TaskRun.State.CANCELLED: "#999999",
}


def dashboard_view(request):
    started = time.perf_counter()
    d = dashboard_build(now=now())
    peak = max((h["total"] for h in d.hours), default=0) or 1
    columns = [
        {
            "hour": h["hour"],
            "total": h["total"],
            "segments": [
                {"state": s, "n": h["by_state"][s], "pct": 100 * h["by_state"][s] / peak, "colour": c}
                for s, c in STATE_COLOURS.items()
                if h["by_state"].get(s)
            ],
        }
        for h in d.hours
    ]
    states = [
        {"state": s, "label": TaskRun.State(s).label, "n": d.states.get(s, 0), "colour": c}
        for s, c in STATE_COLOURS.items()
    ]
    context = {
        **admin.site.each_context(request),
        "title": _("Dashboard"),
        "d": d,
        "columns": columns,
        "states": states,
        "delay_bars": _bars(d.queue_delay),
        "latency_bars": _bars(d.latency),
        "dedupe_pct": round(100 * d.dedupe_share, 2),
        "build_ms": round((time.perf_counter() - started) * 1000, 1),
    }
    return TemplateResponse(request, "admin/dashboard.html", context)


def _bars(values: dict) -> list[dict]:
    top = max((v for v in values.values() if v is not None), default=0) or 1
    return [
        {"name": k, "value": v, "pct": 100 * (v or 0) / top, "text": "-" if v is None else f"{v:.2f}s"}
        for k, v in values.items()
    ]
