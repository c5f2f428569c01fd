"""The rule form's "Review change" step: a valid edit is not saved at once but shown as its plan
(tasks/triggers/plan.py: the diff, the past replayed, the future side by side, the consequences);
the operator saves from there. The page posts the same form back with the version it planned, so
a rule edited meanwhile is planned again instead of saved blind."""

from django.contrib.admin.utils import flatten_fieldsets, unquote
from django.core.exceptions import FieldDoesNotExist
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _

from harness_site.desk import change_url, now
from tasks import sentences
from tasks.admin.base import RuleAdminBase
from tasks.models import TriggerRule
from tasks.models.fields import model_field
from tasks.rules import evaluation, keys, schedule
from tasks.rules.preview import dst_changes
from tasks.triggers.plan import plan_json, rule_plan

REVIEW_TEMPLATE = "admin/tasks/triggerrule/review.html"
CONFIRM_FIELD = "_plan_confirmed"
# Rows of the past and the future listed on the page (the differing ones); the counts cover all.
REVIEW_ROWS = 200


class RuleReviewMixin(RuleAdminBase):
    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        if request.method == "POST" and object_id is not None:
            review = self._review(request, object_id)
            if review is not None:
                return review
        return super().changeform_view(request, object_id, form_url, extra_context)

    def _review(self, request, object_id):
        """The review page for a valid edit not yet confirmed for the rule's current version; None
        to let the admin go on (save a confirmed edit, or show the form's errors)."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None or not self.has_change_permission(request, obj):
            return None
        if request.POST.get(CONFIRM_FIELD) == str(obj.version):
            return None
        old = TriggerRule.objects.get(pk=obj.pk)
        fieldsets = self.get_fieldsets(request, obj)
        form_class = self.get_form(request, obj, change=True, fields=flatten_fieldsets(fieldsets))
        form = form_class(request.POST, request.FILES, instance=obj)
        if not form.is_valid():
            return None
        pools = [p.name for p in form.cleaned_data["pools"]] if "pools" in form.cleaned_data else None
        try:
            plan = rule_plan(old, form.instance, now=now(), new_pools=pools)
        except (schedule.ScheduleError, evaluation.GuardError, keys.KeyTemplateError, ValueError):
            return None  # the form lets through what the model's save refuses: the admin says so
        if not plan.changes:
            return None  # nothing changes: nothing to review
        stale = CONFIRM_FIELD in request.POST  # confirmed for a version someone else has changed since
        data = plan_json(plan, zone=form.instance.timezone, rows=REVIEW_ROWS)
        context = {
            **self.admin_site.each_context(request),
            "title": _("Review change: %(rule)s") % {"rule": old.name},
            "opts": self.opts,
            "object": old,
            "plan": data,
            "stale": stale,
            "past_rows": data["past"]["rows"],
            "future_rows": data["future"]["rows"],
            "shown": REVIEW_ROWS,
            "posted": [(k, v) for k, values in request.POST.lists() if k != CONFIRM_FIELD for v in values],
            "confirm_field": CONFIRM_FIELD,
            "version": old.version,
            "cancel_url": change_url(old),
            "zone": form.instance.timezone,
            "changes": [{"field": _field_label(f), "old": _shown(o), "new": _shown(n)} for f, o, n in plan.changes],
            "dst_notes": [sentences.say(r) for r in _dst_notes(form.instance)],
        }
        return TemplateResponse(request, REVIEW_TEMPLATE, context)


def _field_label(name: str) -> str:
    try:
        return str(model_field(TriggerRule, name).verbose_name)
    except FieldDoesNotExist:
        return name


def _shown(value) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "—"
    return str(value)


def _dst_notes(rule: TriggerRule):
    if rule.kind in (TriggerRule.Kind.EVENT, TriggerRule.Kind.HEARTBEAT):
        return []
    return dst_changes(rule.schedule_spec(), now())
