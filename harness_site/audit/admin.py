from django.contrib import admin

from harness_site.audit.models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ("at", "actor", "action", "target_type", "target_label", "reason")
    list_filter = ("action", "target_type", "actor")
    search_fields = ("target_label", "target_id", "reason", "actor")
    date_hierarchy = "at"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
