from django.contrib import admin

from deadletters.admin.alerts import AlertAdmin, AlertChannelAdmin  # noqa: F401  (registers the alert pages)
from deadletters.admin.desk import DeadLetterDeskMixin
from deadletters.models import DeadLetter


@admin.register(DeadLetter)
class DeadLetterAdmin(DeadLetterDeskMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "biz_key",
        "rule_name",
        "state",
        "error_kind",
        "attempts",
        "first_failure_at",
        "last_failure_at",
        "run",
    )
    list_filter = ("state", "error_kind", "rule_name")
    search_fields = ("biz_key", "=run__id", "=trace_id")
    readonly_fields = (
        "run",
        "biz_key",
        "rule_name",
        "source",
        "raw_payload",
        "first_failure_at",
        "last_failure_at",
        "attempts",
        "error_kind",
        "last_error_digest",
        "last_error",
        "raw_output",
        "trace_id",
        "created_at",
        "updated_at",
    )

    def has_add_permission(self, request) -> bool:
        return False
