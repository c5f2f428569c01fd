"""The page a locked-out login gets (django-axes' AXES_LOCKOUT_CALLABLE): the admin's login page with
the reason and when to try again, status 429, never a bare 403 or a 500."""

from django.conf import settings
from django.contrib import admin
from django.shortcuts import render

LOCKED_OUT_STATUS = 429


def lockout_response(request, original_response=None, credentials=None):
    minutes = max(1, round(settings.AXES_COOLOFF_TIME.total_seconds() / 60))
    context = {**admin.site.each_context(request), "title": admin.site.site_title, "cooloff_minutes": minutes}
    return render(request, "admin/locked_out.html", context, status=LOCKED_OUT_STATUS)
