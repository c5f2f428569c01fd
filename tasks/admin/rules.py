"""The rule pages of the operator's desk: the rule page (status, schedule preview, lint checklist,
business keys) and the buttons Run now, Trial run and Pause/Resume; Backfill is in
tasks/admin/rule_backfill.py. Mixed into TriggerRuleAdmin; every button is a get_urls view with a
form or a confirmation page. Forms: tasks/admin/rule_forms.py."""

import threading
from urllib.parse import quote, urlencode

from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from harness_site.desk import ReasonForm, change_url, desk_object, fieldsets_copy, now, posted, require_perm
from harness_site.templatetags.harness import ago_html
from runs.desk.dashboard import skill_duration_p99s
from runs.desk.status import rule_rows
from tasks import sentences
from tasks.admin.history import rule_status
from tasks.admin.rule_backfill import RuleBackfillMixin
from tasks.admin.rule_forms import RunNowForm, TriggerRuleForm
from tasks.admin.rule_lint import checklist_html, column_html, lint_input
from tasks.admin.rule_preview import preview_html, preview_view, rule_preview_data
from tasks.admin.rule_review import RuleReviewMixin
from tasks.models import TriggerRule
from tasks.rules import events, keys, lint, preview, schedule
from tasks.triggers.operator import RuleActionError, rule_pause, rule_resume, rule_run_now
from tasks.triggers.work import rule_key_examples


class RuleDeskMixin(RuleReviewMixin, RuleBackfillMixin):
    change_form_template = "admin/tasks/triggerrule/change_form.html"
    form = TriggerRuleForm
    _request_local = threading.local()

    def save_form(self, request, form, change):
        # A run-at moved past a DST gap (or read in a repeated hour) is saved, and the operator told.
        note = getattr(form, "run_at_note", "")
        if note:
            self.message_user(request, note, messages.WARNING)
        return super().save_form(request, form, change)

    # Injected beside the cron and in a checklist fieldset; see get_fieldsets.
    def get_readonly_fields(self, request, obj=None):
        fields = (*super().get_readonly_fields(request, obj), "schedule_preview", "lint_checklist", "key_preview")
        # A saved rule is paused and resumed only through Pause/Resume, which ask for a reason.
        return (*fields, "enabled") if obj is not None else fields

    def get_fieldsets(self, request, obj=None):
        fieldsets = fieldsets_copy(super().get_fieldsets(request, obj))
        placed = False
        for _name, opts in fieldsets:
            fields = list(opts.get("fields", ()))
            if "cron" in fields and "schedule_preview" not in fields:
                fields.insert(fields.index("timezone") + 1 if "timezone" in fields else len(fields), "schedule_preview")
                opts["fields"] = fields
                placed = True
        if not placed:
            fieldsets.append((gettext_lazy("Schedule preview"), {"fields": ["schedule_preview"]}))
        fieldsets = [
            (n, {**o, "fields": [f for f in o.get("fields", ()) if f != "lint_checklist"]}) for n, o in fieldsets
        ]
        fieldsets.insert(1, (gettext_lazy("Checklist"), {"fields": ["lint_checklist"]}))
        if obj is not None:
            # A saved rule's policies fold away (the status header and the checklist summarise them).
            folded = {"max_attempts", "lease_ttl_seconds", "pools", "catchup", "next_fire_at"}
            fieldsets = [
                (n, {**o, "classes": (*o.get("classes", ()), "collapse")})
                if folded.intersection(o.get("fields", ())) and "collapse" not in o.get("classes", ())
                else (n, o)
                for n, o in fieldsets
            ]
        return fieldsets

    def get_list_display(self, request):
        return (*super().get_list_display(request), "outcome_column", "tickets_column", "lint_column")

    def changelist_view(self, request, extra_context=None):
        # One p99 query per distinct skill for the whole page, not one per row; every rule's last
        # outcome and open tickets in the status board's three queries (runs/desk/status.py).
        skills = list(TriggerRule.objects.values_list("skill", flat=True).distinct())
        self._request_local.p99 = skill_duration_p99s(skills)
        self._request_local.rows = {row.id: row for row in rule_rows(now=now())}
        try:
            response = super().changelist_view(request, extra_context)
            # Rendered here, while the caches hold: a TemplateResponse renders after this returns.
            if hasattr(response, "render"):
                response.render()
            return response
        finally:
            self._request_local.p99 = None
            self._request_local.rows = None

    def _row(self, rule: TriggerRule):
        rows = getattr(self._request_local, "rows", None)
        return rows.get(rule.pk) if rows else None

    @admin.display(description=gettext_lazy("last outcome"))
    def outcome_column(self, rule: TriggerRule) -> str:
        row = self._row(rule)
        if row is None or row.last is None:
            return "—"
        last = row.last
        if last["kind"] == "run":
            url = reverse("admin:runs_taskrun_change", args=[last["run_id"]])
            return format_html(
                '<a href="{}"><span class="badge s-{}">{}</span></a> {}',
                url,
                last["state"],
                last["label"],
                ago_html(last["at"]),
            )
        url = reverse("admin:runs_decision_change", args=[last["decision_id"]])
        return format_html(
            '<a href="{}" title="{}"><span class="badge">{}</span></a> {}',
            url,
            last["label"],
            _("no run"),
            ago_html(last["at"]),
        )

    @admin.display(description=gettext_lazy("open dead letters"))
    def tickets_column(self, rule: TriggerRule) -> str:
        row = self._row(rule)
        if row is None or not row.open_tickets:
            return "0"
        url = (
            reverse("admin:deadletters_deadletter_changelist")
            + "?"
            + urlencode({"state__exact": "pending_manual", "rule_name__exact": rule.name})
        )
        return format_html('<a class="bad" href="{}">{}</a>', url, row.open_tickets)

    def _lint(self, rule: TriggerRule) -> list[lint.LintItem]:
        cache = getattr(self._request_local, "p99", None)
        p99 = cache.get(rule.skill) if cache is not None else skill_duration_p99s([rule.skill]).get(rule.skill)
        return lint.rule_lint(lint_input(rule, p99))

    @admin.display(description=gettext_lazy("Preview"))
    def schedule_preview(self, rule: TriggerRule) -> str:
        url = reverse("admin:tasks_triggerrule_preview")
        # A chosen start date (a past or coming Spring Festival); blank: from now. The page's script
        # sends it with the schedule; it is not a field of the rule.
        start = format_html(
            '<p class="preview-from"><label for="rule-preview-from">{}</label> '
            '<input type="date" id="rule-preview-from" min="{}-01-01" max="{}-12-31"> '
            '<span class="help">{}</span></p>',
            _("Preview from"),
            f"{preview.FROM_YEARS[0]:04d}",
            preview.FROM_YEARS[1],
            _("a day in the rule's timezone; blank: from now"),
        )
        return format_html(
            '{}<div id="rule-preview" data-url="{}" data-rule="{}">{}</div>',
            start,
            url,
            rule.pk or "",
            preview_html(rule_preview_data(rule)),
        )

    @admin.display(description=gettext_lazy("Lint"))
    def lint_checklist(self, rule: TriggerRule) -> str:
        return checklist_html(self._lint(rule))

    @admin.display(description=gettext_lazy("Business keys"))
    def key_preview(self, rule: TriggerRule) -> str:
        """The biz_keys this rule's triggers would claim, namespace and escaping included."""
        if rule.pk is None:
            return _("Shown once the rule is saved: every key starts with the rule's id.")
        labels = {"slot": _("next slot"), "manual": _("run now"), "trial": _("trial run"), "event": _("example event")}
        try:
            examples = rule_key_examples(rule, now=now())
        except (keys.KeyTemplateError, schedule.ScheduleError, events.Refused, KeyError, ValueError) as exc:
            error = _("no preview: %(error)s") % {"error": sentences.error_text(exc)}
            return format_html('<span class="errorlist">{}</span>', error)
        rows = format_html_join("", "<li>{}: <code>{}</code></li>", ((labels[k], key) for k, key in examples))
        return format_html('<ul id="rule-key-preview">{}</ul>', rows)

    @admin.display(description=gettext_lazy("lint"))
    def lint_column(self, rule: TriggerRule) -> str:
        return column_html(self._lint(rule))

    def get_urls(self):
        wrap = self.admin_site.admin_view
        mine = [
            path("preview.json", wrap(preview_view), name="tasks_triggerrule_preview"),
            path("<path:object_id>/run-now/", wrap(self.run_now_view), name="tasks_triggerrule_run_now"),
            path("<path:object_id>/trial/", wrap(self.trial_view), name="tasks_triggerrule_trial"),
            path("<path:object_id>/pause/", wrap(self.pause_view), name="tasks_triggerrule_pause"),
            path("<path:object_id>/backfill/", wrap(self.backfill_view), name="tasks_triggerrule_backfill"),
        ]
        return mine + super().get_urls()

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra = {**(extra_context or {})}
        # isascii: str.isdigit() is also true for "²", which the query would refuse with a 500.
        rule = TriggerRule.objects.filter(pk=object_id).first() if object_id.isascii() and object_id.isdigit() else None
        if rule is not None:
            user = request.user
            extra["desk_buttons"] = [
                (label, reverse(f"admin:tasks_triggerrule_{name}", args=[rule.pk]), f"rule-{name}")
                for label, name, perm in (
                    (_("Run now"), "run_now", "tasks.run_rule_now"),
                    (_("Trial run"), "trial", "tasks.trial_run_rule"),
                    (_("Pause") if rule.enabled else _("Resume"), "pause", "tasks.pause_rule"),
                    (_("Backfill"), "backfill", "tasks.backfill_rule"),
                )
                if user.has_perm(perm)
            ]
            extra["runs_url"] = reverse("admin:runs_taskrun_changelist") + f"?rule__id__exact={rule.pk}"
            extra["rule_status"] = rule_status(rule, now=now())
            extra["rule_words"] = self._schedule_words(rule)
            extra["explain_url"] = reverse("admin:tasks_triggerrule_explain", args=[rule.pk])
            extra["tickets_url"] = (
                reverse("admin:deadletters_deadletter_changelist")
                + "?state__exact=pending_manual&rule_name__exact="
                + quote(rule.name)
            )
            try:
                # The date/time widgets' "Now" and "Today" links: the rule zone's clock, as the form reads them.
                offset = now().astimezone(schedule.validate_timezone(rule.timezone)).utcoffset()
                extra["rule_utc_offset"] = int(offset.total_seconds())
            except schedule.ScheduleError:
                pass
        return super().change_view(request, object_id, form_url, extra)

    # --- views ---

    @staticmethod
    def _schedule_words(rule: TriggerRule) -> str:
        if rule.kind == TriggerRule.Kind.CRON:
            return sentences.cron_description(rule.cron) or rule.cron
        if rule.kind == TriggerRule.Kind.INTERVAL:
            return _("Every %(n)s seconds") % {"n": rule.interval_seconds}
        if rule.kind in (TriggerRule.Kind.EVENT, TriggerRule.Kind.HEARTBEAT):
            return sentences.say(preview.unscheduled(rule.kind).description)
        return _("Once")

    def run_now_view(self, request, object_id):
        return self._run_now_page(request, object_id, trial=False)

    def trial_view(self, request, object_id):
        return self._run_now_page(request, object_id, trial=True)

    def _run_now_page(self, request, object_id, *, trial: bool):
        """Run now and trial run: the same form and the same claim; a trial gets its own key namespace."""
        require_perm(request, "tasks.trial_run_rule" if trial else "tasks.run_rule_now")
        rule = desk_object(self, request, object_id)
        form = RunNowForm(posted(request), rule=rule)
        if request.method == "POST" and form.is_valid():
            try:
                claim = rule_run_now(
                    rule=rule,
                    actor=request.user,
                    now=now(),
                    slot=form.cleaned_data["slot"],
                    biz_key=form.cleaned_data["biz_key"],
                    reason=form.cleaned_data["reason"],
                    trial=trial,
                )
            except RuleActionError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, str(exc))
            else:
                return self._claimed(request, claim)
        if trial:
            title = _("Trial run of %(rule)s") % {"rule": rule.name}
            submit_label = _("Start trial run")
            intro = _(
                "A trial is a real run flagged as trial, with its business key under %(slot_keys)s (a named key: "
                "%(named_keys)s): it never dedupes against or blocks the real run. It works on paused rules too "
                "(gray release)."
            ) % {
                "slot_keys": keys.namespace(rule.id, keys.TRIAL),
                "named_keys": keys.namespace(rule.id, keys.TRIAL_KEY),
            }
        else:
            title = _("Run %(rule)s now") % {"rule": rule.name}
            submit_label = _("Run now")
            intro = _(
                "A real run through the same claim as the scheduler: a second click for the same slot or key "
                "changes nothing. Times are in %(zone)s."
            ) % {"zone": rule.timezone}
        return self._form_page(request, rule, form, title=title, submit_label=submit_label, intro=intro)

    def _claimed(self, request, claim):
        run = claim.run
        text = (
            _("Trial run #%(id)s created for %(biz_key)s.")
            if run.is_trial
            else _("Run #%(id)s created for %(biz_key)s.")
        )
        if claim.created:
            self.message_user(request, text % {"id": run.id, "biz_key": run.biz_key}, messages.SUCCESS)
        else:
            self.message_user(
                request,
                _("%(biz_key)s already has run #%(id)s (%(state)s): counted as a dedupe hit, nothing new started.")
                % {"biz_key": run.biz_key, "id": run.id, "state": run.get_state_display()},
                messages.WARNING,
            )
        return HttpResponseRedirect(reverse("admin:runs_taskrun_change", args=[run.id]))

    def pause_view(self, request, object_id):
        require_perm(request, "tasks.pause_rule")
        rule = desk_object(self, request, object_id)
        form = ReasonForm(posted(request))
        verb = _("Pause") if rule.enabled else _("Resume")
        if request.method == "POST" and form.is_valid():
            service = rule_pause if rule.enabled else rule_resume
            try:
                service(rule=rule, actor=request.user, now=now(), reason=form.cleaned_data["reason"])
            except RuleActionError as exc:
                form.add_error("reason" if exc.field == "reason" else None, str(exc))
            else:
                done = _("%(rule)s paused.") if rule.enabled else _("%(rule)s resumed.")
                self.message_user(request, done % {"rule": rule.name}, messages.SUCCESS)
                return HttpResponseRedirect(change_url(rule))
        intro = (
            _("Paused rules create no runs; slots while paused are not caught up on resume.")
            if rule.enabled
            else _("Paused: %(reason)s. Resuming reads the schedule again from now.")
            % {"reason": rule.pause_reason or _("no reason recorded")}
        )
        title = (_("Pause %(rule)s") if rule.enabled else _("Resume %(rule)s")) % {"rule": rule.name}
        return self._form_page(request, rule, form, title=title, submit_label=verb, intro=intro)
