"""Pool admin: the definitions operators edit at runtime (limits are read at admission, no restart)."""

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _
from simple_history.admin import SimpleHistoryAdmin

from harness_site.history_words import ReadableHistoryMixin
from tasks.models import Pool


@admin.register(Pool)
class PoolAdmin(ReadableHistoryMixin, SimpleHistoryAdmin):
    list_display = ("name", "enabled", "max_concurrency", "rate_text", "key_template", "paused_until")
    list_filter = ("enabled",)
    search_fields = ("name", "reason")
    readonly_fields = ("paused_until", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "enabled", "reason")}),
        (_("Concurrency"), {"fields": ("max_concurrency", "key_template")}),
        (_("Rate"), {"fields": ("rate_count", "rate_period_seconds", "rate_burst", "spread_seconds")}),
        (_("State"), {"fields": ("paused_until", "created_at", "updated_at")}),
    )

    @admin.display(description=_("rate"))
    def rate_text(self, pool: Pool) -> str:
        if not pool.rate_count:
            return "—"
        return f"{pool.rate_count} / {pool.rate_period_seconds}s"

    def get_readonly_fields(self, request, obj=None):
        # The global pool keeps its name: admission finds it by name.
        if obj is not None and obj.is_global:
            return (*self.readonly_fields, "name", "key_template")
        return self.readonly_fields

    def has_delete_permission(self, request, obj=None) -> bool:
        if obj is not None and obj.is_global:
            return False
        return super().has_delete_permission(request, obj)

    def delete_queryset(self, request, queryset):
        # Bulk delete skips Pool.delete(): keep the global pool out of it.
        kept = queryset.filter(name="global")
        if kept.exists():
            messages.warning(request, _("The global pool cannot be deleted: every run draws from it."))
        queryset.exclude(name="global").delete()

    def delete_model(self, request, obj):
        try:
            obj.delete()
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
