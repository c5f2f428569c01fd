from django.contrib import admin
from django.db.models import OuterRef, Subquery
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from deadletters.admin.alerts import AlertAdmin, AlertChannelAdmin  # noqa: F401  (registers the alert pages)
from deadletters.admin.desk import DeadLetterDeskMixin
from deadletters.models import DeadLetter
from deadletters.replays import ticket_replay_outcome
from harness_site.desk import ReadOnlyAdminMixin
from harness_site.templatetags.harness import ago_html, key_html, pretty_json, when_html


@admin.register(DeadLetter)
class DeadLetterAdmin(DeadLetterDeskMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Tickets change only through the desk's actions (compare-and-set, audited), never by a form."""

    # Fits 1440 px beside the filters (owner and fingerprint are added by the desk mixin).
    list_display = (
        "id",
        "key_column",
        "rule_name",
        "state_column",
        "error_kind",
        "attempts",
        "last_failure_column",
        "run_link",
    )
    list_filter = ("state", "error_kind", "rule_name")
    search_fields = ("biz_key", "=run__id", "=trace_id")
    search_help_text = _(
        "A business key as stored, as the client sent it or as the desk shows it (part of one finds every "
        "key containing it), a run id or a trace id."
    )
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

    def get_queryset(self, request):
        # The replay's outcome in the list: the run's state and its newer ticket, in the one list query.
        newer = DeadLetter.objects.filter(run=OuterRef("run"), created_at__gt=OuterRef("created_at")).order_by(
            "created_at", "id"
        )
        return (
            super()
            .get_queryset(request)
            .select_related("run")
            .annotate(newer_ticket_id=Subquery(newer.values("id")[:1]))
        )

    @admin.display(description=_("state"), ordering="state")
    def state_column(self, ticket: DeadLetter) -> str:
        outcome = ticket_replay_outcome(ticket)
        if outcome is None:
            return ticket.get_state_display()
        if outcome.newer_ticket_id:
            return format_html(
                '<span class="{}">{}</span> <a href="{}">#{}</a>',
                outcome.tone,
                outcome.label,
                reverse("admin:deadletters_deadletter_change", args=[outcome.newer_ticket_id]),
                outcome.newer_ticket_id,
            )
        return format_html('<span class="{}">{}</span>', outcome.tone, outcome.label)

    @admin.display(description=_("biz key"), ordering="biz_key")
    def key_column(self, ticket: DeadLetter) -> str:
        return key_html(ticket.biz_key, 40, rule_name=ticket.rule_name)

    @admin.display(description=_("last failure"), ordering="last_failure_at")
    def last_failure_column(self, ticket: DeadLetter) -> str:
        return format_html("{}<br>{}", when_html(None, ticket.last_failure_at), ago_html(ticket.last_failure_at))

    @admin.display(description=_("run"), ordering="run_id")
    def run_link(self, ticket: DeadLetter) -> str:
        return format_html(
            '<a href="{}">#{}</a>', reverse("admin:runs_taskrun_change", args=[ticket.run_id]), ticket.run_id
        )

    # The header (templates/admin/deadletters/deadletter/change_form.html) shows the rest.
    fieldsets = (
        (
            _("Details"),
            {"classes": ("collapse",), "fields": ("payload_json", "output_json", "created_at", "updated_at")},
        ),
    )

    @admin.display(description=_("raw payload"))
    def payload_json(self, ticket: DeadLetter) -> str:
        return format_html('<pre class="json">{}</pre>', pretty_json(ticket.raw_payload))

    @admin.display(description=_("raw output"))
    def output_json(self, ticket: DeadLetter) -> str:
        return format_html('<pre class="json">{}</pre>', ticket.raw_output) if ticket.raw_output else "—"

    def get_readonly_fields(self, request, obj=None):
        return (*super().get_readonly_fields(request, obj), "payload_json", "output_json")
