"""Helpers shared by the operator's desk in the admin: permission checks, confirmation pages for
bulk actions and for single-object buttons. Views stay thin: a form, one service call, a message."""

from collections.abc import Callable

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

CONFIRM_TEMPLATE = "admin/desk/confirm.html"
FORM_TEMPLATE = "admin/desk/form.html"


class ReasonForm(forms.Form):
    reason = forms.CharField(
        label=gettext_lazy("Reason"),
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text=gettext_lazy("Recorded in the audit log."),
    )


class OptionalReasonForm(forms.Form):
    reason = forms.CharField(
        label=gettext_lazy("Reason"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text=gettext_lazy("Recorded in the audit log."),
    )


def require_perm(request, perm: str) -> None:
    """403 unless the user has `perm` ("app.codename"); superusers have all."""
    if not request.user.has_perm(perm):
        raise PermissionDenied(f"You need the permission {perm!r} for this action.")


def has_perm_method(perm: str) -> Callable:
    """A ModelAdmin `has_<name>_permission` method for @admin.action(permissions=[name])."""

    def method(self, request) -> bool:
        return request.user.has_perm(perm)

    return method


def confirm_bulk(
    modeladmin: admin.ModelAdmin,
    request,
    queryset,
    *,
    action: str,
    title: str,
    verb: str,
    do: Callable[[object, forms.Form | None], bool],
    form_class: type[forms.Form] | None = OptionalReasonForm,
    form_kwargs: dict | None = None,
    eligible: Callable[[object], bool] | None = None,
):
    """An admin action with a confirmation page showing the count; on "yes" call do(obj, form) per
    object and report how many changed. Returns None (back to the list) or the confirmation page."""
    objects = list(queryset)
    ready = [o for o in objects if eligible is None or eligible(o)]
    confirmed = request.POST.get("post") == "yes"
    form = form_class(request.POST if confirmed else None, **(form_kwargs or {})) if form_class else None
    if confirmed and (form is None or form.is_valid()):
        changed = sum(bool(do(o, form)) for o in ready)
        skipped = len(objects) - changed
        level = messages.SUCCESS if changed else messages.WARNING
        text = _("%(verb)s %(changed)s of %(total)s selected.") % {
            "verb": verb,
            "changed": changed,
            "total": len(objects),
        }
        if skipped:
            text += " " + _("%(skipped)s skipped (not in a state for this, or already done by someone else).") % {
                "skipped": skipped
            }
        modeladmin.message_user(request, text, level)
        return None
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "opts": modeladmin.opts,
        "objects": objects,
        "count": len(objects),
        "ready_count": len(ready),
        "form": form,
        "action": action,
        "selected_ids": [str(o.pk) for o in objects],
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "verb": verb,
        "is_bulk": True,
    }
    return TemplateResponse(request, CONFIRM_TEMPLATE, context)


def confirm_object(
    modeladmin: admin.ModelAdmin,
    request,
    obj,
    *,
    perm: str,
    title: str,
    verb: str,
    summary: list[str],
    do: Callable[[forms.Form | None], bool],
    form_class: type[forms.Form] | None = OptionalReasonForm,
    form_kwargs: dict | None = None,
    done_url: str | None = None,
    failed_message: str = gettext_lazy("Nothing changed: it is not in a state for this, or someone else acted first."),
):
    """A single-object button: GET shows the confirmation page, POST does it once."""
    require_perm(request, perm)
    form = form_class(posted(request), **(form_kwargs or {})) if form_class else None
    if request.method == "POST" and (form is None or form.is_valid()):
        try:
            changed = do(form)
        except ValueError as exc:  # a service refusing with a reason: show it, never a 500
            if form is None:
                raise
            form.add_error(None, str(exc))
        else:
            if changed:
                modeladmin.message_user(
                    request, _("%(verb)s: %(object)s.") % {"verb": verb, "object": obj}, messages.SUCCESS
                )
            else:
                modeladmin.message_user(request, failed_message, messages.WARNING)
            return HttpResponseRedirect(done_url or change_url(obj))
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "opts": modeladmin.opts,
        "object": obj,
        "summary": summary,
        "form": form,
        "verb": verb,
        "is_bulk": False,
        "cancel_url": change_url(obj),
    }
    return TemplateResponse(request, CONFIRM_TEMPLATE, context)


def change_url(obj) -> str:
    return reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk])


def now():
    """The clock, read once at the edge (views and actions)."""
    return timezone.now()


def posted(request):
    """The POST data to bind a form to, or None on GET. (`request.POST or None` would leave a form
    posted with no fields unbound, so an empty confirmation would silently show the page again.)"""
    return request.POST if request.method == "POST" else None
