from django.contrib import admin
from django.utils.translation import gettext_lazy as _
from simple_history.admin import SimpleHistoryAdmin

from . import agent_admin  # noqa: F401  (registers the Agent admin)
from .admin_desk import RuleDeskMixin
from .guard_admin import GuardAdminMixin  # also registers flags, identities and API tokens
from .models import DiagnosticRecord, TriggerRule


@admin.register(TriggerRule)
class TriggerRuleAdmin(GuardAdminMixin, RuleDeskMixin, SimpleHistoryAdmin):
    """Rule pages: the desk mixin adds preview, lint and action buttons; SimpleHistoryAdmin adds the
    version history with a field diff ("History" button)."""

    list_display = ("name", "enabled", "kind", "schedule_text", "timezone", "skill", "next_fire_at", "version")
    list_filter = ("enabled", "kind", "catchup", "timezone")
    search_fields = ("name", "skill", "reason")
    readonly_fields = ("next_fire_at", "last_slot_at", "version", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "enabled", "reason")}),
        (_("Schedule"),
         {"fields": ("kind", "cron", "interval_seconds", "run_at", "timezone", "dst_gap", "dst_repeat")}),
        (_("Dedupe"), {"fields": ("dedupe_key_template",)}),
        (_("Skill"), {"fields": ("skill", "params", "agent", "output_schema")}),
        (_("Retry"), {"fields": ("max_attempts", "backoff_base_seconds", "max_delay_seconds",
                              "max_retry_window_seconds", "jitter_min", "jitter_max")}),
        (_("Lease"), {"fields": ("lease_ttl_seconds",)}),
        (_("Catch-up"), {"fields": ("catchup", "catchup_max_delay_seconds")}),
        (_("State"), {"fields": ("next_fire_at", "last_slot_at", "version", "created_at", "updated_at")}),
    )

    @admin.display(description=_("schedule"))
    def schedule_text(self, rule: TriggerRule) -> str:
        if rule.kind == TriggerRule.Kind.CRON:
            return rule.cron
        if rule.kind == TriggerRule.Kind.INTERVAL:
            return f"every {rule.interval_seconds}s"
        if rule.kind == TriggerRule.Kind.EVENT:
            return "on event: " + (", ".join(s.name for s in rule.sources.all()) or "no source yet")
        return f"once at {rule.run_at:%Y-%m-%d %H:%M:%S %Z}" if rule.run_at else "once"


@admin.register(DiagnosticRecord)
class DiagnosticRecordAdmin(admin.ModelAdmin):
    list_display = ("id", "biz_key", "rule_name", "slot", "attempt", "fence", "worker", "created_at")
    list_filter = ("rule_name",)
    search_fields = ("biz_key",)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

# Event intake: sources, deliveries, refusals, counters (issue 3, item 7).
from . import event_admin  # noqa: E402, F401
