from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from harness_site.audit.models import AuditEntry
from harness_site.desk import ReadOnlyAdminMixin


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("at", "actor", "action", "target_kind", "target_label", "reason")
    list_filter = ("action", "target_type", "actor")
    search_fields = ("target_label", "target_id", "reason", "actor")
    date_hierarchy = "at"

    # The stored target types are codes (harness_site/audit/services.TARGET_TYPES); shown in words.
    TARGET_LABELS = {
        "rule": _("rule"),
        "run": _("run"),
        "lease": _("lease"),
        "deadletter": _("dead letter"),
        "watermark": _("watermark"),
    }

    @admin.display(description=_("target type"), ordering="target_type")
    def target_kind(self, entry: AuditEntry) -> str:
        return str(self.TARGET_LABELS.get(entry.target_type, entry.target_type))
