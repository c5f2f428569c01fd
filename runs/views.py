"""HTTP edges of the runs app: /healthz and /metrics for outside monitors, the dashboard and the flow page."""

import logging
import time
from datetime import timedelta
from urllib.parse import urlencode

from celery import current_app
from django.conf import settings
from django.contrib import admin
from django.db import DatabaseError
from django.http import HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from prometheus_client.exposition import choose_encoder
from rest_framework import exceptions

from deadletters.alert_health import able_channels, urgent_log_only, urgent_undeliverable
from harness_site.api.auth import BearerTokenAuthentication
from harness_site.api.problems import ApiProblem, problem_json
from harness_site.api.tokens import bearer_credential, secret_matches
from harness_site.broker import probe_options, queue_probe
from harness_site.desk import now, require_perm
from runs.desk import selectors
from runs.desk import status as board
from runs.desk.dashboard import dashboard_build
from runs.desk.harness_health import Fact, banner_facts, health_figures
from runs.desk.metrics import metrics_registry
from runs.desk.objectives import objective_status_for_rules
from runs.engine.workers import worker_health
from runs.models import TaskRun

log = logging.getLogger("harness.health")

BROKER_TIMEOUT = 2  # seconds: a monitor's probe must answer quickly, reachable or not


@csrf_exempt  # read-only; without it a POST gets the CSRF middleware's HTML 403 instead of a JSON 405
def healthz(request):
    """Always JSON: `ok`, and `reason`, a code that names nothing ("ok", "database_unreachable",
        "broker_unreachable", "scheduler_stalled", "slot_overdue", "worker_not_consuming",
        "worker_not_responding"). 200 while the deployment works; 503 when the database or the broker
        is unreachable, no tick ran for the stall period, a slot is overdue beyond its grace, or a worker
        is not consuming (it holds work and finishes none) or not responding (no heartbeat, and no
        process of the same node started since).

        Anyone gets that much (liveness). A staff session or an API token (`Authorization: Bearer`, 401
        when it is unknown) also gets the details: `detail` (the reason in words, with names),
        `workers`, `queues` (depth and oldest message age), `flow` (pools at their limit, paused pools,
        runs waiting for a pool), `calendars_without_data` (business calendars in use that cannot answer
    for a date within weeks: a warning, never a 503), `queues_without_worker` (task queues no consuming
    worker reads), `alerts_log_only` (no alert channel can deliver), `workers_older_than_schema` (workers whose
    code is older than the migrations applied, docs/upgrading.md: a warning, never a 503) and
    the scheduler's figures: the facts the desk's system banner shows (runs/desk/harness_health.py)."""
    if request.method not in ("GET", "HEAD"):
        response = JsonResponse({"ok": False, "reason": "method_not_allowed", "detail": "GET /healthz"}, status=405)
        response["Allow"] = "GET, HEAD"
        return response
    try:
        details = _may_see_details(request)
    except exceptions.AuthenticationFailed as exc:
        response = JsonResponse({"ok": False, "reason": "unauthorized", "detail": str(exc.detail)}, status=401)
        response["WWW-Authenticate"] = 'Bearer realm="api"'
        return response
    except DatabaseError as exc:  # the token or the session could not be looked up: liveness only
        log.warning("healthz: database unreachable: %s", _one_line(exc))
        return JsonResponse({"ok": False, "reason": "database_unreachable"}, status=503)
    status = _health()
    body = status if details else {"ok": status["ok"], "reason": status["reason"]}
    return JsonResponse(body, status=200 if status["ok"] else 503)


def _may_see_details(request) -> bool:
    """A staff session, or a known API token. Raises AuthenticationFailed for a token that is not."""
    if BearerTokenAuthentication().authenticate(request) is not None:  # None: no Authorization header
        return True
    user = request.user
    return bool(user.is_authenticated and user.is_active and user.is_staff)


def _health() -> dict:
    """Every figure /healthz reports, `reason` the first code that is not ok and `detail` its words.
    The database's figures come from runs.desk.harness_health, the desk banner's one home."""
    at = timezone.now()
    try:
        status = health_figures(now=at)
    except DatabaseError as exc:
        log.warning("healthz: database unreachable: %s", _one_line(exc))
        return {"ok": False, "reason": "database_unreachable", "detail": _one_line(exc)}
    status["detail"], status["reason"] = status["reason"], status.pop("code")
    worker_code, worker_reason = status.pop("worker_code"), status.pop("worker_reason")
    # A warning, not a fault: an older worker keeps working against an expanded schema.
    status["workers_older_than_schema"] = [w["detail"] for w in status["workers_older_than_schema"]]
    try:
        status["flow"] = selectors.flow_saturation(now=at)  # pressure, not a fault: ok is unchanged
    except DatabaseError as exc:
        status["flow"] = {"error": _one_line(exc)}
    if status["ok"] and worker_code != "ok":  # a worker alive but not taking work, or silent
        status.update(ok=False, reason=worker_code, detail=worker_reason)
    broker = _broker_error()
    if broker:
        status.update(ok=False, reason="broker_unreachable", detail=f"broker unreachable: {broker}")
    status["broker"] = "unreachable" if broker else "ok"
    status["queues"] = queue_depths() if not broker else {}
    return status


def system_banner_view(request):
    """The system banner of every desk page (templates/admin/desk/system_banner.html): what is wrong
    with the harness itself, re-read every few seconds by the page. Empty when all is well."""
    at = now()
    try:
        facts = banner_facts(health_figures(now=at), now=at)
    except DatabaseError as exc:
        log.warning("banner: database unreachable: %s", _one_line(exc))
        facts = [Fact("database_unreachable", _("The database does not answer."), reverse("healthz"), "/healthz")]
    return TemplateResponse(request, "admin/desk/system_banner.html", {"facts": facts})


def queue_depths() -> dict[str, dict]:
    """Each task queue's depth and the age of its oldest message (seconds; None when empty or unknown)."""
    out: dict[str, dict[str, object]] = {}
    for queue in settings.CELERY_TASK_QUEUES:
        try:
            probe = queue_probe(current_app, queue, timeout=BROKER_TIMEOUT)
        except Exception as exc:  # any transport's failure: reported, never raised
            out[queue] = {"error": _one_line(exc)}
            continue
        age = round(probe.oldest_age, 1) if probe.oldest_age is not None else None
        out[queue] = {"depth": probe.depth, "oldest_message_age_seconds": age, "held": len(probe.held)}
    return out


def _broker_error() -> str:
    """ "" when a connection to the broker can be made now, else why not (one line)."""
    try:
        with current_app.connection_for_write(**probe_options(BROKER_TIMEOUT)) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=BROKER_TIMEOUT)
    except Exception as exc:  # any transport's failure: the probe reports it, never raises
        return _one_line(exc)
    return ""


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


STATE_COLOURS = {
    TaskRun.State.PENDING: "#79aec8",
    TaskRun.State.RUNNING: "#417690",
    TaskRun.State.WAITING_RETRY: "#e0a800",
    TaskRun.State.SUCCEEDED: "#3c9a5f",
    TaskRun.State.FAILED: "#ba2121",
    TaskRun.State.CANCELLED: "#999999",
    TaskRun.State.COALESCED: "#b39ddb",  # replaced by a newer trigger of its object, never executed
}


# What the dashboard shows, each with the permission that shows it elsewhere on the desk: run counts,
# latency, queues and workers (runs), scheduler ticks, dead letters, undeliverable alerts, flow
# control (pools) and the next fires (rule names). A page needs what its data needs.
DASHBOARD_PERMS = (
    "runs.view_taskrun",
    "runs.view_schedulertick",
    "deadletters.view_deadletter",
    "deadletters.view_alert",
    "tasks.view_pool",
    "tasks.view_triggerrule",
)
FLOW_PERMS = ("tasks.view_pool",)


def dashboard_view(request):
    """The dashboard page under /admin/dashboard/: server-rendered CSS bars, no JavaScript, no CDN."""
    for perm in DASHBOARD_PERMS:
        require_perm(request, perm)
    started = time.perf_counter()
    d = dashboard_build(now=now())
    peak = max((h["total"] for h in d.hours), default=0) or 1
    columns = [
        {
            "hour": h["hour"],
            "hour_label": _hour_label(h["hour"]),
            "total": h["total"],
            "segments": [
                {
                    "state": s,
                    "label": TaskRun.State(s).label,
                    "n": h["by_state"][s],
                    "pct": 100 * h["by_state"][s] / peak,
                    "colour": c,
                    "url": _runs_url(state=s, start=h["hour"], end=h["hour"] + timedelta(hours=1)),
                }
                for s, c in STATE_COLOURS.items()
                if h["by_state"].get(s)
            ],
        }
        for h in d.hours
    ]
    states = [
        {
            "state": s,
            "label": TaskRun.State(s).label,
            "n": d.states.get(s, 0),
            "colour": c,
            "url": _runs_url(state=s, start=d.now - timedelta(hours=24), end=None),
        }
        for s, c in STATE_COLOURS.items()
    ]
    able = able_channels()
    context = {
        **admin.site.each_context(request),
        "title": _("Dashboard"),
        "d": d,
        "columns": columns,
        "states": states,
        "delay_bars": _bars(d.queue_delay),
        "latency_bars": _bars(d.latency),
        "dedupe_pct": round(100 * d.dedupe_share, 2),
        "urgent_undeliverable": urgent_undeliverable(now=d.now, able=able),
        "urgent_log_only": urgent_log_only(now=d.now, able=able),
        "queues": queue_depths(),
        "workers": worker_health(now=d.now),
        "build_ms": round((time.perf_counter() - started) * 1000, 1),
    }
    return TemplateResponse(request, "admin/dashboard.html", context)


def _hour_label(hour) -> str:
    """An hour of the chart on the display zone's clock, named: "21:00 CST", "13:00 UTC"."""
    local = timezone.localtime(hour)
    return f"{local:%H:%M} {local.tzname()}"


def _runs_url(*, state: str, start, end) -> str:
    """The runs list filtered to one state and an hour (a dashboard bar's link)."""
    query = {"state__exact": state, "trigger_at__gte": start.isoformat()}
    if end is not None:
        query["trigger_at__lt"] = end.isoformat()
    return reverse("admin:runs_taskrun_changelist") + "?" + urlencode(query)


def _bars(values: dict) -> list[dict]:
    top = max((v for v in values.values() if v is not None), default=0) or 1
    return [
        {"name": k, "value": v, "pct": 100 * (v or 0) / top, "text": "-" if v is None else f"{v:.2f}s"}
        for k, v in values.items()
    ]


# The status board shows rules, their runs and decisions, and their open dead letters.
STATUS_PERMS = ("tasks.view_triggerrule", "runs.view_taskrun", "deadletters.view_deadletter")
# The status page's badge for each freshness objective status: calm unless the slot is at risk or late.
OBJECTIVE_BADGE = {"met": "ok", "on_track": "ok", "excused": "ok", "at_risk": "at_risk", "breached": "breached"}


def status_objectives(rule_ids: list[int]) -> dict[int, dict]:
    """Each rule's freshness objective on the status page: its worst open slot, else its last one,
    as of the last objective pass (two queries for the rows shown)."""
    return {
        rule_id: {"state": OBJECTIVE_BADGE[o.status], "label": o.label, "cause": o.cause}
        for rule_id, o in objective_status_for_rules(rule_ids).items()
    }


STATUS_OBJECTIVES = status_objectives


def status_view(request):
    """The staff landing page, /admin/: every rule as one row, worst first, filterable, searchable and
    live (runs/desk/status.py). Staff without the rights to read rules, runs and tickets get the admin's
    list of pages instead, which stays one click away for everyone (/admin/apps/)."""
    if not all(request.user.has_perm(p) for p in STATUS_PERMS):
        return admin.site.index(request)
    health = request.GET.get("health", "")
    health = health if health in board.HEALTH_ORDER else ""
    q = request.GET.get("q", "").strip()[:200]
    try:
        page = int(request.GET.get("page", "1"))
    except ValueError:
        page = 1
    started = time.perf_counter()
    at = now()
    b = board.board_build(now=at, health=health, q=q, page=page, objectives=STATUS_OBJECTIVES)
    system_facts = banner_facts(health_figures(now=at), now=at)
    filters = [
        {
            "value": h,
            "label": board.HEALTH_LABELS[h] if h else _("All"),
            "n": b.counts[h] if h else sum(b.counts.values()),
            "url": "?" + urlencode({k: v for k, v in (("health", h), ("q", q)) if v}),
            "active": h == health,
        }
        for h in ("", *board.HEALTH_ORDER)
    ]
    context = {
        **admin.site.each_context(request),
        "title": _("Status"),
        "b": b,
        "system_facts": system_facts,
        "health": health,
        "q": q,
        "filters": filters,
        "decisions_url": reverse("admin:runs_decision_changelist"),
        "tickets_url": reverse("admin:deadletters_deadletter_changelist"),
        # Strip cells link by id: one reverse per page, not one per cell.
        "run_prefix": reverse("admin:runs_taskrun_changelist"),
        "decision_prefix": reverse("admin:runs_decision_changelist"),
        "rule_prefix": reverse("admin:tasks_triggerrule_changelist"),
        "missed_param": ",".join(sorted(board.MISSED_REASONS)),
        "since": b.now - board.WINDOW,
        "prev_url": "?" + urlencode({k: v for k, v in (("health", health), ("q", q), ("page", b.page - 1)) if v}),
        "next_url": "?" + urlencode({k: v for k, v in (("health", health), ("q", q), ("page", b.page + 1)) if v}),
        "build_ms": round((time.perf_counter() - started) * 1000, 1),
    }
    return TemplateResponse(request, "admin/status.html", context)


def apps_view(request):
    """Django's list of admin pages, one click from the status page."""
    return admin.site.index(request)


FLOW_TOP_KEYS = 5


def flow_view(request):
    """The flow page under /admin/flow/: each pool's limit, in use, waiting (top keys), shed and
    coalesced in the last hour, and its oldest waiting run (runs/desk/selectors.pool_pressure)."""
    for perm in FLOW_PERMS:
        require_perm(request, perm)
    at = now()
    rows = selectors.pool_pressure(now=at, top=FLOW_TOP_KEYS)
    context = {
        **admin.site.each_context(request),
        "title": _("Flow control"),
        "rows": rows,
        "flow": selectors.flow_saturation(now=at),
        "now": at,
        "top": FLOW_TOP_KEYS,
    }
    return TemplateResponse(request, "admin/flow.html", context)


@csrf_exempt  # read-only, token-authenticated; a POST gets a 405, not the CSRF middleware's HTML 403
def metrics_view(request):
    """Prometheus metrics of the whole deployment, read from the database (runs/desk/metrics.py).

    Off (404) unless HARNESS_METRICS_TOKEN is set; then only `Authorization: Bearer <token>` is
    answered (401 otherwise). `manage.py metrics_serve` serves them on an address of their own instead.
    Refusals are problem details, like every API's (harness_site/api/problems.py).
    """
    token = settings.HARNESS["METRICS_TOKEN"]
    if not token:
        detail = "set HARNESS_METRICS_TOKEN, or run manage.py metrics_serve on an address of its own"
        return _problem(request, ApiProblem(404, "metrics-disabled", detail))
    if request.method not in ("GET", "HEAD"):
        return _problem(request, ApiProblem(405, "method-not-allowed", "GET /metrics"), Allow="GET, HEAD")
    try:
        given = bearer_credential(request)
    except exceptions.AuthenticationFailed:
        given = None
    if given is None or not secret_matches(given, token):
        detail = "send Authorization: Bearer <HARNESS_METRICS_TOKEN>"
        return _problem(
            request, ApiProblem(401, "authentication-failed", detail), **{"WWW-Authenticate": 'Bearer realm="metrics"'}
        )
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    try:
        body = encoder(metrics_registry())
    except DatabaseError as exc:
        log.warning("metrics: database unreachable: %s", _one_line(exc))
        return _problem(request, ApiProblem(503, "database-unreachable", _one_line(exc)))
    return HttpResponse(body, content_type=content_type)


def _problem(request, problem: ApiProblem, **headers):
    return problem_json(problem, instance=request.path, headers=headers)
