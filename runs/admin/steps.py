"""Admin for the model boundary: step and call inlines on the run page, the call log, and the
approval desk for proposed actions."""

from django.contrib import admin, messages
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from harness_site.desk import ReadOnlyAdminMixin
from runs.engine.approvals import proposal_approve, proposal_reject
from runs.models import ActionProposal, ExternalCall, RunStep


class _ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class RunStepInline(_ReadOnlyInline):
    model = RunStep
    fields = ("name", "attempt", "skipped", "completed_at", "digest", "output")
    readonly_fields = fields


class ExternalCallInline(_ReadOnlyInline):
    model = ExternalCall
    fields = (
        "attempt",
        "step",
        "agent_name",
        "endpoint",
        "model",
        "status",
        "error_kind",
        "latency_ms",
        "prompt_tokens",
        "completion_tokens",
        "output_valid",
        "started_at",
    )
    readonly_fields = fields


class ActionProposalInline(_ReadOnlyInline):
    model = ActionProposal
    fields = ("action", "risk", "status", "args", "proposed_at", "expires_at", "decided_by", "decided_at", "note")
    readonly_fields = fields


@admin.register(ExternalCall)
class ExternalCallAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "run",
        "attempt",
        "agent_name",
        "model",
        "status",
        "error_kind",
        "latency_ms",
        "prompt_tokens",
        "completion_tokens",
        "output_valid",
        "started_at",
    )
    list_filter = ("agent_name", "error_kind", "output_valid", "provider")
    search_fields = ("=run__id", "input_sha256")
    date_hierarchy = "started_at"


@admin.register(ActionProposal)
class ActionProposalAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("id", "run", "action", "risk", "status", "proposed_at", "expires_at", "decided_by", "decided_at")
    list_filter = ("status", "risk", "action")
    search_fields = ("=run__id", "run__biz_key", "action")
    readonly_fields = (
        "run",
        "step",
        "action",
        "risk",
        "args",
        "status",
        "proposed_at",
        "expires_at",
        "decided_by",
        "decided_at",
        "note",
    )
    actions = ["approve", "reject"]

    def has_decide_permission(self, request) -> bool:
        return request.user.has_perm("runs.decide_actionproposal")

    @admin.action(description=gettext_lazy("Approve: run the proposed action once"), permissions=["decide"])
    def approve(self, request, queryset):
        now = timezone.now()
        done = sum(proposal_approve(proposal_id=p.id, actor=request.user, now=now) for p in queryset)
        self._report(request, done, len(queryset), _("approved"))

    @admin.action(description=gettext_lazy("Reject: cancel the run without acting"), permissions=["decide"])
    def reject(self, request, queryset):
        now = timezone.now()
        done = sum(proposal_reject(proposal_id=p.id, actor=request.user, now=now) for p in queryset)
        self._report(request, done, len(queryset), _("rejected"))

    def _report(self, request, done: int, total: int, verb: str) -> None:
        self.message_user(request, _("%(n)s proposal(s) %(verb)s.") % {"n": done, "verb": verb})
        if done < total:
            self.message_user(
                request,
                _("%(n)s proposal(s) were already decided or expired; nothing changed for them.") % {"n": total - done},
                level=messages.WARNING,
            )
