"""Admin pages for alert channels (with "send test alert") and the alert outbox (read-only)."""

from typing import TYPE_CHECKING

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from deadletters import alert_rules as rules
from deadletters.alert_delivery import recipients_of
from deadletters.alert_health import channel_failing, channel_problem, channels_with_health
from deadletters.alert_texts import KIND_LABELS, alert_title
from deadletters.alerts import alert_send_test
from deadletters.models import Alert, AlertChannel
from harness_site.desk import ReadOnlyAdminMixin
from harness_site.templatetags.harness import ago_html, clip_html, pretty_json

if TYPE_CHECKING:
    from django.utils.functional import _StrOrPromise as StrOrPromise

    from deadletters.alert_health import HealthChannel


class AlertChannelForm(forms.ModelForm):
    # The URL may carry a token: never rendered back into the page; blank on edit keeps it.
    url = forms.URLField(
        label=_("webhook URL"),
        required=False,
        max_length=1000,
        assume_scheme="https",
        widget=forms.PasswordInput(render_value=False, attrs={"size": 80, "autocomplete": "off"}),
        help_text=_(
            "Webhook channels only. Not shown again once saved (it may carry a token); "
            "leave blank to keep the current one."
        ),
    )

    class Meta:
        model = AlertChannel
        fields = ("name", "kind", "url", "format", "recipients", "min_severity", "language", "enabled")

    def clean_url(self) -> str:
        url = self.cleaned_data.get("url") or ""
        if not url and self.instance.pk:
            return self.instance.url
        if url and not url.startswith(("http://", "https://")):
            raise ValidationError(_("The webhook URL must start with http:// or https://."))
        return url

    def clean(self):
        super().clean()
        data = self.cleaned_data
        kind = data.get("kind")
        if kind == AlertChannel.Kind.WEBHOOK and not data.get("url"):
            self.add_error("url", _("A webhook channel needs a URL."))
        if kind == AlertChannel.Kind.EMAIL:
            for address in recipients_of(AlertChannel(recipients=data.get("recipients") or "")):
                try:
                    validate_email(address)
                except ValidationError:
                    self.add_error("recipients", _("%(address)s is not an email address.") % {"address": address})
        return data


@admin.register(AlertChannel)
class AlertChannelAdmin(admin.ModelAdmin):
    form = AlertChannelForm
    list_display = ("health", "name", "kind", "target", "min_severity", "enabled", "delivered", "error_column")
    list_display_links = ("name",)
    list_filter = ("kind", "enabled", "min_severity")
    search_fields = ("name",)
    actions = ["send_test_alert"]
    readonly_fields = ("health_note",)

    def get_queryset(self, request):
        return channels_with_health(super().get_queryset(request))

    def get_fields(self, request, obj=None):
        fields = list(super().get_fields(request, obj))
        return ["health_note", *[f for f in fields if f != "health_note"]] if obj is not None else fields

    @admin.display(description=_("health"))
    def health(self, obj: AlertChannel) -> str:
        if not obj.enabled:
            return format_html('<span class="quiet" title="{}">○</span>', _("disabled"))
        if channel_failing(obj):
            return format_html('<span class="bad" title="{}">✘</span>', _("failing"))
        return format_html('<span class="ok" title="{}">✔</span>', _("delivering"))

    @admin.display(description=_("last delivered"), ordering="last_delivered_at")
    def delivered(self, obj: "HealthChannel") -> "StrOrPromise":
        return ago_html(obj.last_delivered_at) if obj.last_delivered_at else _("never")

    @admin.display(description=_("last error"))
    def error_column(self, obj: "HealthChannel") -> "StrOrPromise":
        if channel_problem(obj) == "no_recipients":
            return format_html('<span class="bad">{}</span>', _("no recipients and ADMINS is unset"))
        if channel_problem(obj) == "url_not_allowed":
            return format_html('<span class="bad">{}</span>', _("URL not in HARNESS_ALERT_URL_ALLOW"))
        if not obj.last_error:
            return "—"
        return format_html(
            '<span class="bad">{}</span><br>{}', clip_html(obj.last_error, 60), ago_html(obj.last_error_at)
        )

    @admin.display(description=_("health"))
    def health_note(self, obj: "HealthChannel") -> "StrOrPromise":
        if channel_problem(obj) == "no_recipients":
            return format_html(
                '<p class="errornote">{}</p>',
                _(
                    "This email channel names no recipients and ADMINS is not set: it cannot deliver. "
                    "Set ADMINS (or list recipients here), then enable it."
                ),
            )
        if channel_problem(obj) == "url_not_allowed":
            return format_html(
                '<p class="errornote">{}</p>',
                _(
                    "This webhook URL is not under HARNESS_ALERT_URL_ALLOW: every delivery is refused. "
                    "Ask whoever runs the harness to add the receiver's host there, or point the channel elsewhere."
                ),
            )
        if channel_failing(obj):
            return format_html(
                '<p class="errornote">{}</p>', _("The latest delivery failed: %(error)s") % {"error": obj.last_error}
            )
        return _("Last delivered: %(when)s") % {"when": obj.last_delivered_at or _("never")}

    @admin.display(description=_("target"))
    def target(self, obj: AlertChannel) -> "StrOrPromise":
        if obj.kind == AlertChannel.Kind.WEBHOOK:
            return rules.redact_url(obj.url)
        if obj.kind == AlertChannel.Kind.EMAIL:
            return ", ".join(recipients_of(obj)) or _("site ADMINS")
        return "harness.alerts.channel"

    @admin.action(description=_("Send a test alert"), permissions=["change"])
    def send_test_alert(self, request, queryset):
        now = timezone.now()
        count = 0
        for channel in queryset:
            alert_send_test(channel=channel, now=now)
            count += 1
        self.message_user(
            request,
            ngettext(
                "A test alert was queued for %(count)d channel; see the alert outbox for the outcome.",
                "A test alert was queued for %(count)d channels; see the alert outbox for the outcome.",
                count,
            )
            % {"count": count},
            messages.SUCCESS,
        )


class AlertKindFilter(admin.SimpleListFilter):
    """The kinds by name, not by code."""

    title = _("kind")
    parameter_name = "kind"

    def lookups(self, request, model_admin):
        return [(code, label) for code, label in KIND_LABELS.items()]

    def queryset(self, request, queryset):
        return queryset.filter(kind=self.value()) if self.value() else queryset


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The outbox, read-only: what was recorded, where it went, and why a delivery failed."""

    list_display = (
        "created_at",
        "severity",
        "kind_label",
        "channel_name",
        "state",
        "attempts",
        "sent_at",
        "title",
        "last_error",
    )
    list_filter = ("state", "severity", AlertKindFilter, "channel")
    search_fields = ("dedupe_key", "group_key", "payload__biz_key")
    date_hierarchy = "created_at"
    list_select_related = ("channel",)
    readonly_fields = (
        "channel",
        "severity",
        "kind_label",
        "state",
        "dedupe_key_code",
        "group_key_code",
        "window_start",
        "payload_json",
        "summary",
        "created_at",
        "next_attempt_at",
        "sent_at",
        "attempts",
        "last_error",
    )
    fields = readonly_fields  # the page shows these, each worded for people, not the raw columns

    @admin.display(description=_("kind"), ordering="kind")
    def kind_label(self, obj: Alert) -> str:
        return str(KIND_LABELS.get(obj.kind, obj.kind))

    @admin.display(description=_("dedupe key"))
    def dedupe_key_code(self, obj: Alert) -> str:
        return format_html("<code>{}</code>", obj.dedupe_key)

    @admin.display(description=_("storm group"))
    def group_key_code(self, obj: Alert) -> str:
        return format_html("<code>{}</code>", obj.group_key)

    @admin.display(description=_("payload"))
    def payload_json(self, obj: Alert) -> str:
        return format_html('<pre class="json">{}</pre>', pretty_json(obj.payload))

    @admin.display(description=_("channel"), ordering="channel__name")
    def channel_name(self, obj: Alert) -> "StrOrPromise":
        return obj.channel.name if obj.channel is not None else _("log (built in)")

    @admin.display(description=_("title"))
    def title(self, obj: Alert) -> str:
        return alert_title(obj.payload or {})  # in the reader's language
