"""/api/v1/: the REST API, its OpenAPI 3 schema and its docs (Swagger UI, Redoc: harness_site/api/docs.py).
Any other path under /api/ is a 404 problem document (harness_site/api/surface.py)."""

from django.urls import path

from harness_site.api import calendars, deadletters, incidents, rules, runs, status
from harness_site.api.docs import PublicRedocView, PublicSchemaView, PublicSwaggerView

app_name = "api"


urlpatterns = [
    path("schema/", PublicSchemaView.as_view(), name="schema"),
    path("docs/", PublicSwaggerView.as_view(url_name="api:schema"), name="docs"),
    path("redoc/", PublicRedocView.as_view(url_name="api:schema"), name="redoc"),
    path("status", status.StatusView.as_view(), name="status"),
    path("rules", rules.RuleListView.as_view(), name="rules"),
    path("rules/<str:name>", rules.RuleDetailView.as_view(), name="rule"),
    path("rules/<str:name>/pause", rules.RulePauseView.as_view(), name="rule-pause"),
    path("rules/<str:name>/resume", rules.RuleResumeView.as_view(), name="rule-resume"),
    path("rules/<str:name>/run-now", rules.RuleRunNowView.as_view(), name="rule-run-now"),
    path("rules/<str:name>/trial", rules.RuleTrialView.as_view(), name="rule-trial"),
    path("rules/<str:name>/rerun", rules.RuleRerunView.as_view(), name="rule-rerun"),
    path("rules/<str:name>/explain", rules.RuleExplainView.as_view(), name="rule-explain"),
    path("rules/<str:name>/preview", rules.RulePreviewView.as_view(), name="rule-preview"),
    path("rules/<str:name>/plan", rules.RulePlanView.as_view(), name="rule-plan"),
    path("calendars", calendars.CalendarListView.as_view(), name="calendars"),
    path("calendars/<str:name>", calendars.CalendarDetailView.as_view(), name="calendar"),
    path("calendars/<str:name>/days", calendars.CalendarDaysView.as_view(), name="calendar-days"),
    path("runs", runs.RunListView.as_view(), name="runs"),
    path("runs/<str:run_id>", runs.RunDetailView.as_view(), name="run"),
    path("runs/<str:run_id>/retry", runs.RunRetryView.as_view(), name="run-retry"),
    path("runs/<str:run_id>/cancel", runs.RunCancelView.as_view(), name="run-cancel"),
    path("incidents", incidents.IncidentListView.as_view(), name="incidents"),
    path("incidents/<str:incident_id>", incidents.IncidentDetailView.as_view(), name="incident"),
    path("deadletters", deadletters.DeadLetterListView.as_view(), name="deadletters"),
    path("deadletters/<str:ticket_id>", deadletters.DeadLetterDetailView.as_view(), name="deadletter"),
    path("deadletters/<str:ticket_id>/replay", deadletters.DeadLetterReplayView.as_view(), name="deadletter-replay"),
    path("deadletters/<str:ticket_id>/close", deadletters.DeadLetterCloseView.as_view(), name="deadletter-close"),
    path("deadletters/<str:ticket_id>/assign", deadletters.DeadLetterAssignView.as_view(), name="deadletter-assign"),
]
