"""Admin for the rules' guards: the rule page's guard fieldsets, the "why did or didn't it run at
that slot?" view; readiness flags, service identities and API tokens."""

from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from harness_site.api.tokens import token_create, token_hash
from harness_site.desk import JSON_FORMFIELDS, desk_object, fieldsets_copy
from tasks.admin.base import RuleAdminBase
from tasks.admin.explain_html import explain_sentence
from tasks.flags import FlagError, flag_clear, flag_set
from tasks.models import ApiToken, ReadinessFlag, ServiceIdentity, TriggerRule
from tasks.models.access import ALL_SCOPES, API_SCOPES
from tasks.models.fields import model_field
from tasks.triggers.explain import SlotParseError, parse_slot, slot_explanation, trigger_explanation

if TYPE_CHECKING:
    _RuleForm = forms.ModelForm[TriggerRule]
else:
    _RuleForm = object

GUARD_FIELDSETS = (
    (
        _("Readiness"),
        {"fields": ("depends_on", "depends_scope", "not_ready_policy", "ready_recheck_seconds", "ready_deadline")},
    ),
    (
        _("Windows and calendar"),
        {
            "fields": (
                "spread_seconds",
                "spread_random",
                "start_window_seconds",
                "hours_start",
                "hours_end",
                "outside_hours",
                "weekdays",
                "excluded_dates",
                "business_calendar",
            )
        },
    ),
    (_("Overlap"), {"fields": ("overlap", "object_key_template")}),
    (_("Backpressure and coalescing"), {"fields": ("recoverability", "coalesce_window_seconds")}),
    (_("Heartbeat"), {"fields": ("heartbeat_every_seconds", "heartbeat_grace_seconds", "last_ping_at")}),
    (_("Snapshot and identity"), {"fields": ("snapshot_fields", "identity")}),
)
CATCHUP_EXTRA = ("catchup_max_count", "catchup_spacing_seconds", "catchup_approval_threshold")


def _defaults() -> dict:
    """Guard fields a form may leave out: a missing value means the model default."""
    out = {}
    for name in (
        "not_ready_policy",
        "ready_recheck_seconds",
        "outside_hours",
        "overlap",
        "recoverability",
        "coalesce_window_seconds",
        "spread_seconds",
        "catchup_spacing_seconds",
        "heartbeat_grace_seconds",
        "depends_on",
        "excluded_dates",
        "snapshot_fields",
        "depends_scope",
    ):
        out[name] = model_field(TriggerRule, name).get_default()
    return out


class GuardDefaultsForm(_RuleForm):
    """Put before a rule form: a guard field left empty takes the model's default (guard_defaults)."""

    guard_defaults: dict[str, Any] = {}

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        for name in self.guard_defaults:
            if name in self.fields:
                self.fields[name].required = False

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        for name, default in self.guard_defaults.items():
            if name in self.fields and data.get(name) in (None, ""):
                data[name] = default
        return data


class GuardAdminMixin(RuleAdminBase):
    """Mixed into TriggerRuleAdmin (first, so its fieldsets and URLs are added to the desk's)."""

    def get_readonly_fields(self, request, obj=None):
        return (*super().get_readonly_fields(request, obj), "last_ping_at")

    def get_fieldsets(self, request, obj=None):
        fieldsets = fieldsets_copy(super().get_fieldsets(request, obj))
        for _name, opts in fieldsets:
            if "catchup" in opts.get("fields", ()):  # by field, not by its (translated) title
                opts["fields"] = [*opts.get("fields", ()), *(f for f in CATCHUP_EXTRA if f not in opts["fields"])]
        present = {f for _n, o in fieldsets for f in o.get("fields", ())}
        for name, guard_opts in GUARD_FIELDSETS:
            if not present.intersection(guard_opts["fields"]):
                fieldsets.append((name, {**guard_opts, "classes": ("collapse",)}))
        return fieldsets

    def get_form(
        self, request: HttpRequest, obj: TriggerRule | None = None, change: bool = False, **kwargs: Any
    ) -> "type[forms.ModelForm[TriggerRule]]":
        base = super().get_form(request, obj, change, **kwargs)
        # The desk's form class is chosen at run time (type checkers take no such base in a class statement).
        form = type("GuardDefaultsForm", (GuardDefaultsForm, base), {"guard_defaults": _defaults()})
        return cast("type[forms.ModelForm[TriggerRule]]", form)

    def get_urls(self):
        wrap = self.admin_site.admin_view
        mine = [path("<path:object_id>/explain/", wrap(self.explain_view), name="tasks_triggerrule_explain")]
        return mine + super().get_urls()

    def explain_view(self, request, object_id):
        rule = desk_object(self, request, object_id)
        if not self.has_view_permission(request, rule):
            raise PermissionDenied
        text = request.GET.get("slot", "").strip()
        biz_key = request.GET.get("biz_key", "").strip()[:255]
        found, error, slot = None, "", None
        if "\x00" in biz_key or "\x00" in text:
            # PostgreSQL refuses a NUL in a query parameter: say so instead of a 500.
            error = gettext("A business key or slot cannot contain a NUL character.")
        elif biz_key:
            found = trigger_explanation(rule=rule, biz_key=biz_key, now=timezone.now())
        elif rule.kind == TriggerRule.Kind.EVENT:
            # An event rule has no schedule, so no slot to explain: say where its runs are instead.
            error = gettext(
                "This is an event rule: it has no slots, it runs when an event arrives. Its runs and "
                "refused events are under Runs and Event deliveries."
            )
        elif text:
            try:
                slot = parse_slot(text, rule=rule)
                found = slot_explanation(rule=rule, slot=slot, now=timezone.now())
            except SlotParseError as exc:
                error = str(exc)
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Explain a slot of %(rule)s") % {"rule": rule.name},
            "opts": self.opts,
            "object": rule,
            "slot_text": text,
            "biz_key": biz_key,
            "result": found.result if found else None,
            "sentence": explain_sentence(request, rule, found, slot) if found else "",
            "error": error,
            "recent": rule.decisions.order_by("-created_at", "-id")[:20],
            "change_url": reverse("admin:tasks_triggerrule_change", args=[rule.pk]),
        }
        return TemplateResponse(request, "admin/tasks/triggerrule/explain.html", context)


class FlagForm(forms.ModelForm):
    class Meta:
        model = ReadinessFlag
        fields = ("name", "scope", "note")


@admin.register(ReadinessFlag)
class ReadinessFlagAdmin(admin.ModelAdmin):
    """Set a flag with "Add", clear it with "Delete" (or the bulk action); both go through the services."""

    form = FlagForm
    list_display = ("name", "scope", "set_at", "set_by", "note")
    list_filter = ("name",)
    search_fields = ("name", "scope")
    actions = ["clear_flags"]

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # a flag is set or cleared, never edited into another flag

    def save_model(self, request, obj, form, change):
        try:
            flag, _ = flag_set(
                name=obj.name,
                scope=obj.scope,
                note=obj.note or "",
                actor=request.user.get_username(),
                now=timezone.now(),
            )
        except FlagError as exc:  # the form validated shape already; this is the service's stricter check
            messages.error(request, str(exc))
            return
        obj.pk = flag.pk

    def delete_model(self, request, obj):
        flag_clear(name=obj.name, scope=obj.scope, actor=request.user.get_username())

    def delete_queryset(self, request, queryset):
        for flag in queryset:
            flag_clear(name=flag.name, scope=flag.scope, actor=request.user.get_username())

    @admin.action(description=_("Clear selected flags"), permissions=["delete"])
    def clear_flags(self, request, queryset):
        n = sum(flag_clear(name=f.name, scope=f.scope, actor=request.user.get_username()) for f in queryset)
        self.message_user(request, gettext("Cleared %(n)s flag(s).") % {"n": n})


@admin.register(ServiceIdentity)
class ServiceIdentityAdmin(admin.ModelAdmin):
    formfield_overrides = JSON_FORMFIELDS  # deep, NUL or absurd JSON is a form message
    list_display = ("name", "enabled", "allowed_skills", "description")
    search_fields = ("name",)


class ApiTokenForm(forms.ModelForm):
    """A new token: a name, its user and the scopes it may use; the secret is made by token_create."""

    scopes = forms.MultipleChoiceField(
        label=_("scopes"),
        choices=[(ALL_SCOPES, _("all of its user's permissions"))] + [(s, s) for s in API_SCOPES],
        widget=forms.CheckboxSelectMultiple,
        help_text=_("What the token may do in the API; never more than its user may."),
    )

    class Meta:
        model = ApiToken
        fields = ("name", "user", "scopes")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Created here or with `manage.py harness token create`; the secret is shown once, only its hash is
    kept. Revoking is deleting: the token stops working at once."""

    list_display = ("name", "user", "scopes", "created_at", "last_used_at")
    search_fields = ("name", "user__username")
    readonly_fields = ("name", "user", "scopes", "created_at", "last_used_at")
    actions = ["delete_selected"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiTokenForm
        return super().get_form(request, obj, change, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else ()

    def get_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else ("name", "user", "scopes")

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # a token is made or revoked, never edited into another one

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        # A token acts as its user: only a superuser may mint one for somebody else.
        if db_field.name == "user" and not request.user.is_superuser:
            kwargs["queryset"] = get_user_model().objects.filter(pk=request.user.pk)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request, obj, form, change) -> None:
        token = token_create(name=obj.name, user=obj.user, now=timezone.now(), scopes=list(form.cleaned_data["scopes"]))
        obj.pk = ApiToken.objects.get(token_hash=token_hash(token)).pk
        messages.warning(
            request,
            format_html(
                '{} <code id="new-token">{}</code>',
                gettext("Copy this token now: it is shown only once."),
                token,
            ),
        )
