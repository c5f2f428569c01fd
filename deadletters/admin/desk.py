"""The dead-letter desk: the open backlog counted by rule, error kind and fingerprint; a ticket page
with everything needed to act; replay / close / assign, single or bulk, with confirmation."""

from typing import TYPE_CHECKING

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.urls import path, reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from deadletters.models import DeadLetter
from deadletters.replays import ticket_replay_outcome
from deadletters.services import deadletter_assign, deadletter_close
from harness_site.desk import (
    OptionalReasonForm,
    confirm_bulk,
    confirm_object,
    desk_object,
    form_data,
    has_perm_method,
    now,
)
from harness_site.templatetags.harness import clip_html
from runs.admin.desk import run_page_timeline
from runs.admin.scale import ErrorKindFilter
from runs.desk.dashboard import deadletter_backlog
from runs.desk.key_search import key_search
from runs.engine.operations import run_retry_now
from tasks.skills.error_words import error_kind_label

ERROR_CHARS = 60  # an error's first line in the list; the desk still fits 1440 px


class CloseForm(forms.Form):
    note = forms.CharField(
        label=gettext_lazy("Note"),
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text=gettext_lazy("Why it needs no replay; kept on the ticket and in the audit log."),
    )


class AssignForm(forms.Form):
    owner = forms.ModelChoiceField(
        queryset=get_user_model().objects.none(),
        required=False,
        label=gettext_lazy("Owner"),
        help_text=gettext_lazy("Empty: unassign."),
    )
    reason = forms.CharField(
        required=False, label=gettext_lazy("Reason"), widget=forms.Textarea(attrs={"rows": 2, "cols": 60})
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        owner = self.fields["owner"]
        if isinstance(owner, forms.ModelChoiceField):  # as declared above
            owner.queryset = get_user_model().objects.filter(is_active=True, is_staff=True).order_by("username")


# Mixed into DeadLetterAdmin (deadletters/admin/__init__.py): the type checker reads it as such.
if TYPE_CHECKING:
    DeadLetterAdminBase = admin.ModelAdmin[DeadLetter]
else:
    DeadLetterAdminBase = object


class DeadLetterDeskMixin(DeadLetterAdminBase):
    change_form_template = "admin/deadletters/deadletter/change_form.html"
    change_list_template = "admin/deadletters/deadletter/change_list.html"
    actions = ["replay", "close", "assign", "assign_to_me"]

    has_replay_permission = has_perm_method("deadletters.replay_deadletter")
    has_close_permission = has_perm_method("deadletters.close_deadletter")
    has_assign_permission = has_perm_method("deadletters.assign_deadletter")

    def get_list_display(self, request):
        # What failed sits together: the error kind, its fingerprint and the error's first line.
        columns = [c for c in super().get_list_display(request) if c != "error_kind"]
        at = columns.index("state") + 1 if "state" in columns else len(columns)
        columns[at:at] = ["error_kind_column", "digest_column", "error_column"]
        return (*columns, "owner")

    @admin.display(description=gettext_lazy("error kind"), ordering="error_kind")
    def error_kind_column(self, ticket: DeadLetter) -> str:
        return error_kind_label(ticket.error_kind) or "—"

    @admin.display(description=gettext_lazy("fingerprint"), ordering="last_error_digest")
    def digest_column(self, ticket: DeadLetter) -> str:
        return clip_html(ticket.last_error_digest, 12)

    @admin.display(description=gettext_lazy("error"))
    def error_column(self, ticket: DeadLetter) -> str:
        """The error's first line, the whole message on hover (the ticket page shows it all)."""
        first = next((line.strip() for line in (ticket.last_error or "").splitlines() if line.strip()), "")
        return clip_html(first, ERROR_CHARS) if first else "—"

    def get_search_results(self, request, queryset, search_term):
        """The admin's search (run id, trace id, key contains), plus the stored keys a raw client
        key stands for (`callback:order-7` finds `…/callback%3Aorder-7`): runs/desk/key_search.py."""
        found, duplicates = super().get_search_results(request, queryset, search_term)
        if search_term.strip():
            by_key, _whole = key_search(queryset, search_term)
            found |= by_key
        return found, duplicates

    def get_list_filter(self, request):
        # Error kinds by their words, as the run list filters them.
        chosen = [("error_kind", ErrorKindFilter) if f == "error_kind" else f for f in super().get_list_filter(request)]
        return (*chosen, "last_error_digest", "owner")

    def changelist_view(self, request, extra_context=None):
        extra = {**(extra_context or {}), "backlog": deadletter_backlog()}
        extra["backlog_total"] = DeadLetter.objects.filter(state=DeadLetter.State.PENDING_MANUAL).count()
        return super().changelist_view(request, extra)

    @admin.action(description=gettext_lazy("Replay selected with their original business keys"), permissions=["replay"])
    def replay(self, request, queryset):
        at = now()
        return confirm_bulk(
            self,
            request,
            queryset,
            action="replay",
            title=_("Replay dead letters"),
            verb=_("Replayed"),
            button=_("Replay"),
            eligible=lambda t: t.state == DeadLetter.State.PENDING_MANUAL,
            do=lambda t, form: _replay(t, request, at, form),
        )

    @admin.action(description=gettext_lazy("Close selected with a note"), permissions=["close"])
    def close(self, request, queryset):
        at = now()
        return confirm_bulk(
            self,
            request,
            queryset,
            action="close",
            title=_("Close dead letters"),
            verb=_("Closed"),
            button=_("Close tickets"),
            form_class=CloseForm,
            eligible=lambda t: t.state == DeadLetter.State.PENDING_MANUAL,
            do=lambda t, form: deadletter_close(
                ticket_id=t.id, actor=request.user, now=at, note=form_data(form)["note"]
            ),
        )

    @admin.action(description=gettext_lazy("Assign selected to an owner"), permissions=["assign"])
    def assign(self, request, queryset):
        at = now()
        return confirm_bulk(
            self,
            request,
            queryset,
            action="assign",
            title=_("Assign dead letters"),
            verb=_("Assigned"),
            button=_("Assign"),
            form_class=AssignForm,
            do=lambda t, form: deadletter_assign(
                ticket_id=t.id,
                owner=form_data(form)["owner"],
                actor=request.user,
                now=at,
                reason=form_data(form)["reason"],
            ),
        )

    @admin.action(description=gettext_lazy("Assign selected to me"), permissions=["assign"])
    def assign_to_me(self, request, queryset):
        at = now()
        changed = sum(
            bool(deadletter_assign(ticket_id=t.id, owner=request.user, actor=request.user, now=at, reason=""))
            for t in queryset
        )
        self.message_user(
            request,
            ngettext("%(n)s ticket is now assigned to you.", "%(n)s tickets are now assigned to you.", changed)
            % {"n": changed},
            messages.SUCCESS if changed else messages.WARNING,
        )

    def get_urls(self):
        wrap = self.admin_site.admin_view
        mine = [
            path("<path:object_id>/replay/", wrap(self.replay_view), name="deadletters_deadletter_replay"),
            path("<path:object_id>/close/", wrap(self.close_view), name="deadletters_deadletter_close"),
            path("<path:object_id>/assign/", wrap(self.assign_view), name="deadletters_deadletter_assign"),
        ]
        return mine + super().get_urls()

    def replay_view(self, request, object_id):
        ticket = desk_object(self, request, object_id)
        return confirm_object(
            self,
            request,
            ticket,
            perm="deadletters.replay_deadletter",
            title=_("Replay dead letter"),
            verb=_("Replay queued"),
            button=_("Replay"),
            summary=[
                _("Run #%(id)s %(biz_key)s gets a new attempt (number %(n)s) under its original business key.")
                % {"id": ticket.run_id, "biz_key": ticket.biz_key, "n": ticket.run.attempts + 1},
                _("A second click, or a colleague replaying at the same time, queues nothing more."),
            ],
            do=lambda form: _replay(ticket, request, now(), form),
            failed_message=_("Nothing queued: this ticket was already replayed or closed."),
        )

    def close_view(self, request, object_id):
        ticket = desk_object(self, request, object_id)
        return confirm_object(
            self,
            request,
            ticket,
            perm="deadletters.close_deadletter",
            title=_("Close dead letter"),
            verb=_("Closed"),
            button=_("Close ticket"),
            form_class=CloseForm,
            summary=[
                _("Run #%(id)s %(biz_key)s stays failed; no replay.") % {"id": ticket.run_id, "biz_key": ticket.biz_key}
            ],
            do=lambda form: deadletter_close(
                ticket_id=ticket.id, actor=request.user, now=now(), note=form_data(form)["note"]
            ),
            failed_message=_("Nothing changed: this ticket was already replayed or closed."),
        )

    def assign_view(self, request, object_id):
        ticket = desk_object(self, request, object_id)
        return confirm_object(
            self,
            request,
            ticket,
            perm="deadletters.assign_deadletter",
            title=_("Assign dead letter"),
            verb=_("Assigned"),
            button=_("Assign"),
            form_class=AssignForm,
            form_kwargs={"initial": {"owner": ticket.owner_id}},
            summary=[_("Currently: %(owner)s.") % {"owner": ticket.owner or _("nobody")}],
            do=lambda form: deadletter_assign(
                ticket_id=ticket.id,
                owner=form_data(form)["owner"],
                actor=request.user,
                now=now(),
                reason=form_data(form)["reason"],
            ),
        )

    def change_view(self, request, object_id, form_url="", extra_context=None):
        ticket = self.get_object(request, object_id)
        extra = {**(extra_context or {})}
        if ticket is not None:
            extra["replay"] = ticket_replay_outcome(ticket)
            extra["timeline"] = {**run_page_timeline(ticket.run), "in_ticket": True}
            extra["run_url"] = reverse("admin:runs_taskrun_change", args=[ticket.run_id])
            user, buttons = request.user, []
            if ticket.state == DeadLetter.State.PENDING_MANUAL:
                for label, name, perm in (
                    (_("Replay"), "replay", "replay_deadletter"),
                    # Not "Close": the view-only page's own Close button goes back to the list.
                    (_("Close without replay"), "close", "close_deadletter"),
                ):
                    if user.has_perm(f"deadletters.{perm}"):
                        buttons.append(
                            (label, reverse(f"admin:deadletters_deadletter_{name}", args=[ticket.pk]), f"ticket-{name}")
                        )
            if user.has_perm("deadletters.assign_deadletter"):
                buttons.append(
                    (_("Assign"), reverse("admin:deadletters_deadletter_assign", args=[ticket.pk]), "ticket-assign")
                )
            extra["desk_buttons"] = buttons
        return super().change_view(request, object_id, form_url, extra)


def _replay(ticket: DeadLetter, request, at, form) -> bool:
    reason = form.cleaned_data["reason"] if form is not None else ""
    return run_retry_now(run_id=ticket.run_id, ticket_id=ticket.id, actor=request.user, now=at, reason=reason)


__all__ = ["DeadLetterDeskMixin", "OptionalReasonForm"]
