from django import forms
from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from runs.admin.desk import (  # also registers the live run leases desk
    CatchupApprovalMixin,
    LeaseDeskMixin,
    RunDeskMixin,
)
from runs.admin.scale import ErrorKindFilter, EstimatedCountPaginator, RuleNameFilter
from runs.admin.steps import ActionProposalInline, ExternalCallInline, RunStepInline
from runs.backpressure import pending_count, watermarks_set
from runs.models import Attempt, Backpressure, Decision, Lease, SchedulerTick, SlotHold, TaskRun
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
    # Fast with millions of runs (runs/admin/scale.py): filter links from the small tables, the
    # whole table's count estimated, the search served by run_biz_key_trgm_idx (PostgreSQL). No
    # date hierarchy: its year links are a DISTINCT over every run; the trigger_at filter remains.
    list_filter = ("state", "source", ("rule_name", RuleNameFilter), ("last_error_kind", ErrorKindFilter))
    search_fields = ("biz_key",)  # and a run id: get_search_results
    paginator = EstimatedCountPaginator
    show_full_result_count = False
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

    def get_search_results(self, request, queryset, search_term):
        """biz_key (contains, served by run_biz_key_trgm_idx on PostgreSQL) or, for a number, the run
        id by primary key. Not the admin's "=id": that compares UPPER(id::text) on every row."""
        found, duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if term.isdigit() and len(term) < 19:
            found |= queryset.filter(pk=int(term))
        return found, duplicates

    @admin.display(description=_("waiting for"))
    def waiting_for(self, run: TaskRun) -> str:
        """Why a run that has not started waits: which pool, how full, or until when (flow control)."""
        waiting = run_wait_explain(run, now=timezone.now())
        return waiting["summary"] if waiting else "—"


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    """Why a slot or a trigger did not run; a shed or coalesced trigger has its biz_key, not a slot."""

    list_display = ("rule", "slot", "biz_key", "reason", "survivor_link", "hits", "created_at")
    list_filter = ("reason", "rule")
    search_fields = ("biz_key",)
    date_hierarchy = "created_at"
    readonly_fields = ("rule", "slot", "biz_key", "reason", "survivor_link", "hits", "details", "created_at")
    list_select_related = ("rule", "survivor")

    @admin.display(description=_("survivor"))
    def survivor_link(self, decision: Decision) -> str:
        if decision.survivor_id is None:
            return "—"
        url = reverse("admin:runs_taskrun_change", args=[decision.survivor_id])
        return format_html('<a href="{}">{}</a>', url, decision.survivor.biz_key)


class BackpressureForm(forms.ModelForm):
    reason = forms.CharField(
        label=_("Reason"), widget=forms.Textarea(attrs={"rows": 2}), help_text=_("Why (kept in the audit log).")
    )

    class Meta:
        model = Backpressure
        fields = ("pool", "high_watermark", "low_watermark")


@admin.register(Backpressure)
class BackpressureAdmin(admin.ModelAdmin):
    """Watermarks of pending runs per pool, edited at runtime; every edit is audited."""

    form = BackpressureForm
    list_display = ("pool", "high_watermark", "low_watermark", "shedding", "changed_at", "pending_now")
    list_select_related = ("pool",)
    readonly_fields = ("shedding", "changed_at", "pending_at_change", "pending_now", "updated_at")
    fieldsets = (
        (None, {"fields": ("pool", "high_watermark", "low_watermark", "reason")}),
        (_("State"), {"fields": ("shedding", "changed_at", "pending_at_change", "pending_now", "updated_at")}),
    )

    @admin.display(description=_("pending now"))
    def pending_now(self, row: Backpressure) -> int | str:
        return pending_count(row.pool) if row.pk else "—"

    def get_readonly_fields(self, request, obj=None):
        return (*self.readonly_fields, "pool") if obj is not None else self.readonly_fields

    def save_model(self, request, obj, form, change):
        before = {}
        if change:
            before = {f: form.initial.get(f) for f in ("high_watermark", "low_watermark")}
        watermarks_set(
            row=obj, actor=request.user, now=timezone.now(), reason=form.cleaned_data["reason"], before=before
        )

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # blank watermarks turn shedding off; the row keeps its history in the audit log


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
