"""Helpers shared by the operator's desk in the admin: permission checks, confirmation pages for
bulk actions and for single-object buttons. Views stay thin: a form, one service call, a message."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import QuerySet
from django.forms.fields import InvalidJSONInput
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from tasks.rules import json_limits

if TYPE_CHECKING:
    from django.utils.functional import _StrOrPromise as StrOrPromise

# An admin's fieldsets as a page may edit them: each options dict a plain dict (django-stubs type the
# options as a TypedDict, which an edit by key cannot keep).
Fieldsets = list[tuple["StrOrPromise | None", dict[str, Any]]]


def fieldsets_copy(spec: Iterable[tuple[StrOrPromise | None, Mapping[str, Any]]]) -> Fieldsets:
    """`spec` (a ModelAdmin's fieldsets) with each options dict copied, to be edited."""
    return [(name, dict(opts)) for name, opts in spec]


if TYPE_CHECKING:
    from django.http import HttpRequest

    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = object


class ReadOnlyAdminMixin(_ModelAdmin):
    """Put before admin.ModelAdmin: records that services write and the admin only shows. Nobody adds or
    changes one here; `deletable` admins let those with the delete permission remove rows."""

    deletable = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.deletable and super().has_delete_permission(request, obj)


CONFIRM_TEMPLATE = "admin/desk/confirm.html"
FORM_TEMPLATE = "admin/desk/form.html"


def quiet_flag(on: bool, label: str | StrOrPromise, *, off: str | StrOrPromise = "", tone: str = "") -> str:
    """A yes/no column without Django's red ✗ for "no": `label` when on (in `tone`, a desk.css class),
    `off` (plain) when not. Red is for what is wrong, and a run that is not a trial is not."""
    if on:
        return format_html('<span class="flag {}">{}</span>', tone, label)
    return str(off)


# The longest reason any column keeps (TriggerRule.pause_reason); longer is a form message, not a
# database error on PostgreSQL.
MAX_REASON_CHARS = 500


class ReasonForm(forms.Form):
    reason = forms.CharField(
        label=gettext_lazy("Reason"),
        max_length=MAX_REASON_CHARS,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text=gettext_lazy("Recorded in the audit log."),
    )


class OptionalReasonForm(forms.Form):
    reason = forms.CharField(
        label=gettext_lazy("Reason"),
        max_length=MAX_REASON_CHARS,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text=gettext_lazy("Recorded in the audit log."),
    )


def form_reason(form: forms.Form | None) -> str:
    """The reason typed on a confirmation page ("" for a page without a form)."""
    return form.cleaned_data["reason"] if form is not None else ""


class SafeJSONField(forms.JSONField):
    """The admin's JSON field within tasks.rules.json_limits: too deep, a NUL or an absurd number is
    a form message, never a RecursionError or a database error (a 500)."""

    default_error_messages = {
        json_limits.DEPTH: gettext_lazy("This JSON is nested deeper than %(limit)s levels."),
        json_limits.NUL: gettext_lazy("This JSON contains a NUL character (\\u0000), which cannot be stored."),
        json_limits.NUMBER: gettext_lazy(
            "This JSON has a number that is not finite or has more than %(limit)s digits."
        ),
        json_limits.UNICODE: gettext_lazy("This JSON has a lone surrogate escape (e.g. \\ud800), which is not text."),
    }

    def to_python(self, value):
        if not self.disabled and isinstance(value, str) and value.strip():
            try:
                json_limits.loads(value)
            except json_limits.JsonLimitError as exc:
                limit = json_limits.MAX_DEPTH if exc.code == json_limits.DEPTH else json_limits.MAX_INT_DIGITS
                raise forms.ValidationError(
                    self.error_messages[exc.code], code=exc.code, params={"limit": limit}
                ) from None
            except ValueError:
                pass  # not JSON: the parent says so in its own words
        return super().to_python(value)

    def bound_data(self, data, initial):
        if self.disabled or data is None:
            return super().bound_data(data, initial)
        try:
            return json_limits.loads(data)
        except ValueError:  # shown back as typed, with the error beside it
            return InvalidJSONInput(data)


# For ModelAdmin.formfield_overrides of every admin with an editable JSON field.
JSON_FORMFIELDS: Mapping[type[models.Field[Any, Any]], Mapping[str, Any]] = {
    models.JSONField: {"form_class": SafeJSONField}
}


def desk_object(modeladmin: admin.ModelAdmin, request, object_id: str):
    """The object a desk button acts on, or a 404 with a reason for an unknown or malformed id."""
    obj = modeladmin.get_object(request, object_id)
    if obj is None:
        raise Http404(
            _("There is no %(name)s with id %(id)r.") % {"name": modeladmin.opts.verbose_name, "id": object_id}
        )
    return obj


class MissingPermission(PermissionDenied):
    """A refusal that names what is missing, so the 403 page can say which role grants it."""

    def __init__(self, perm: str):
        super().__init__(perm)
        self.perm = perm


def require_perm(request, perm: str) -> None:
    """403 unless the user has `perm` ("app.codename"); superusers have all."""
    if not request.user.has_perm(perm):
        raise MissingPermission(perm)


def has_perm_method(perm: str) -> Callable:
    """A ModelAdmin `has_<name>_permission` method for @admin.action(permissions=[name])."""

    def method(self, request) -> bool:
        return request.user.has_perm(perm)

    return method


M = TypeVar("M", bound=models.Model)


def form_data(form: forms.Form | None) -> dict[str, Any]:
    """The cleaned data of a confirmation's form (none without a form class)."""
    return form.cleaned_data if form is not None else {}


def confirm_bulk(
    modeladmin: admin.ModelAdmin[M],
    request,
    queryset: QuerySet[M],
    *,
    action: str,
    title: str,
    verb: str,
    do: Callable[[M, forms.Form | None], bool],
    form_class: type[forms.Form] | None = OptionalReasonForm,
    form_kwargs: dict | None = None,
    eligible: Callable[[M], bool] | None = None,
    button: str | None = None,
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
        "button": button or verb,
        "is_bulk": True,
    }
    return TemplateResponse(request, CONFIRM_TEMPLATE, context)


NOTHING_CHANGED = gettext_lazy("Nothing changed: it is not in a state for this, or someone else acted first.")


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
    failed_message: StrOrPromise = NOTHING_CHANGED,
    button: str | None = None,
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
                obj.refresh_from_db()  # the message shows the new state, not the one before
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
        "button": button or verb,
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
