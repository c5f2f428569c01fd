"""The run and lease pages of the operator's desk: run filters, the run timeline, retry now and
cancel with confirmation, and the live leases with force-release. Mixed into runs/admin/__init__.py."""

from typing import TYPE_CHECKING
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin import DateFieldListFilter
from django.db.models import Field, Max
from django.http import HttpResponseRedirect
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from harness_site.desk import (
    OptionalReasonForm,
    ReadOnlyAdminMixin,
    ReasonForm,
    confirm_bulk,
    confirm_object,
    desk_object,
    form_reason,
    has_perm_method,
    now,
    quiet_flag,
)
from runs.admin.scale import RuleFilter
from runs.desk.selectors import duration_text as _seconds
from runs.desk.selectors import run_timeline, run_wait_explain
from runs.engine.approvals import APPROVE_PERM, catchup_approve, catchup_reject
from runs.engine.operations import (
    CANCELLABLE_STATES,
    RETRYABLE_STATES,
    lease_force_release,
    run_cancel,
    run_lease_force_release,
    run_retry_now,
)
from runs.models import Lease, RunLease, TaskRun
from tasks.rules.explain import held_for
from tasks.sentences import say_all

# The mixins below are mixed into ModelAdmins (runs/admin/__init__.py): the type checker reads them as such.
if TYPE_CHECKING:
    RunAdminBase = admin.ModelAdmin[TaskRun]
    LeaseAdminBase = admin.ModelAdmin[Lease]
else:
    RunAdminBase = LeaseAdminBase = object


class RunDeskMixin(RunAdminBase):
    change_form_template = "admin/runs/taskrun/change_form.html"
    actions = ["retry_now", "cancel"]

    has_retry_permission = has_perm_method("runs.retry_run")
    has_cancel_permission = has_perm_method("runs.cancel_run")

    change_list_template = "admin/runs/taskrun/change_list.html"

    def get_list_display(self, request):
        return (*super().get_list_display(request), "trial_flag")

    def get_list_filter(self, request):
        base = tuple(super().get_list_filter(request))
        # One rule filter (by the rule itself; its name is shown in the list), its links capped (scale.py).
        extra = ["is_trial", ("trigger_at", DateFieldListFilter), ("rule", RuleFilter)]
        return (*base, *[f for f in extra if f not in base])

    @admin.display(description=gettext_lazy("trial"), ordering="is_trial")
    def trial_flag(self, run: TaskRun) -> str:
        return quiet_flag(run.is_trial, _("trial"))

    @admin.action(description=gettext_lazy("Retry selected runs now (waiting or failed)"), permissions=["retry"])
    def retry_now(self, request, queryset):
        at = now()
        return confirm_bulk(
            self,
            request,
            queryset,
            action="retry_now",
            title=_("Retry runs now"),
            verb=_("Retried"),
            button=_("Retry now"),
            eligible=lambda r: r.state in RETRYABLE_STATES,
            do=lambda r, form: run_retry_now(run_id=r.id, actor=request.user, now=at, reason=form_reason(form)),
        )

    @admin.action(description=gettext_lazy("Cancel selected runs (pending or waiting)"), permissions=["cancel"])
    def cancel(self, request, queryset):
        at = now()
        return confirm_bulk(
            self,
            request,
            queryset,
            action="cancel",
            title=_("Cancel runs"),
            verb=_("Cancelled"),
            button=_("Cancel runs"),
            eligible=lambda r: r.state in CANCELLABLE_STATES,
            do=lambda r, form: run_cancel(run_id=r.id, actor=request.user, now=at, reason=form_reason(form)),
        )

    def get_urls(self):
        wrap = self.admin_site.admin_view
        mine = [
            path("<path:object_id>/retry/", wrap(self.retry_view), name="runs_taskrun_retry"),
            path("<path:object_id>/cancel/", wrap(self.cancel_view), name="runs_taskrun_cancel"),
            path("<path:object_id>/release/", wrap(self.release_view), name="runs_taskrun_release"),
        ]
        return mine + super().get_urls()

    def retry_view(self, request, object_id):
        run = desk_object(self, request, object_id)
        return confirm_object(
            self,
            request,
            run,
            perm="runs.retry_run",
            title=_("Retry run now"),
            verb=_("Retried now"),
            button=_("Retry now"),
            summary=[
                _run_is(run),
                _("It becomes pending and due now; the next attempt is number %(n)s.") % {"n": run.attempts + 1},
            ],
            do=lambda form: run_retry_now(run_id=run.id, actor=request.user, now=now(), reason=form_reason(form)),
        )

    def cancel_view(self, request, object_id):
        run = desk_object(self, request, object_id)
        return confirm_object(
            self,
            request,
            run,
            perm="runs.cancel_run",
            title=_("Cancel run"),
            verb=_("Cancelled"),
            button=_("Cancel run"),
            summary=[
                _run_is(run),
                _("Cancelled runs never start; the business key stays taken."),
            ],
            do=lambda form: run_cancel(run_id=run.id, actor=request.user, now=now(), reason=form_reason(form)),
        )

    def release_view(self, request, object_id):
        run = desk_object(self, request, object_id)
        return confirm_object(
            self,
            request,
            run,
            perm="runs.force_release_lease",
            title=_("Force-release lease"),
            verb=_("Lease force-released"),
            button=_("Force-release lease"),
            form_class=ReasonForm,
            summary=_lease_summary(run),
            do=lambda form: run_lease_force_release(
                run_id=run.id, actor=request.user, now=now(), reason=form_reason(form)
            ),
        )

    def change_view(self, request, object_id, form_url="", extra_context=None):
        run = self.get_object(request, object_id)
        extra = {**(extra_context or {})}
        if run is not None:
            extra["timeline"] = run_page_timeline(run)
            user = request.user
            buttons = []
            if run.state in RETRYABLE_STATES and user.has_perm("runs.retry_run"):
                buttons.append((_("Retry now"), reverse("admin:runs_taskrun_retry", args=[run.id]), "run-retry"))
            if run.state in CANCELLABLE_STATES and user.has_perm("runs.cancel_run"):
                buttons.append((_("Cancel"), reverse("admin:runs_taskrun_cancel", args=[run.id]), "run-cancel"))
            if run.state == TaskRun.State.RUNNING and user.has_perm("runs.force_release_lease"):
                buttons.append(
                    (_("Force-release lease"), reverse("admin:runs_taskrun_release", args=[run.id]), "run-release")
                )
            extra["desk_buttons"] = buttons
        return super().change_view(request, object_id, form_url, extra)


# A run in one of these states changes no more: its page stops refreshing itself.
FINAL_STATES = (TaskRun.State.SUCCEEDED, TaskRun.State.FAILED, TaskRun.State.CANCELLED, TaskRun.State.COALESCED)


def run_page_timeline(run: TaskRun) -> dict:
    """What the run and ticket pages show: the selector's timeline, the rule's zone for every time on
    the page, and whether the page keeps refreshing (until the run is final)."""
    at = now()
    timeline = run_timeline(run, now=at)
    final = run.state in FINAL_STATES
    waiting = None if run.start_at else run_wait_explain(run, now=at)
    timeline.update(
        run=run,
        zone=run.rule.timezone if run.rule is not None else None,
        rule_url=reverse("admin:tasks_triggerrule_change", args=[run.rule_id]) if run.rule_id else "",
        explain_url=_explain_url(run),
        live=not final,
        live_stopped=_("Final: this page no longer refreshes") if final else "",
        live_stopped_text=_("Final: this page no longer refreshes"),
        waiting_for=waiting["summary"] if waiting else "",
        held_for=say_all(held_for(source=run.source, attempts=run.attempts, payload=run.payload or {}))
        if run.state == TaskRun.State.AWAITING_APPROVAL
        else "",
        policy=[(_policy_field(name).verbose_name, getattr(run, name), name == "start_by") for name in POLICY_FIELDS],
    )
    return timeline


# The engine policy the run was triggered with (its rule's, copied at claim), as the run page lists it.
POLICY_FIELDS = (
    "retry_max_attempts",
    "retry_backoff_base_seconds",
    "retry_max_delay_seconds",
    "retry_window_seconds",
    "retry_jitter_min",
    "retry_jitter_max",
    "lease_ttl_seconds",
    "start_by",
    "agent",
)


def _policy_field(name: str) -> Field:
    field = TaskRun._meta.get_field(name)
    assert isinstance(field, Field), f"{name} is a column of the run"
    return field


def _explain_url(run: TaskRun) -> str:
    """The rule's Explain page for this run's slot (or, without a slot, its business key)."""
    if not run.rule_id:
        return ""
    base = reverse("admin:tasks_triggerrule_explain", args=[run.rule_id])
    return base + "?" + urlencode({"slot": run.slot.isoformat()} if run.slot else {"biz_key": run.biz_key})


def _run_is(run: TaskRun) -> str:
    return _("Run #%(id)s %(biz_key)s is %(state)s.") % {
        "id": run.id,
        "biz_key": run.biz_key,
        "state": run.get_state_display().lower(),
    }


def _lease_summary(run: TaskRun) -> list[str]:
    return [
        _run_is(run),
        _("Lease holder: %(owner)s, fence %(fence)s, expires %(expires)s.")
        % {"owner": run.lease_owner or "-", "fence": run.fence, "expires": run.lease_expires_at or "-"},
        _("The run goes back to waiting_retry, due now; the fence is bumped so the old holder cannot commit."),
    ]


@admin.register(RunLease)
class RunLeaseAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Live run leases: running runs, their holder, how long held, when the lease expires."""

    list_display = ("id", "biz_key", "rule_name", "lease_owner", "held_for", "lease_expires_at", "expires_in", "fence")
    change_list_template = "admin/runs/runlease/change_list.html"
    search_fields = ("=id", "biz_key", "lease_owner")
    actions = ["force_release"]
    has_force_release_permission = has_perm_method("runs.force_release_lease")

    def get_queryset(self, request):
        # run_lease_idx: running runs only.
        return (
            super()
            .get_queryset(request)
            .filter(state=TaskRun.State.RUNNING)
            .annotate(held_since=Max("attempt_set__started_at"))
        )

    @admin.display(description=gettext_lazy("held for"))
    def held_for(self, run) -> str:
        return _seconds(now() - run.held_since) if run.held_since else "-"

    @admin.display(description=gettext_lazy("expires in"))
    def expires_in(self, run) -> str:
        if not run.lease_expires_at:
            return "-"
        left = run.lease_expires_at - now()
        return (
            format_html('<span style="color:#ba2121">{}</span>', _("expired %(ago)s ago") % {"ago": _seconds(-left)})
            if (left.total_seconds() < 0)
            else _seconds(left)
        )

    @admin.action(description=gettext_lazy("Force-release selected leases"), permissions=["force_release"])
    def force_release(self, request, queryset):
        at = now()
        return confirm_bulk(
            self,
            request,
            queryset,
            action="force_release",
            title=_("Force-release leases"),
            verb=_("Released"),
            button=_("Force-release"),
            form_class=ReasonForm,
            do=lambda r, form: run_lease_force_release(
                run_id=r.id, actor=request.user, now=at, reason=form_reason(form)
            ),
        )

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # The run page has the timeline and the release button.
        return HttpResponseRedirect(reverse("admin:runs_taskrun_change", args=[object_id]))


class LeaseDeskMixin(LeaseAdminBase):
    """Key leases (rule:…, object:…): owner, age, expiry, force-release."""

    actions = ["force_release"]
    has_force_release_permission = has_perm_method("runs.force_release_lease")

    def get_list_display(self, request):
        return (*super().get_list_display(request), "age", "state")

    @admin.display(description=gettext_lazy("age"))
    def age(self, lease: Lease) -> str:
        return _seconds(now() - lease.acquired_at) if lease.acquired_at and lease.owner else "-"

    @admin.display(description=gettext_lazy("state"))
    def state(self, lease: Lease) -> str:
        if not lease.owner:
            return _("free")
        return _("live") if lease.expires_at and lease.expires_at > now() else _("expired")

    @admin.action(description=gettext_lazy("Force-release selected leases"), permissions=["force_release"])
    def force_release(self, request, queryset):
        at = now()
        return confirm_bulk(
            self,
            request,
            queryset,
            action="force_release",
            title=_("Force-release leases"),
            verb=_("Released"),
            button=_("Force-release"),
            form_class=ReasonForm,
            eligible=lambda lease: bool(lease.owner),
            do=lambda lease, form: lease_force_release(
                lease_id=lease.id, actor=request.user, now=at, reason=form_reason(form)
            ),
        )


class CatchupApprovalMixin(RunAdminBase):
    """Adds "Approve held runs" and "Reject held runs" to the run list for users with the permission:
    runs the scheduler held before they started (a catch-up burst, an uncertain calendar day)."""

    def get_actions(self, request):
        actions = super().get_actions(request)
        if request.user.has_perm(APPROVE_PERM):
            for name in ("approve_held", "reject_held"):
                func = getattr(type(self), name)
                actions[name] = (func, name, func.short_description)
        return actions

    @admin.action(description=gettext_lazy("Approve selected held runs (catch-up burst or uncertain calendar day)"))
    def approve_held(self, request, queryset):
        n = catchup_approve(run_ids=list(queryset.values_list("id", flat=True)), actor=request.user, now=timezone.now())
        self.message_user(
            request,
            _("Approved %(n)s held run(s); they start paced from now.") % {"n": n},
            messages.SUCCESS if n else messages.WARNING,
        )

    @admin.action(description=gettext_lazy("Reject selected held runs (catch-up burst or uncertain calendar day)"))
    def reject_held(self, request, queryset):
        n = catchup_reject(run_ids=list(queryset.values_list("id", flat=True)), actor=request.user, now=timezone.now())
        self.message_user(
            request, _("Rejected %(n)s held run(s).") % {"n": n}, messages.SUCCESS if n else messages.WARNING
        )


__all__ = ["CatchupApprovalMixin", "LeaseDeskMixin", "OptionalReasonForm", "RunDeskMixin", "RunLeaseAdmin"]
