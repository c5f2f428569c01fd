"""Admin pages for event intake: sources (editable), deliveries, refusals and counters (read-only)."""

from datetime import timedelta

from django.contrib import admin
from django.db.models import Sum
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from harness_site.desk import JSON_FORMFIELDS, ReadOnlyAdminMixin
from tasks.models import EventDelivery, EventMetric, EventRefusal, RefusalCount, TriggerSource
from tasks.triggers.events import ACCEPTED, DUPLICATE, REDELIVERY

NOT_REFUSALS = (ACCEPTED, DUPLICATE, REDELIVERY)


class _RecordAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Records are written by the intake only; the admin shows them (and may prune them)."""

    deletable = True


@admin.register(TriggerSource)
class TriggerSourceAdmin(admin.ModelAdmin):
    formfield_overrides = JSON_FORMFIELDS  # deep, NUL or absurd JSON is a form message
    list_display = ("name", "kind", "enabled", "rule", "identity", "secret_status", "accepted", "refused")
    list_filter = ("kind", "enabled")
    search_fields = ("name", "identity", "description")
    readonly_fields = ("endpoint", "secret_status", "counters", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "enabled", "kind", "description", "identity", "rule")}),
        (
            _("Webhook"),
            {
                "fields": (
                    "endpoint",
                    "signature_scheme",
                    "secret_env",
                    "secret_env_next",
                    "secret_status",
                    "max_body_bytes",
                )
            },
        ),
        (
            _("Payload"),
            {"fields": ("object_id_path", "action_path", "version_path", "snapshot_fields", "reference_fields")},
        ),
        (_("File sensor"), {"fields": ("watch_dir", "require_ready_marker", "settle_seconds")}),
        (_("Counters"), {"fields": ("counters", "created_at", "updated_at")}),
    )

    @admin.display(description=_("secret"))
    def secret_status(self, source: TriggerSource) -> str:
        # Whether each variable is granted, set and strong in this process, never its value. Anything
        # but "set" is a warning: the webhook answers 503 until it is fixed.
        states = source.secret_states()
        if not states:
            return "-"
        lines = []
        for name, state in states:
            text = SECRET_STATES[state] % {"variable": f"${name}"}
            lines.append((text,) if state == "ok" else (format_html('<strong class="errornote">{}</strong>', text),))
        if source.kind == TriggerSource.Kind.WEBHOOK and source.signature_scheme == TriggerSource.Scheme.HARNESS_V1:
            warning = gettext("harness-v1 does not sign the delivery id; move the sender to harness")
            lines.append((format_html("<em>{}</em>", warning),))
        return format_html_join(mark_safe("<br>"), "{}", lines)

    @admin.display(description=_("webhook URL"))
    def endpoint(self, source: TriggerSource) -> str:
        if source.kind != TriggerSource.Kind.WEBHOOK or not source.name:
            return "-"
        return reverse("event-webhook", kwargs={"source": source.name})

    @admin.display(description=_("accepted"))
    def accepted(self, source: TriggerSource) -> int:
        return _sum(source.name, outcome__in=[ACCEPTED])

    @admin.display(description=_("refused"))
    def refused(self, source: TriggerSource) -> int:
        return _sum(source.name, exclude=NOT_REFUSALS)

    @admin.display(description=_("intake counters"))
    def counters(self, source: TriggerSource) -> str:
        rows = EventMetric.objects.filter(source_name=source.name).order_by("outcome")
        if not source.pk or not rows:
            return gettext("none yet")
        table = format_html(
            "<table>{}</table>",
            format_html_join(
                "",
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                ((m.outcome, m.count, f"{m.last_at:%Y-%m-%d %H:%M:%S} UTC") for m in rows),
            ),
        )
        counted = RefusalCount.objects.filter(source_name=source.name).order_by("-hour", "reason")[:24]
        if not counted:
            return table
        return format_html(
            "{}<p>{}</p><table>{}</table>",
            table,
            gettext("Refused before authentication (counted per hour, not stored one by one):"),
            format_html_join(
                "",
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                ((f"{c.hour:%Y-%m-%d %H}:00 UTC", c.reason, c.count) for c in counted),
            ),
        )


SECRET_STATES = {
    "ok": _("%(variable)s set"),
    "unset": _("%(variable)s NOT SET"),
    "not_granted": _("%(variable)s NOT GRANTED (not a secret this deployment hands out)"),
    "not_declared": _("%(variable)s NOT DECLARED for webhook signing (HARNESS_GRANTS)"),
    "weak": _("%(variable)s TOO WEAK (see docs/events.md for the minimum)"),
}


def _sum(source_name: str, *, outcome__in=None, exclude=()) -> int:
    qs = EventMetric.objects.filter(source_name=source_name)
    if outcome__in is not None:
        qs = qs.filter(outcome__in=outcome__in)
    if exclude:
        qs = qs.exclude(outcome__in=exclude)
    return qs.aggregate(n=Sum("count"))["n"] or 0


@admin.register(EventDelivery)
class EventDeliveryAdmin(_RecordAdmin):
    list_display = ("received_at", "source", "delivery_id", "channel", "biz_key", "run_link", "run_created")
    list_filter = ("source", "channel", "run_created")
    search_fields = ("delivery_id", "biz_key")
    date_hierarchy = "received_at"

    @admin.display(description=_("run"))
    def run_link(self, delivery: EventDelivery) -> str:
        if delivery.run_id is None:
            return "-"
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:runs_taskrun_change", args=[delivery.run_id]), delivery.run_id
        )


@admin.register(EventRefusal)
class EventRefusalAdmin(_RecordAdmin):
    list_display = (
        "created_at",
        "source_name",
        "channel",
        "reason",
        "status",
        "authenticated",
        "delivery_id",
        "detail",
    )
    list_filter = ("authenticated", "reason", "channel", "source_name")
    search_fields = ("source_name", "delivery_id", "detail")
    date_hierarchy = "created_at"

    def changelist_view(self, request, extra_context=None):
        # Refusals before authentication are mostly counted, not listed: show the last day's counts here.
        counted = (
            RefusalCount.objects.filter(hour__gte=timezone.now() - timedelta(hours=24))
            .values("source_name", "reason")
            .annotate(n=Sum("count"))
            .order_by("-n")[:20]
        )
        extra_context = {
            **(extra_context or {}),
            "counted_refusals": [
                {"source": c["source_name"] or gettext("(unknown sources)"), "reason": c["reason"], "n": c["n"]}
                for c in counted
            ],
            "counted_refusals_url": reverse("admin:tasks_refusalcount_changelist"),
        }
        return super().changelist_view(request, extra_context=extra_context)


@admin.register(RefusalCount)
class RefusalCountAdmin(_RecordAdmin):
    deletable = False
    list_display = ("hour", "source_label", "reason", "status", "count", "last_at")
    list_filter = ("reason",)
    search_fields = ("source_name",)
    date_hierarchy = "hour"

    @admin.display(description=_("source"), ordering="source_name")
    def source_label(self, row: RefusalCount) -> str:
        return row.source_name or gettext("(unknown sources)")


@admin.register(EventMetric)
class EventMetricAdmin(_RecordAdmin):
    deletable = False
    list_display = ("source_label", "outcome", "count", "last_at")
    list_filter = ("outcome",)
    search_fields = ("source_name",)

    @admin.display(description=_("source"), ordering="source_name")
    def source_label(self, metric: EventMetric) -> str:
        return metric.source_name or gettext("(unknown sources)")
