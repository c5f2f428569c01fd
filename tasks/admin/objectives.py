"""The rules' freshness objectives in the admin: a column and a filter on the rule list, and the rule
page's status with its cause and the last 30 days as met/missed cells (runs/desk/objectives.py reads them)."""

from typing import TYPE_CHECKING

from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from runs.desk.objectives import RuleObjective, objective_filter_rules, objective_history, objective_status_for_rules
from runs.models import SlotObjective
from tasks.admin.base import RuleAdminBase
from tasks.models import TriggerRule

if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldOpts
    from django.utils.functional import _StrOrPromise as StrOrPromise

OBJECTIVE_FIELDSET: "tuple[StrOrPromise, _FieldOpts]" = (
    _("Freshness objective"),
    {
        "fields": (
            "objective",
            "objective_offset_seconds",
            "objective_time",
            "objective_start_before_seconds",
            "objective_lead_seconds",
            "objective_panel",
        )
    },
)
# The status's look: never red for what is fine, never calm for what is broken.
STATUS_CLASS = {"met": "ok", "on_track": "ok", "at_risk": "warn", "breached": "bad", "excused": "quiet"}
CELL_COLOUR = {"met": "var(--desk-cell-run)", "missed": "var(--desk-cell-failed)", "": "var(--desk-cell-empty)"}


class ObjectiveStatusFilter(admin.SimpleListFilter):
    title = _("objective status")
    parameter_name = "objective"

    def lookups(self, request, model_admin):
        return SlotObjective.Status.choices

    def queryset(self, request, queryset):
        value = self.value()
        if value in SlotObjective.Status.values:
            return objective_filter_rules(queryset, value)
        return queryset


class ObjectiveAdminMixin(RuleAdminBase):
    """Mixed into TriggerRuleAdmin: the objective column, filter and the rule page's panel."""

    def get_changelist_instance(self, request):
        # The page's statuses in two queries, whatever the number of rules shown.
        changelist = super().get_changelist_instance(request)
        rules = list(changelist.result_list)
        found = objective_status_for_rules([r.id for r in rules if r.objective])
        for rule in rules:
            rule._objective_status = found.get(rule.id)
        return changelist

    @admin.display(description=_("objective"))
    def objective_column(self, rule: TriggerRule) -> str:
        if not rule.objective:
            return "-"
        found: RuleObjective | None = getattr(rule, "_objective_status", None)
        if found is None:
            return format_html('<span class="quiet">{}</span>', gettext("not checked yet"))
        return _badge(found)

    @admin.display(description=_("objective status"))
    def objective_panel(self, rule: TriggerRule) -> str:
        if rule.pk is None or not rule.objective:
            return "-"
        found = objective_status_for_rules([rule.id]).get(rule.id)
        days = objective_history(rule, now=timezone.now())
        cells = format_html_join(
            "",
            '<span class="objective-cell" style="display:inline-block;width:12px;height:12px;margin-right:2px;'
            'background:{}" title="{}" aria-label="{}"></span>',
            (
                (
                    CELL_COLOUR[d.outcome],
                    text := gettext("%(day)s: %(met)s met, %(missed)s missed")
                    % {"day": d.day.isoformat(), "met": d.met, "missed": d.missed},
                    text,
                )
                for d in days
            ),
        )
        met, missed = sum(d.met for d in days), sum(d.missed for d in days)
        slots = reverse("admin:runs_slotobjective_changelist") + f"?rule__id__exact={rule.id}"
        return format_html(
            '<div id="objective-status">{}</div><div class="objective-days" id="objective-days">{}</div>'
            '<div class="small">{} · <a href="{}">{}</a></div>',
            _badge(found) if found else gettext("not checked yet"),
            cells,
            gettext("last 30 days: %(met)s met, %(missed)s missed") % {"met": met, "missed": missed},
            slots,
            gettext("slot objectives"),
        )


def _badge(found: RuleObjective):
    acknowledged = gettext(" (acknowledged)") if found.acknowledged else ""
    return format_html(
        '<span class="{}"><strong>{}</strong>{}</span> <span class="small">{}</span>',
        STATUS_CLASS.get(found.status, ""),
        found.label,
        acknowledged,
        found.cause,
    )
