"""The 403 page in admin chrome: which permission was missing and which desk role grants it,
instead of a bare "403 Forbidden", so the operator knows whom to ask."""

from django.contrib import admin
from django.contrib.auth.models import Permission
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from harness_site.audit.roles import GROUPS
from harness_site.desk import MissingPermission


def permission_denied(request, exception=None):
    perm = exception.perm if isinstance(exception, MissingPermission) else ""
    label = ""
    if perm:
        app_label, _dot, codename = perm.partition(".")
        found = Permission.objects.filter(content_type__app_label=app_label, codename=codename).first()
        label = _(found.name) if found else perm
    roles = [_(name) for name, perms in GROUPS.items() if perm and perm in perms]
    context = {
        **(admin.site.each_context(request) if getattr(request, "user", None) is not None else {}),
        "title": _("You cannot do this"),
        "perm": perm,
        "perm_label": label,
        "roles": roles,
        "roles_text": ngettext(
            "The role %(roles)s has it: ask an administrator to add you to it.",
            "The roles %(roles)s have it: ask an administrator to add you to one.",
            len(roles),
        )
        % {"roles": ", ".join(roles)},
    }
    return render(request, "403.html", context, status=403)
