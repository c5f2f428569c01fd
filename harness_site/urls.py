from django.contrib import admin
from django.http import HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path
from django.utils.translation import gettext_lazy as _
from django_celery_beat import models as beat

from harness_site.display import display_zone_view
from runs.views import apps_view, dashboard_view, flow_view, healthz, metrics_view, status_view, system_banner_view
from tasks.triggers.webhook import webhook
from tasks.views import FlagClearView, FlagListView, FlagSetView, RulePingView

admin.site.site_header = "Agent Harness"
admin.site.site_title = "Agent Harness"
admin.site.index_title = _("Operations")
# The desk's tables need the width (on a 1440 px laptop): the index and breadcrumbs navigate.
admin.site.enable_nav_sidebar = False
# There is no public site: "View site" would lead to a 404 (with DEBUG on, Django's page listing the URLs).
admin.site.site_url = None


def _hide_beat_admin() -> None:
    """django-celery-beat's pages are the tick's machinery, not a second way to schedule work: rules are."""
    for model in (
        beat.PeriodicTask,
        beat.IntervalSchedule,
        beat.CrontabSchedule,
        beat.SolarSchedule,
        beat.ClockedSchedule,
    ):
        if admin.site.is_registered(model):
            admin.site.unregister(model)


_hide_beat_admin()

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    # Browsers ask for /favicon.ico on every page whatever the page links: not a 404 in every log.
    path("favicon.ico", lambda request: HttpResponsePermanentRedirect(static("harness/favicon.svg"))),
    # Prometheus (runs/desk/metrics.py): off unless HARNESS_METRICS_TOKEN is set; a Bearer token then.
    path("metrics", metrics_view, name="metrics"),
    # Before admin/, so the admin's catch-all does not take it; admin_view requires a staff login.
    path("admin/dashboard/", admin.site.admin_view(dashboard_view), name="harness-dashboard"),
    path("admin/display-zone/", admin.site.admin_view(display_zone_view), name="harness-display-zone"),
    path("admin/flow/", admin.site.admin_view(flow_view), name="harness-flow"),
    path("admin/system-banner/", admin.site.admin_view(system_banner_view), name="harness-system-banner"),
    # The staff landing page is the status board (runs/desk/status.py); Django's list of pages moves one click away.
    path("admin/", admin.site.admin_view(status_view), name="harness-status"),
    path("admin/apps/", admin.site.admin_view(apps_view), name="harness-apps"),
    path("admin/", admin.site.urls),
    # The REST API (harness_site/api, docs/api.md): rules, runs, delayed runs, dead letters; schema and docs.
    path("api/v1/", include("harness_site.api.urls")),
    # Readiness flags and heartbeat pings (tasks/views.py): the REST API's tokens and problem details.
    path("api/flags", FlagListView.as_view(), name="api-flags"),
    path("api/flags/set", FlagSetView.as_view(), name="api-flags-set"),
    path("api/flags/clear", FlagClearView.as_view(), name="api-flags-clear"),
    path("api/rules/<str:rule>/ping", RulePingView.as_view(), name="api-rule-ping"),
    # Any source name reaches the view, so an unknown one gets a JSON refusal, not an HTML 404;
    # without the slash too, since a POST cannot follow an APPEND_SLASH redirect.
    path("hooks/<str:source>/", webhook, name="event-webhook"),
    path("hooks/<str:source>", webhook),
]

# A refusal in admin chrome, naming the missing permission and the role that has it.
handler403 = "harness_site.errors.permission_denied"
