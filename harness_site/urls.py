from django.contrib import admin
from django.urls import path

from runs.views import healthz

admin.site.site_header = "Agent Harness"
admin.site.site_title = "Agent Harness"
admin.site.index_title = "Operations"

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
]
