from django.contrib import admin
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from runs.admin.desk import (  # also registers the live run leases desk
    CatchupApprovalMixin,
    LeaseDeskMixin,
    RunDeskMixin,
)
from runs.admin.steps import ActionProposalInline, ExternalCallInline, RunStepInline
from runs.models import Attempt, Decision, Lease, SchedulerTick, SlotHold, TaskRun
from runs.selectors import run_wait_explain


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records are written by services only; the admin shows them."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    fields = (
        "number",
        "worker",
        "fence",
        "started_at",
        "finished_at",
        "outcome",
        "error_kind",
        "error_digest",
        "error",
    )
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(TaskRun)
class TaskRunAdmin(CatchupApprovalMixin, RunDeskMixin, ReadOnlyAdmin):
    list_display = (
        "id",
        "biz_key",
        "rule_name",
        "source",
        "state",
        "attempts",
        "slot",
        "trigger_at",
        "start_at",
        "finish_at",
        "dedupe_hits",
        "last_error_kind",
    )
    list_filter = ("state", "source", "rule_name", "last_error_kind")
    search_fields = ("=id", "biz_key")
    date_hierarchy = "trigger_at"
    inlines = [AttemptInline, RunStepInline, ExternalCallInline, ActionProposalInline]
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "biz_key",
                    "rule",
                    "rule_name",
                    "rule_version",
                    "skill",
                    "state",
                    "source",
                    "triggered_by",
                    "identity",
                    "executed_by",
                    "object_key",
                    "approved_by",
                    "approved_at",
                )
            },
        ),
        (
            _("Timeline"),
            {
                "fields": (
                    "slot",
                    "trigger_at",
                    "start_at",
                    "finish_at",
                    "run_after",
                    "waiting_for",
                    "dispatched_at",
                    "attempts",
                    "first_failure_at",
                    "dedupe_hits",
                )
            },
        ),
        (_("Lease"), {"fields": ("lease_owner", "lease_expires_at", "fence")}),
        (_("Data"), {"fields": ("payload", "result", "last_error_kind", "last_error")}),
    )

    @admin.display(description=_("waiting for"))
    def waiting_for(self, run: TaskRun) -> str:
        """Why a run that has not started waits: which pool, how full, or until when (flow control)."""
        waiting = run_wait_explain(run, now=timezone.now())
        return waiting["summary"] if waiting else "—"


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    list_display = ("rule", "slot", "reason", "created_at")
    list_filter = ("reason", "rule")
    date_hierarchy = "slot"
    readonly_fields = ("rule", "slot", "reason", "details", "created_at")


@admin.register(SlotHold)
class SlotHoldAdmin(ReadOnlyAdmin):
    """Slots waiting for readiness or buffered behind a run; each becomes a run or a decision."""

    list_display = ("rule", "slot", "reason", "recheck_at", "deadline", "checks", "created_at")
    list_filter = ("reason", "rule")


@admin.register(Lease)
class LeaseAdmin(LeaseDeskMixin, ReadOnlyAdmin):
    list_display = ("key", "owner", "token", "acquired_at", "expires_at")
    search_fields = ("key", "owner")


@admin.register(SchedulerTick)
class SchedulerTickAdmin(ReadOnlyAdmin):
    list_display = ("name", "last_tick_at", "last_claimed", "last_dedupe_hits")
