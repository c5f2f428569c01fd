"""The decision list's "Re-run chosen slots": the plan first (tasks/triggers/rerun.py), then exactly
that plan on "yes", audited. Thin: the service plans, checks and claims."""

import json
from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from harness_site.desk import OptionalReasonForm, now
from runs.models import Decision, TaskRun
from tasks.triggers import rerun
from tasks.triggers.operator import RuleActionError

REFUSALS = {
    rerun.HAS_RUN: gettext_lazy("already has a run"),
    rerun.SAME_KEY: gettext_lazy("same business key as another chosen slot"),
    rerun.NO_SLOT: gettext_lazy("not a scheduled slot"),
    rerun.NO_RULE: gettext_lazy("its rule was deleted"),
    rerun.NOT_A_SLOT: gettext_lazy("not a slot of the rule"),
    rerun.NOT_DUE: gettext_lazy("not due yet"),
}
# One run per key: a slot whose run failed is replayed on that run (retry now), never run again.
FAILED_RUN = gettext_lazy("its run failed: replay it with Retry now")


class RerunForm(OptionalReasonForm):
    spacing = forms.IntegerField(
        label=gettext_lazy("Spacing (seconds)"),
        min_value=0,
        max_value=3600,
        initial=int(rerun.DEFAULT_BACKFILL_SPACING.total_seconds()),
        help_text=gettext_lazy("The runs are released one every this many seconds, as a backfill's are."),
    )
    confirmed = forms.CharField(widget=forms.HiddenInput)


def rerun_slots(modeladmin: admin.ModelAdmin, request, queryset):
    """Plan (the page) → "yes" → claim exactly the slots shown, or refuse with a message."""
    ids = list(queryset.values_list("id", flat=True))
    at = now()
    confirmed = request.POST.get("post") == "yes"
    form = RerunForm(request.POST if confirmed else None)
    if confirmed and form.is_valid():
        try:
            done = rerun.slots_rerun(
                decision_ids=ids,
                confirmed=json.loads(form.cleaned_data["confirmed"]),
                spacing=timedelta(seconds=form.cleaned_data["spacing"]),
                actor=request.user,
                now=at,
                reason=form.cleaned_data["reason"],
            )
        except rerun.RerunStale:
            modeladmin.message_user(
                request,
                _("The plan changed since it was shown (a slot has run meanwhile); nothing was created. Plan again."),
                messages.ERROR,
            )
            return None
        modeladmin.message_user(
            request,
            _("Re-ran %(created)s slot(s); %(hits)s already had a run.")
            % {"created": done["created"], "hits": done["dedupe_hits"]},
            messages.SUCCESS if done["created"] else messages.WARNING,
        )
        return None
    spacing = form.cleaned_data["spacing"] if form.is_bound and form.is_valid() else form.fields["spacing"].initial
    try:
        plan = rerun.slots_rerun_plan(decision_ids=ids, now=at, spacing=timedelta(seconds=spacing))
    except RuleActionError:
        modeladmin.message_user(
            request, _("Choose at most %(n)s slots at once.") % {"n": rerun.MAX_BACKFILL_RUNS}, messages.ERROR
        )
        return None
    if not form.is_bound:
        form = RerunForm(initial={"confirmed": json.dumps(plan.signature), "spacing": spacing})
    rows = [
        {"item": item, "reason": reason_text(item), "refusal": "", "after": plan.spacing.total_seconds() * n}
        for n, item in enumerate(plan.to_run)
    ] + [
        {"item": item, "reason": reason_text(item), "refusal": refusal_text(item), "after": None}
        for item in plan.items
        if item.refused
    ]
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": _("Re-run chosen slots"),
        "opts": modeladmin.opts,
        "rows": rows,
        "run_count": len(plan.to_run),
        "count": len(plan.items),
        "form": form,
        "selected_ids": [str(i) for i in ids],
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, "admin/runs/decision/rerun.html", context)


def refusal_text(item: rerun.RerunItem) -> str:
    if item.refused == rerun.HAS_RUN and item.run_state == TaskRun.State.FAILED:
        return str(FAILED_RUN)
    return str(REFUSALS[item.refused])


def reason_text(item: rerun.RerunItem) -> str:
    """The slot's decision in the reader's language ("" when none was recorded)."""
    return str(Decision.Reason(item.reason).label) if item.reason in Decision.Reason.values else item.reason
