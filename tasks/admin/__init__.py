from django.contrib import admin
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from simple_history.admin import SimpleHistoryAdmin

from harness_site.desk import JSON_FORMFIELDS, ReadOnlyAdminMixin
from harness_site.history_words import ReadableHistoryMixin
from tasks.admin import agents, calendars, events, pools  # noqa: F401  (register the Agent, calendar, event and pool admins)
from tasks.admin.guards import GuardAdminMixin  # also registers flags, identities and API tokens
from tasks.admin.objectives import OBJECTIVE_FIELDSET, ObjectiveAdminMixin, ObjectiveStatusFilter
from tasks.admin.rules import RuleDeskMixin
from tasks.models import DiagnosticRecord, TriggerRule
from tasks.triggers.operator import rule_save


@admin.register(TriggerRule)
class TriggerRuleAdmin(GuardAdminMixin, ObjectiveAdminMixin, RuleDeskMixin, ReadableHistoryMixin, SimpleHistoryAdmin):
    """Rule pages: the desk mixin adds preview, lint and action buttons; SimpleHistoryAdmin adds the
    version history with a field diff ("History" button)."""

    formfield_overrides = JSON_FORMFIELDS  # deep, NUL or absurd JSON is a form message
    list_display = (
        "name",
        "enabled",
        "kind",
        "schedule_text",
        "timezone",
        "skill",
        "next_fire_at",
        "objective_column",
        "version",
    )
    list_filter = ("enabled", "kind", "catchup", "timezone", ObjectiveStatusFilter)
    search_fields = ("name", "skill", "reason")
    readonly_fields = ("next_fire_at", "last_slot_at", "version", "created_at", "updated_at", "objective_panel")
    filter_horizontal = ("pools",)
    fieldsets = (
        (None, {"fields": ("name", "enabled", "reason")}),
        (
            _("Schedule"),
            {"fields": ("kind", "cron", "interval_seconds", "run_at", "timezone", "dst_gap", "dst_repeat")},
        ),
        (_("Dedupe"), {"fields": ("dedupe_key_template", "event_key_by_date", "key_preview")}),
        (_("Skill"), {"fields": ("skill", "queue", "params", "agent", "output_schema")}),
        (
            _("Retry"),
            {
                "fields": (
                    "max_attempts",
                    "backoff_base_seconds",
                    "max_delay_seconds",
                    "max_retry_window_seconds",
                    "jitter_min",
                    "jitter_max",
                )
            },
        ),
        (_("Lease"), {"fields": ("lease_ttl_seconds",)}),
        (_("Flow"), {"fields": ("pools",)}),
        (_("Catch-up"), {"fields": ("catchup", "catchup_max_delay_seconds")}),
        OBJECTIVE_FIELDSET,
        (_("State"), {"fields": ("next_fire_at", "last_slot_at", "version", "created_at", "updated_at")}),
    )

    def save_model(self, request, obj, form, change):
        # Through the service, so a rule switched back on records its paused slots (invariant 3).
        rule_save(obj, now=timezone.now())

    @admin.display(description=_("schedule"))
    def schedule_text(self, rule: TriggerRule) -> str:
        if rule.kind == TriggerRule.Kind.CRON:
            return rule.cron
        if rule.kind == TriggerRule.Kind.INTERVAL:
            return gettext("every %(n)ss") % {"n": rule.interval_seconds}
        if rule.kind == TriggerRule.Kind.EVENT:
            sources = ", ".join(s.name for s in rule.sources.all()) or gettext("no source yet")
            return gettext("on event: %(sources)s") % {"sources": sources}
        if rule.run_at:
            return gettext("once at %(at)s") % {"at": f"{rule.run_at:%Y-%m-%d %H:%M:%S %Z}"}
        return gettext("once")


@admin.register(DiagnosticRecord)
class DiagnosticRecordAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    deletable = True

    list_display = ("id", "biz_key", "rule_name", "slot", "attempt", "fence", "worker", "created_at")
    list_filter = ("rule_name",)
    search_fields = ("biz_key",)


# Event intake: sources, deliveries, refusals, counters.
