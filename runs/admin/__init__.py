import re
from datetime import timedelta
from urllib.parse import urlencode

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from harness_site.desk import ReadOnlyAdminMixin, has_perm_method, quiet_flag
from harness_site.templatetags.harness import ago_html, key_html, when_html
from runs.admin.desk import (  # also registers the live run leases desk
    CatchupApprovalMixin,
    LeaseDeskMixin,
    RunDeskMixin,
)
from runs.admin.rerun import rerun_slots
from runs.admin.scale import ErrorKindFilter, EstimatedCountPaginator
from runs.admin.steps import ActionProposalInline, ExternalCallInline, RunStepInline
from runs.desk.incident_page import incident_page
from runs.desk.key_search import key_search
from runs.desk.selectors import duration_text, run_wait_explain
from runs.engine.backpressure import pending_count, watermarks_set
from runs.engine.objectives import cause_text, objective_acknowledge
from runs.models import (
    Attempt,
    Backpressure,
    Decision,
    Incident,
    Lease,
    SchedulerOutage,
    SchedulerTick,
    SlotHold,
    SlotObjective,
    TaskRun,
)
from tasks.skills.error_words import error_kind_label

# A W3C trace id as log lines and trace viewers print it (harness_site/tracing.py).
TRACE_ID = re.compile(r"[0-9a-f]{32}")


class QuickRunFilter(admin.SimpleListFilter):
    """One click to what on-call looks for first."""

    title = _("quick filter")
    parameter_name = "quick"
    RECENT = timedelta(hours=1)

    def lookups(self, request, model_admin):
        return (
            ("failed_1h", _("failed in the last hour")),
            ("running", _("running")),
            ("waiting_retry", _("waiting to retry")),
            ("trial", _("trial runs")),
            ("manual", _("started by an operator")),
        )

    def queryset(self, request, queryset):
        value = self.value()
        if value == "failed_1h":
            return queryset.filter(state=TaskRun.State.FAILED, finish_at__gte=timezone.now() - self.RECENT)
        if value in ("running", "waiting_retry"):
            return queryset.filter(state=value)
        if value == "trial":
            return queryset.filter(is_trial=True)
        if value == "manual":
            return queryset.filter(source=TaskRun.Source.MANUAL)
        return queryset


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
class TaskRunAdmin(CatchupApprovalMixin, RunDeskMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    # Fits 1440 px beside the filters: one time column (labelled), the duration instead of two more.
    list_display = (
        "id",
        "key_column",
        "rule_name",
        "source",
        "state_badge",
        "attempts",
        "when_column",
        "took_column",
        "dedupe_hits",
        "error_kind_column",
    )
    # Fast with millions of runs (runs/admin/scale.py): filter links from the small tables, the
    # whole table's count estimated, the search served by run_biz_key_trgm_idx (PostgreSQL). No
    # date hierarchy: its year links are a DISTINCT over every run; the trigger_at filter remains.
    # One rule filter: by the rule itself (runs/admin/desk.py).
    list_filter = (QuickRunFilter, "state", "source", ("last_error_kind", ErrorKindFilter))
    search_fields = ("biz_key",)  # and a run id or a trace id: get_search_results
    search_help_text = _(
        "A whole biz_key finds its run; part of one, every run whose key contains it. A number also "
        "finds the run with that id, 32 hex digits the runs of that trace."
    )
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    # The attempts are in the run page's header table (templates/admin/runs/taskrun/change_form.html).
    inlines = [RunStepInline, ExternalCallInline, ActionProposalInline]
    # The header shows state, rule, biz_key, source, slot, times, last error and payload; the rest is here.
    fieldsets = (
        (
            _("Details"),
            {
                "classes": ("collapse",),
                "fields": (
                    "skill",
                    "queue",
                    "rule_version",
                    "identity",
                    "executed_by",
                    "object_key",
                    "approved_by",
                    "approved_at",
                    "trace_id",
                    "run_after",
                    "dispatched_at",
                    "first_failure_at",
                    "dedupe_hits",
                    "lease_owner",
                    "lease_expires_at",
                    "fence",
                ),
            },
        ),
    )

    def get_inline_instances(self, request, obj=None):
        # Steps, model calls and proposals only where the run has some: no empty tables on the page.
        return [
            inline
            for inline in super().get_inline_instances(request, obj)
            if obj is not None and inline.model._default_manager.filter(run=obj).exists()
        ]

    @admin.display(description=_("biz key"), ordering="biz_key")
    def key_column(self, run: TaskRun) -> str:
        return key_html(run.biz_key, 44, rule_name=run.rule_name)

    @admin.display(description=_("state"), ordering="state")
    def state_badge(self, run: TaskRun) -> str:
        return format_html('<span class="badge s-{}">{}</span>', run.state, run.get_state_display())

    @admin.display(description=_("slot or trigger"), ordering="trigger_at")
    def when_column(self, run: TaskRun) -> str:
        return format_html("{}<br>{}", when_html(None, run.slot or run.trigger_at), ago_html(run.trigger_at))

    @admin.display(description=_("last error kind"), ordering="last_error_kind")
    def error_kind_column(self, run: TaskRun) -> str:
        return error_kind_label(run.last_error_kind) or "—"

    @admin.display(description=_("took"))
    def took_column(self, run: TaskRun) -> str:
        if run.start_at and run.finish_at:
            return duration_text(run.finish_at - run.start_at)
        return "—"

    def get_search_results(self, request, queryset, search_term):
        """A whole biz_key, stored or as the client sent it, finds its run through the unique index,
        one probe however many runs there are (on-call pastes the key from an alert); otherwise every
        key containing the term (run_biz_key_trgm_idx on PostgreSQL, whose cost grows with the table).
        A number is also the run id by primary key (not the admin's "=id": that compares UPPER(id::text) on every row),
        and 32 hex digits a trace id (run_trace_idx), as a log line or a trace viewer shows it."""
        term = search_term.strip()
        if not term:
            return queryset, False
        # The raw text a client sent finds its stored (escaped) key as well (runs/desk/key_search.py).
        found, _whole = key_search(queryset, term)
        duplicates = False
        if term.isdigit() and len(term) < 19:
            found |= queryset.filter(pk=int(term))
        if TRACE_ID.fullmatch(term.lower()):
            found |= queryset.filter(trace_id=term.lower())
        return found, duplicates

    @admin.display(description=_("waiting for"))
    def waiting_for(self, run: TaskRun) -> str:
        """Why a run that has not started waits: which pool, how full, or until when (flow control)."""
        waiting = run_wait_explain(run, now=timezone.now())
        return waiting["summary"] if waiting else "—"


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Why a slot or a trigger did not run; a shed or coalesced trigger has its biz_key, not a slot."""

    list_display = ("rule", "slot", "biz_key", "reason", "survivor_link", "hits", "created_at", "explain_link")
    list_filter = ("reason", "rule")
    search_fields = ("biz_key",)
    date_hierarchy = "created_at"
    readonly_fields = ("rule", "slot", "biz_key", "reason", "survivor_link", "hits", "details", "created_at")
    list_select_related = ("rule", "survivor")
    actions = ["rerun_slots"]

    @admin.action(description=_("Re-run chosen slots (plan first)"), permissions=["rerun"])
    def rerun_slots(self, request, queryset):
        return rerun_slots(self, request, queryset)

    has_rerun_permission = has_perm_method("runs.rerun_slots")

    @admin.display(description=_("explain"))
    def explain_link(self, decision: Decision) -> str:
        base = reverse("admin:tasks_triggerrule_explain", args=[decision.rule_id])
        query = {"slot": decision.slot.isoformat()} if decision.slot else {"biz_key": decision.biz_key}
        return format_html('<a href="{}?{}">{}</a>', base, urlencode(query), _("Explain"))

    @admin.display(description=_("survivor"))
    def survivor_link(self, decision: Decision) -> str:
        survivor = decision.survivor  # joined on the list (list_select_related)
        if survivor is None:
            return "—"
        url = reverse("admin:runs_taskrun_change", args=[survivor.pk])
        return format_html('<a href="{}">{}</a>', url, survivor.biz_key)


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
    list_display = ("pool", "high_watermark", "low_watermark", "shedding_flag", "changed_at", "pending_now")
    list_select_related = ("pool",)
    readonly_fields = ("shedding_flag", "changed_at", "pending_at_change", "pending_now", "updated_at")
    fieldsets = (
        (None, {"fields": ("pool", "high_watermark", "low_watermark", "reason")}),
        (_("State"), {"fields": ("shedding_flag", "changed_at", "pending_at_change", "pending_now", "updated_at")}),
    )

    @admin.display(description=_("shedding"), ordering="shedding")
    def shedding_flag(self, row: Backpressure) -> str:
        return quiet_flag(row.shedding, _("shedding"), off=_("no"), tone="warn")

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
class SlotHoldAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Slots waiting for readiness or buffered behind a run; each becomes a run or a decision."""

    list_display = ("rule", "slot", "reason", "recheck_at", "deadline", "checks", "created_at")
    list_filter = ("reason", "rule")


@admin.register(Lease)
class LeaseAdmin(LeaseDeskMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("key", "owner", "token", "acquired_at", "expires_at")
    search_fields = ("key", "owner")


@admin.register(SchedulerTick)
class SchedulerTickAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("name", "last_tick_at", "last_claimed", "last_dedupe_hits", "history_since")


@admin.register(SchedulerOutage)
class SchedulerOutageAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Spans with no scheduler tick for longer than the slot grace (runs/engine/outages.py)."""

    list_display = ("name", "started_at", "ended_at")
    date_hierarchy = "ended_at"


@admin.register(SlotObjective)
class SlotObjectiveAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Each slot's freshness objective, as the objective pass last saw it (runs/engine/objectives.py)."""

    list_display = ("rule", "slot", "deadline", "status", "cause_text", "lateness_seconds", "acknowledged_by")
    list_filter = ("status", "closed", "rule")
    date_hierarchy = "slot"
    list_select_related = ("rule",)
    actions = ["acknowledge"]

    @admin.display(description=_("cause"))
    def cause_text(self, row: SlotObjective) -> str:
        return cause_text(row.cause)

    @admin.action(description=_("Acknowledge: no more alerts for these slots"), permissions=["acknowledge"])
    def acknowledge(self, request, queryset):
        n = objective_acknowledge(rows=queryset, actor=request.user.get_username(), now=timezone.now())
        self.message_user(request, ngettext("%(n)s slot acknowledged.", "%(n)s slots acknowledged.", n) % {"n": n})

    def has_acknowledge_permission(self, request) -> bool:
        return request.user.has_perm("runs.acknowledge_slotobjective")


@admin.register(Incident)
class IncidentAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Incidents of the harness itself (runs/engine/incidents.py); each one's page is what it cost, on one axis."""

    list_display = ("__str__", "kind", "subject", "started_at", "ended_at", "duration", "missed")
    list_filter = ("kind",)
    date_hierarchy = "started_at"

    @admin.display(description=_("duration"))
    def duration(self, incident: Incident) -> str:
        return duration_text((incident.ended_at or timezone.now()) - incident.started_at)

    @admin.display(description=_("missed slots"))
    def missed(self, incident: Incident):
        return incident.summary.get("missed") if incident.ended_at else None  # None: the admin's empty value

    def change_view(self, request, object_id, form_url="", extra_context=None):
        incident = self.get_object(request, object_id)
        if incident is None:
            raise Http404(_("No incident with this id."))
        if not self.has_view_permission(request, incident):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            **incident_page(incident, now=timezone.now(), zoom=request.GET.get("zoom")),
            "opts": self.opts,
            "original": incident,
            "title": str(incident),
        }
        return TemplateResponse(request, "admin/runs/incident/page.html", context)
