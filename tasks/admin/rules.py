"""The rule pages of the operator's desk: the rule form (a one-time rule's run-at typed on the rule
zone's clock), schedule preview (live, as the operator types), the lint checklist, and the buttons
Run now, Trial run, Pause/Resume and Backfill. Mixed into TriggerRuleAdmin; every button is a
get_urls view with a form or a confirmation page."""

import threading
from datetime import UTC, date, datetime, timedelta
from urllib.parse import quote
from zoneinfo import ZoneInfo

from cron_descriptor import ExpressionDescriptor, FormatException, Options
from django import forms
from django.contrib import messages
from django.contrib.admin import widgets as admin_widgets
from django.core import signing
from django.http import HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.text import capfirst, format_lazy
from django.utils.translation import get_language, gettext_lazy
from django.utils.translation import gettext as _

from deadletters.alerts import ALERT_FIELDS
from harness_site.desk import FORM_TEMPLATE, ReasonForm, change_url, desk_object, now, posted, require_perm
from runs.dashboard import skill_duration_p99s
from runs.models import Backpressure
from tasks.admin import lint_text
from tasks.admin.history import rule_status
from tasks.models import ReadinessFlag, TriggerRule
from tasks.models.pool import GLOBAL_POOL
from tasks.rules import evaluation, events, keys, lint, schedule
from tasks.rules.guards import rule_guards
from tasks.rules.preview import WallInstant, wall_instant
from tasks.triggers.operator import (
    DEFAULT_BACKFILL_SPACING,
    MAX_BACKFILL_RUNS,
    BackfillPlan,
    BackfillStale,
    RuleActionError,
    rule_backfill_confirmed,
    rule_backfill_plan,
    rule_pause,
    rule_resume,
    rule_run_now,
)
from tasks.triggers.work import rule_key_examples

PREVIEW_COUNT = 10
PREVIEW_FIELDS = ("kind", "cron", "interval_seconds", "timezone", "dst_gap", "dst_repeat")
SLOT_FORMATS = ("%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S")
# A backfill confirmation page carries its plan signed: the click executes that plan or nothing.
BACKFILL_CONFIRM_SALT = "tasks.admin.rules.backfill-confirm"
BACKFILL_CONFIRM_MAX_AGE = 30 * 60  # seconds


# --- pure-ish helpers (no request) ---------------------------------------------------------


def cron_description(expr: str) -> str:
    """Human words for a cron expression, or "" if cron-descriptor cannot read it."""
    options = Options()
    options.use_24hour_time_format = True
    # cron-descriptor speaks Chinese too.
    options.locale_code = "zh_CN" if (get_language() or "").startswith("zh") else "en_US"
    try:
        return ExpressionDescriptor(expr, options).get_description()
    except (FormatException, ValueError, IndexError, KeyError):
        return ""


def schedule_preview(data: dict, *, at: datetime, count: int = PREVIEW_COUNT, rule: TriggerRule | None = None) -> dict:
    """The preview for a (possibly unsaved) schedule: {"ok", "errors", "description", "fires", "dst_notes"}.

    `data` holds the form's raw strings; every problem is reported per field, never raised. With the
    saved `rule`, each fire also says what its windows, calendar and pause do to it ("guards"): one
    next-fires table on the rule page, live as the operator types.
    """
    try:
        interval = int(data.get("interval_seconds") or 0) or None
    except (TypeError, ValueError):
        return {"ok": False, "errors": {"interval_seconds": _("must be a whole number")}, "fires": []}
    spec = schedule.ScheduleSpec(
        kind=data.get("kind") or "cron",
        timezone=(data.get("timezone") or "").strip(),
        cron=(data.get("cron") or "").strip(),
        interval_seconds=interval,
        run_at=data.get("run_at"),
        dst_gap=data.get("dst_gap") or "shift",
        dst_repeat=data.get("dst_repeat") or "first",
    )
    try:
        fires = schedule.preview(spec, at, count)
    except schedule.ScheduleError as exc:
        return {"ok": False, "errors": {exc.field: lint_text.schedule_error_text(exc.message)}, "fires": []}
    except (OverflowError, ValueError, TypeError) as exc:
        # e.g. an interval so long the next slot is past year 9999: the form says why; the preview
        # must not turn that into an error page.
        field = "interval_seconds" if spec.kind == "interval" else "kind"
        return {"ok": False, "errors": {field: _("no preview: %(error)s") % {"error": exc}}, "fires": []}
    if spec.kind == "cron":
        description = cron_description(spec.cron)
    elif spec.kind == "interval":
        description = _("Every %(n)s seconds (aligned to UTC, so DST never moves it)") % {"n": spec.interval_seconds}
    else:
        description = _once_description(spec, at)
    items = [
        {
            "local": local_text(f["local"]),
            "utc": f["utc"].strftime("%Y-%m-%d %H:%M:%S UTC"),
            "note": f["note"],
            **({"guards": fire_guards(rule, f["utc"])} if rule is not None and rule.pk else {}),
        }
        for f in fires
    ]
    return {
        "ok": True,
        "errors": {},
        "description": description,
        "timezone": spec.timezone,
        "fires": items,
        "dst_notes": _dst_notes(spec, at),
    }


def local_text(local: datetime) -> str:
    """A wall time with its weekday in the user's language: Wed / 周三 2026-12-02 09:00:00 CST (UTC+0800)."""
    return f"{date_format(local, 'D')} {local:%Y-%m-%d %H:%M:%S %Z (UTC%z)}"


def fire_guards(rule: TriggerRule, slot: datetime) -> str:
    """What the rule's pause, windows and calendar do to one fire, in words ("" when it simply runs)."""
    if not rule.enabled:
        return _("paused: will not run while the rule is paused")
    try:
        return evaluation.describe_slot(rule_guards(rule), slot)
    except (ValueError, TypeError, KeyError) as exc:  # a rule saved around full_clean must not 500 the page
        return _("cannot evaluate the guards: %(error)s") % {"error": exc}


def _once_description(spec: schedule.ScheduleSpec, at: datetime) -> str:
    """A one-time rule's instant on the rule zone's clock and in UTC, and whether it is still ahead."""
    run_at = spec.run_at.astimezone(UTC)  # validated: aware and in range
    values = {
        "local": local_text(run_at.astimezone(ZoneInfo(spec.timezone))),
        "utc": run_at.strftime("%Y-%m-%d %H:%M:%S UTC"),
    }
    if run_at <= at:
        return _("Once at %(local)s = %(utc)s: already past, so it will not run.") % values
    return _("Once at %(local)s = %(utc)s") % values


def _dst_notes(spec: schedule.ScheduleSpec, at: datetime) -> list[str]:
    """The zone's next offset changes within a year, and what the rule's DST policies do then."""
    zone = ZoneInfo(spec.timezone)
    notes = []
    day = at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    offset = day.astimezone(zone).utcoffset()
    for _day in range(366):
        nxt = day + timedelta(days=1)
        if nxt.astimezone(zone).utcoffset() != offset:
            # Bisect to the hour of the change.
            lo, hi = day, nxt
            while hi - lo > timedelta(hours=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(zone).utcoffset() == offset:
                    lo = mid
                else:
                    hi = mid
            new = nxt.astimezone(zone).utcoffset()
            forward = new > offset
            when = hi.astimezone(zone).strftime("%Y-%m-%d")
            if forward:
                what = _("skipped") if spec.dst_gap == "skip" else _("shifted to the first valid time after the gap")
                notes.append(
                    _("%(when)s: clocks go forward (UTC%(old)s → UTC%(new)s); wall times in the gap are %(what)s.")
                    % {"when": when, "old": _fmt(offset), "new": _fmt(new), "what": what}
                )
            else:
                notes.append(
                    _(
                        "%(when)s: clocks go back (UTC%(old)s → UTC%(new)s); "
                        "a repeated wall time runs: %(repeat)s occurrence(s)."
                    )
                    % {"when": when, "old": _fmt(offset), "new": _fmt(new), "repeat": spec.dst_repeat}
                )
            offset = new
            if len(notes) == 2:
                break
        day = nxt
    return notes or [_("%(zone)s has no DST change in the next year.") % {"zone": spec.timezone}]


def _fmt(offset: timedelta) -> str:
    minutes = int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def lint_input(rule: TriggerRule, p99: float | None) -> lint.LintInput:
    depends = tuple(f for f in (rule.depends_on or []) if isinstance(f, str))
    return lint.LintInput(
        timezone=rule.timezone,
        dedupe_key_template=rule.dedupe_key_template,
        params=rule.params if isinstance(rule.params, dict) else {},
        max_attempts=rule.max_attempts,
        max_retry_window_seconds=rule.max_retry_window_seconds,
        max_delay_seconds=rule.max_delay_seconds,
        jitter_min=rule.jitter_min,
        jitter_max=rule.jitter_max,
        catchup_max_delay_seconds=rule.catchup_max_delay_seconds,
        lease_ttl_seconds=rule.lease_ttl_seconds,
        skill_p99_seconds=p99,
        alert_fields=ALERT_FIELDS,
        depends_on=depends,
        kind=rule.kind,
        event_key_by_date=rule.event_key_by_date,
        flags_seen=frozenset(
            ReadinessFlag.objects.filter(name__in=depends).values_list("name", flat=True) if depends else ()
        ),
        recoverability=rule.recoverability,
        object_key_template=rule.object_key_template,
        coalesce_window_seconds=rule.coalesce_window_seconds or 0,
        watermarks=rule_watermarks(rule),
    )


def rule_watermarks(rule: TriggerRule) -> tuple[tuple[str, int | None, int | None], ...]:
    """(scope, high, low) of the global pool and of the rule's pools that have a watermark row."""
    rows = Backpressure.objects.select_related("pool").filter(pool__name=GLOBAL_POOL)
    if rule.pk is not None:
        rows = rows | Backpressure.objects.select_related("pool").filter(pool__in=rule.pools.all())
    return tuple((r.pool.name, r.high_watermark, r.low_watermark) for r in rows.order_by("pool__name"))


def _parse_slot(text: str, zone_name: str) -> datetime:
    """A wall-clock time typed in the rule's zone → an aware UTC instant."""
    zone = schedule.validate_timezone(zone_name)
    for fmt in SLOT_FORMATS:
        try:
            wall = datetime.strptime(text.strip(), fmt)  # noqa: DTZ007 - a wall time in the rule's zone
        except ValueError:
            continue
        try:
            return wall.replace(tzinfo=zone).astimezone(UTC)
        except OverflowError:  # year 1 or 9999 pushed past datetime's range by the zone's offset
            break
    raise forms.ValidationError(
        _("%(text)s is not a time like 2026-12-01 09:00 (in %(zone)s).") % {"text": repr(text), "zone": zone_name}
    )


# --- forms ----------------------------------------------------------------------------------


class WallClockDateTimeField(forms.SplitDateTimeField):
    """The admin's date and time inputs, kept as typed: a naive wall-clock datetime. Django would
    read it in the server's TIME_ZONE (UTC); TriggerRuleForm reads it in the rule's own zone."""

    def compress(self, data_list):
        if not data_list:
            return None
        if data_list[0] in self.empty_values:
            raise forms.ValidationError(self.error_messages["invalid_date"], code="invalid_date")
        if data_list[1] in self.empty_values:
            raise forms.ValidationError(self.error_messages["invalid_time"], code="invalid_time")
        return datetime.combine(*data_list)


def run_at_field() -> WallClockDateTimeField:
    return WallClockDateTimeField(
        required=False,
        label=capfirst(TriggerRule._meta.get_field("run_at").verbose_name),
        widget=admin_widgets.AdminSplitDateTime,
        help_text=gettext_lazy(
            "For one-time rules: the date and time on the wall clock in the rule's timezone (the Timezone "
            "field), not UTC; stored as UTC and shown here in the rule's timezone."
        ),
    )


def read_run_at(wall: datetime, *, timezone: str, dst_gap: str, dst_repeat: str) -> WallInstant:
    """A typed run-at on the rule zone's clock; forms.ValidationError (translated) says what is wrong.
    A schedule.ScheduleError for the zone or a DST policy is left to the caller: it names that field."""
    try:
        found = wall_instant(wall, timezone=timezone, dst_gap=dst_gap, dst_repeat=dst_repeat)
    except schedule.ScheduleError as exc:
        if exc.field != "run_at":
            raise
        raise forms.ValidationError(
            _("%(wall)s in %(zone)s is out of range: give an instant between year 1 and 9999-12-31 UTC.")
            % {"wall": f"{wall:%Y-%m-%d %H:%M}", "zone": timezone},
            code="out_of_range",
        ) from exc
    if found.utc is None:
        raise forms.ValidationError(
            _(
                "%(wall)s does not exist in %(zone)s (the clocks go forward then). With DST gap "
                '"skip" this one-time rule would never run: choose another time, or DST gap "shift".'
            )
            % {"wall": f"{wall:%Y-%m-%d %H:%M}", "zone": timezone},
            code="dst_gap",
        )
    return found


def run_at_note(found: WallInstant) -> str:
    """What a DST gap or repeat did to a typed run-at, for the operator; "" when nothing."""
    local = found.local
    values = {
        "wall": f"{found.wall:%Y-%m-%d %H:%M}",
        "zone": found.timezone,
        "local": f"{local:%H:%M %Z}",
        "utc": f"{found.utc:%Y-%m-%d %H:%M} UTC",
    }
    if found.dst == "gap":
        return (
            _("%(wall)s does not exist in %(zone)s (the clocks go forward then): it runs at %(local)s (%(utc)s).")
            % values
        )
    if found.dst == "repeat":
        return (
            _("%(wall)s happens twice in %(zone)s (the clocks go back then): it runs at %(local)s (%(utc)s).") % values
        )
    return ""


class TriggerRuleForm(forms.ModelForm):
    """The rule admin's form: a one-time rule's run-at is typed and shown on the rule zone's wall
    clock (its DST policies decide gaps and repeats, as for cron) and stored as UTC."""

    run_at = run_at_field()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, rows in (("reason", 2), ("params", 4), ("output_schema", 4)):
            if name in self.fields:  # a shorter page: the boxes grow as the operator types (resize)
                self.fields[name].widget.attrs["rows"] = rows
        self.run_at_note = ""
        self._shown_run_at = None
        stored = self.instance.run_at
        if stored is not None and "run_at" in self.fields:
            try:
                zone = schedule.validate_timezone(self.instance.timezone)
            except schedule.ScheduleError:
                return  # shown as Django shows it; the zone must be fixed before the form saves
            self._shown_run_at = stored.astimezone(zone).replace(tzinfo=None)
            self.initial["run_at"] = self._shown_run_at

    def clean(self):
        data = super().clean()
        wall = data.get("run_at")
        if not isinstance(wall, datetime) or wall.tzinfo is not None:
            return data
        zone = data.get("timezone") or ""
        if (
            self._shown_run_at is not None
            and wall == self._shown_run_at.replace(microsecond=0)
            and zone == self.instance.timezone
        ):
            data["run_at"] = self.instance.run_at  # untouched: keep the stored instant (and its fold)
            return data
        kind = data.get("kind")
        try:
            found = read_run_at(
                wall,
                timezone=zone,
                # Only a one-time rule's run-at must exist; an ignored one is just moved past a gap.
                dst_gap=(data.get("dst_gap") or "shift") if kind == TriggerRule.Kind.ONCE else "shift",
                dst_repeat=data.get("dst_repeat") or "first",
            )
        except forms.ValidationError as exc:
            self.add_error("run_at", exc)
        except schedule.ScheduleError:
            # The zone (or a DST policy) is invalid: the model's clean says so on that field, so the
            # form cannot save. Keep the typed value, unread, so it is not also reported as missing.
            data["run_at"] = wall.replace(tzinfo=UTC)
        else:
            data["run_at"] = found.utc
            self.run_at_note = run_at_note(found) if kind == TriggerRule.Kind.ONCE else ""
        return data


class RunNowForm(forms.Form):
    slot = forms.CharField(
        required=False,
        label=gettext_lazy("Slot"),
        help_text=gettext_lazy("Wall time in the rule's zone, e.g. 2026-12-01 09:00. Empty: this minute."),
    )
    biz_key = forms.CharField(
        required=False,
        max_length=255,
        label=gettext_lazy("Business key"),
        help_text=gettext_lazy("Instead of a slot: run exactly this business key."),
    )
    reason = forms.CharField(
        required=False, label=gettext_lazy("Reason"), widget=forms.Textarea(attrs={"rows": 2, "cols": 60})
    )

    def __init__(self, *args, rule: TriggerRule, **kwargs):
        super().__init__(*args, **kwargs)
        self.rule = rule

    def clean_slot(self):
        text = self.cleaned_data["slot"]
        if not text:
            return None
        try:
            return _parse_slot(text, self.rule.timezone)
        except schedule.ScheduleError as exc:
            raise forms.ValidationError(_("The rule's zone is invalid: %(error)s") % {"error": exc.message}) from exc

    def clean(self):
        data = super().clean()
        if data.get("slot") and data.get("biz_key"):
            raise forms.ValidationError(_("Give a slot or a business key, not both."))
        return data


class BackfillForm(forms.Form):
    start = forms.DateField(
        label=gettext_lazy("Start"), help_text=gettext_lazy("First local date (rule's zone), e.g. 2026-11-01.")
    )
    end = forms.DateField(
        label=gettext_lazy("End"),
        help_text=format_lazy(
            gettext_lazy("Last local date, inclusive. At most {max} slots in all."), max=MAX_BACKFILL_RUNS
        ),
    )
    spacing = forms.IntegerField(
        min_value=0,
        max_value=3600,
        initial=int(DEFAULT_BACKFILL_SPACING.total_seconds()),
        label=gettext_lazy("Spacing"),
        help_text=gettext_lazy("Seconds between the runs becoming due, so the backfill does not flood the workers."),
    )
    reason = forms.CharField(
        required=False, label=gettext_lazy("Reason"), widget=forms.Textarea(attrs={"rows": 2, "cols": 60})
    )


def backfill_token(plan: BackfillPlan, *, reason: str, user) -> str:
    """The plan a confirmation page shows, signed: what the click may execute, and nothing else."""
    return signing.dumps(
        {
            "rule": plan.rule.pk,
            "version": plan.rule_version,
            "start": plan.start.isoformat(),
            "end": plan.end.isoformat(),
            "spacing": int(plan.spacing.total_seconds()),
            "planned_at": plan.planned_at.isoformat(),
            "slots": len(plan.slots),
            "new_runs": plan.new_runs,
            "reason": reason,
            "by": user.pk,
        },
        salt=BACKFILL_CONFIRM_SALT,
    )


class BackfillConfirmForm(forms.Form):
    """The confirmation click: only the signed plan travels back; it is checked here, never edited."""

    token = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, rule: TriggerRule, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.rule, self.user = rule, user

    def clean(self):
        data = super().clean()
        invalid = forms.ValidationError(
            _(
                "This confirmation is not valid (it was changed, or made for another rule or user); "
                "nothing was created. Plan the backfill again."
            ),
            code="invalid",
        )
        try:
            signed = signing.loads(
                data.get("token") or "", salt=BACKFILL_CONFIRM_SALT, max_age=BACKFILL_CONFIRM_MAX_AGE
            )
        except signing.SignatureExpired:
            raise forms.ValidationError(
                _(
                    "This confirmation has expired (it holds for %(minutes)s minutes); nothing was created. "
                    "Plan the backfill again."
                )
                % {"minutes": BACKFILL_CONFIRM_MAX_AGE // 60},
                code="expired",
            ) from None
        except signing.BadSignature:
            raise invalid from None
        try:
            confirmed = {
                "rule_version": int(signed["version"]),
                "start": date.fromisoformat(signed["start"]),
                "end": date.fromisoformat(signed["end"]),
                "spacing": timedelta(seconds=int(signed["spacing"])),
                "planned_at": datetime.fromisoformat(signed["planned_at"]),
                "slots": int(signed["slots"]),
                "new_runs": int(signed["new_runs"]),
                "reason": str(signed["reason"]),
            }
            mine = signed["rule"] == self.rule.pk and signed["by"] == self.user.pk
        except (KeyError, TypeError, ValueError):
            raise invalid from None
        if not mine:
            raise invalid
        data["confirmed"] = confirmed
        return data


# --- the admin mixin ------------------------------------------------------------------------


class RuleDeskMixin:
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
        fieldsets = [(name, dict(opts)) for name, opts in super().get_fieldsets(request, obj)]
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
        return (*super().get_list_display(request), "lint_column")

    def changelist_view(self, request, extra_context=None):
        # One p99 query per distinct skill for the whole page, not one per row.
        skills = list(TriggerRule.objects.values_list("skill", flat=True).distinct())
        self._request_local.p99 = skill_duration_p99s(skills)
        try:
            return super().changelist_view(request, extra_context)
        finally:
            self._request_local.p99 = None

    def _lint(self, rule: TriggerRule) -> list[lint.LintItem]:
        cache = getattr(self._request_local, "p99", None)
        p99 = cache.get(rule.skill) if cache is not None else skill_duration_p99s([rule.skill]).get(rule.skill)
        return lint.rule_lint(lint_input(rule, p99))

    @staticmethod
    def _preview_data(rule: TriggerRule) -> dict:
        data = {f: getattr(rule, f) for f in PREVIEW_FIELDS}
        data["run_at"] = rule.run_at
        return schedule_preview(data, at=now(), rule=rule)

    def schedule_preview(self, rule: TriggerRule) -> str:
        preview = self._preview_data(rule)
        url = reverse("admin:tasks_triggerrule_preview")
        return format_html(
            '<div id="rule-preview" data-url="{}" data-rule="{}">{}</div>', url, rule.pk or "", _preview_html(preview)
        )

    schedule_preview.short_description = gettext_lazy("Preview")

    def lint_checklist(self, rule: TriggerRule) -> str:
        items = self._lint(rule)
        rows = format_html_join(
            "",
            '<li class="lint-{}"><strong>{} {}</strong>: {}</li>',
            (
                (i.status, _ICON[i.status], lint_text.check_text(i.check), lint_text.message_text(i.message))
                for i in items
            ),
        )
        return format_html('<ul id="rule-lint" class="rule-lint">{}</ul>', rows)

    lint_checklist.short_description = gettext_lazy("Lint")

    def key_preview(self, rule: TriggerRule) -> str:
        """The biz_keys this rule's triggers would claim, namespace and escaping included."""
        if rule.pk is None:
            return _("Shown once the rule is saved: every key starts with the rule's id.")
        labels = {"slot": _("next slot"), "manual": _("run now"), "trial": _("trial run"), "event": _("example event")}
        try:
            examples = rule_key_examples(rule, now=now())
        except (keys.KeyTemplateError, schedule.ScheduleError, events.Refused, KeyError, ValueError) as exc:
            return format_html('<span class="errorlist">{}</span>', _("no preview: %(error)s") % {"error": exc})
        rows = format_html_join("", "<li>{}: <code>{}</code></li>", ((labels[k], key) for k, key in examples))
        return format_html('<ul id="rule-key-preview">{}</ul>', rows)

    key_preview.short_description = gettext_lazy("Business keys")

    def lint_column(self, rule: TriggerRule) -> str:
        summary = lint.lint_summary(self._lint(rule))
        status = "pass" if summary == "ok" else ("fail" if "fail" in summary else "warn")
        return format_html('<span class="lint-{}">{} {}</span>', status, _ICON[status], lint_text.summary_text(summary))

    lint_column.short_description = gettext_lazy("lint")

    def get_urls(self):
        wrap = self.admin_site.admin_view
        mine = [
            path("preview.json", wrap(self.preview_view), name="tasks_triggerrule_preview"),
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
            return cron_description(rule.cron) or rule.cron
        if rule.kind == TriggerRule.Kind.INTERVAL:
            return _("Every %(n)s seconds") % {"n": rule.interval_seconds}
        if rule.kind == TriggerRule.Kind.EVENT:
            return _("On events")
        if rule.kind == TriggerRule.Kind.HEARTBEAT:
            return _("Heartbeat: alert when no ping arrives in time")
        return _("Once")

    def preview_view(self, request):
        """JSON for the live preview: 200 with the fires, or 400 naming the bad field."""
        if not request.user.has_perm("tasks.view_triggerrule"):
            return JsonResponse({"ok": False, "errors": {"": _("permission denied")}}, status=403)
        data = {f: request.GET.get(f, "") for f in PREVIEW_FIELDS}
        note = ""
        if data["kind"] == TriggerRule.Kind.ONCE:
            # The run-at as the form will read it: typed on the rule zone's clock (TriggerRuleForm).
            try:
                wall = run_at_field().clean([request.GET.get("run_at_0", ""), request.GET.get("run_at_1", "")])
                if wall is None:
                    raise forms.ValidationError(
                        _("Type the date and time (in the rule's timezone) to see when it runs.")
                    )
                found = read_run_at(
                    wall,
                    timezone=data["timezone"].strip(),
                    dst_gap=data["dst_gap"] or "shift",
                    dst_repeat=data["dst_repeat"] or "first",
                )
            except forms.ValidationError as exc:
                return JsonResponse(
                    {"ok": False, "errors": {"run_at": " ".join(exc.messages)}, "fires": []}, status=400
                )
            except schedule.ScheduleError as exc:
                return JsonResponse({"ok": False, "errors": {exc.field: exc.message}, "fires": []}, status=400)
            data["run_at"] = found.utc
            note = run_at_note(found)
        rule_id = request.GET.get("rule", "")
        saved = TriggerRule.objects.filter(pk=rule_id).first() if rule_id.isascii() and rule_id.isdigit() else None
        result = schedule_preview(data, at=now(), rule=saved)
        if note and result["ok"]:
            result["dst_notes"] = [note, *result["dst_notes"]]
            for fire in result["fires"]:
                fire["note"] = found.note
        return JsonResponse(result, status=200 if result["ok"] else 400)

    def _form_page(
        self, request, rule, form, *, title, submit_label, intro="", plan_lines=None, hidden=(), submit_name="_submit"
    ):
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.opts,
            "object": rule,
            "form": form,
            "submit_label": submit_label,
            "intro": intro,
            "plan_lines": plan_lines or [],
            "hidden": list(hidden),
            "cancel_url": change_url(rule),
            "submit_name": submit_name,
        }
        return TemplateResponse(request, FORM_TEMPLATE, context)

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
                'A trial is a real run flagged as trial, with its business key in the "trial:" namespace: it '
                "never dedupes against or blocks the real run. It works on paused rules too (gray release)."
            )
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
                self.message_user(request, error, messages.ERROR)
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


_ICON = {lint.PASS: "✔", lint.WARN: "⚠", lint.FAIL: "✘"}


def _preview_html(preview: dict) -> str:
    if not preview["ok"]:
        errors = format_html_join("", "<li>{}: {}</li>", preview["errors"].items())
        return format_html('<ul class="errorlist preview-errors">{}</ul>', errors)
    guarded = any("guards" in f for f in preview["fires"])
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td>" + ("<td>{}</td>" if guarded else "") + "</tr>",
        ((f["local"], f["utc"], f["note"], *((f.get("guards", ""),) if guarded else ())) for f in preview["fires"]),
    )
    notes = format_html_join("", "<li>{}</li>", ((n,) for n in preview["dst_notes"]))
    return format_html(
        '<p class="preview-description"><strong>{}</strong></p>'
        '<table class="preview-fires stack"{}><thead><tr><th>{} ({})</th><th>UTC</th><th>DST</th>{}</tr></thead>'
        '<tbody>{}</tbody></table><ul class="preview-dst">{}</ul>',
        preview["description"] or "-",
        mark_safe(' id="guard-preview"') if guarded else "",
        _("Next fires"),
        preview.get("timezone", ""),
        format_html("<th>{}</th>", _("guards")) if guarded else "",
        rows,
        notes,
    )
