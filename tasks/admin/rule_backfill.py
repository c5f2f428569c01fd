"""Backfill on the rule page: plan (a form) → confirmation (the plan, read-only and signed, see
tasks/admin/backfill_confirm.py) → execute exactly that plan. Mixed into the rule desk."""

from datetime import timedelta
from zoneinfo import ZoneInfo

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext as _

from harness_site.desk import desk_object, now, posted, require_perm
from tasks.admin.backfill_confirm import BackfillConfirmForm, backfill_token
from tasks.admin.base import RuleAdminBase
from tasks.admin.rule_forms import BackfillForm
from tasks.triggers.operator import (
    MAX_BACKFILL_RUNS,
    BackfillStale,
    RuleActionError,
    rule_backfill_confirmed,
    rule_backfill_plan,
)


class RuleBackfillMixin(RuleAdminBase):
    def backfill_view(self, request, object_id):
        """Plan (the form) → confirmation (the plan, read-only and signed) → execute exactly that plan."""
        require_perm(request, "tasks.backfill_rule")
        rule = desk_object(self, request, object_id)
        if request.method == "POST" and "token" in request.POST:
            return self._backfill_execute(request, rule)
        form = BackfillForm(posted(request))
        if request.method == "POST":
            return self._backfill_plan_page(request, rule, form)
        return self._backfill_form_page(request, rule, form)

    def _backfill_form_page(self, request, rule, form):
        return self._form_page(
            request,
            rule,
            form,
            title=_("Backfill %(rule)s") % {"rule": rule.name},
            submit_label=_("Show what it will create"),
            intro=_("Claims every slot in a date range (in %(zone)s), paced; at most %(max)s.")
            % {"zone": rule.timezone, "max": MAX_BACKFILL_RUNS},
        )

    def _backfill_plan_page(self, request, rule, form):
        """The confirmation page for a valid form, else the form with its errors. Creates nothing."""
        if not form.is_valid():
            return self._backfill_form_page(request, rule, form)
        data = form.cleaned_data
        try:
            plan = rule_backfill_plan(
                rule=rule, start=data["start"], end=data["end"], now=now(), spacing=timedelta(seconds=data["spacing"])
            )
        except RuleActionError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, str(exc))
            return self._backfill_form_page(request, rule, form)
        zone = ZoneInfo(rule.timezone)  # valid: rule_backfill_plan checked it
        lines = [
            _("%(n)s slot(s) from %(start)s to %(end)s (%(zone)s), up to now.")
            % {"n": len(plan.slots), "start": plan.start, "end": plan.end, "zone": rule.timezone},
            _("%(n)s already have a run (dedupe hits, nothing new).") % {"n": plan.existing},
            *(
                [
                    _(
                        "%(n)s share their business key with an earlier slot of this backfill (the key template "
                        "has no {slot}), so they add nothing."
                    )
                    % {"n": plan.repeats}
                ]
                if plan.repeats
                else []
            ),
            _("This will create %(n)s run(s), released one every %(spacing)ss over %(total)ss.")
            % {"n": plan.new_runs, "spacing": data["spacing"], "total": f"{plan.last_run_after_seconds:.0f}"},
        ]
        if plan.slots:
            lines.append(
                _("First slot %(first)s, last slot %(last)s.")
                % {
                    "first": f"{plan.slots[0].astimezone(zone):%Y-%m-%d %H:%M %Z}",
                    "last": f"{plan.slots[-1].astimezone(zone):%Y-%m-%d %H:%M %Z}",
                }
            )
        lines.append(_("Reason (for the audit log): %(reason)s") % {"reason": data["reason"] or "-"})
        lines.append(
            _(
                "Confirming creates exactly this plan for version %(version)s of the rule; "
                "to change the dates, spacing or reason, go back and plan again."
            )
            % {"version": plan.rule_version}
        )
        token = backfill_token(plan, reason=data["reason"], user=request.user)
        return self._form_page(
            request,
            rule,
            BackfillConfirmForm(initial={"token": token}, rule=rule, user=request.user),
            title=_("Confirm backfill of %(rule)s") % {"rule": rule.name},
            submit_label=_("Yes, create %(n)s run(s)") % {"n": plan.new_runs},
            plan_lines=lines,
            hidden=[("confirm", "yes")],
        )

    def _backfill_execute(self, request, rule):
        """The confirmation click: the signed plan, checked and executed as shown, or refused with a message."""
        confirm = BackfillConfirmForm(request.POST, rule=rule, user=request.user)
        if not confirm.is_valid():
            for error in confirm.non_field_errors():
                self.message_user(request, str(error), messages.ERROR)
            return self._backfill_form_page(request, rule, BackfillForm())
        c = confirm.cleaned_data["confirmed"]
        try:
            done = rule_backfill_confirmed(
                rule=rule,
                rule_version=c["rule_version"],
                start=c["start"],
                end=c["end"],
                spacing=c["spacing"],
                planned_at=c["planned_at"],
                slots=c["slots"],
                new_runs=c["new_runs"],
                actor=request.user,
                now=now(),
                reason=c["reason"],
            )
        except RuleActionError as exc:
            if isinstance(exc, BackfillStale) and exc.why == "version":
                text = _(
                    "The rule changed since this plan was shown (version %(then)s, now %(now)s); nothing was "
                    "created. Check the plan as it is now and confirm again."
                ) % {"then": exc.confirmed["rule_version"], "now": exc.found["rule_version"]}
            elif isinstance(exc, BackfillStale):
                text = _(
                    "The plan changed since it was shown: it would now create %(now)s run(s), not %(then)s; "
                    "nothing was created. Check the plan as it is now and confirm again."
                ) % {"now": exc.found["new_runs"], "then": exc.confirmed["new_runs"]}
            else:
                text = _("Nothing was created: %(error)s") % {"error": exc}
            self.message_user(request, text, messages.ERROR)
            again = BackfillForm(
                {
                    "start": c["start"].isoformat(),
                    "end": c["end"].isoformat(),
                    "spacing": int(c["spacing"].total_seconds()),
                    "reason": c["reason"],
                }
            )
            return self._backfill_plan_page(request, rule, again)
        self.message_user(
            request,
            _("Backfill of %(rule)s: %(created)s run(s) created, %(hits)s slot(s) already had a run.")
            % {"rule": rule.name, "created": done["created"], "hits": done["dedupe_hits"]},
            messages.SUCCESS,
        )
        return HttpResponseRedirect(
            reverse("admin:runs_taskrun_changelist") + f"?rule__id__exact={rule.pk}&source__exact=backfill"
        )
