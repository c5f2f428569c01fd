"""The rule page's schedule preview: live as the operator types (a JSON view the page polls) and
on the saved rule's page. The fires, DST notes and guards come from the one preview
(tasks/rules/preview.py), worded by the catalogue (tasks/sentences.py)."""

import dataclasses
from datetime import datetime

from django import forms
from django.http import JsonResponse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _

from harness_site.desk import now
from tasks import sentences
from tasks.admin.rule_forms import read_run_at, run_at_field, run_at_note
from tasks.models import BusinessCalendar, TriggerRule
from tasks.rules import business_days, evaluation, preview, schedule
from tasks.rules.guards import rule_guards

PREVIEW_COUNT = 10
PREVIEW_FIELDS = ("kind", "cron", "interval_seconds", "timezone", "dst_gap", "dst_repeat")
SAVED = object()  # the calendar argument's default: the saved rule's own calendar


def schedule_preview(
    data: dict,
    *,
    at: datetime,
    count: int = PREVIEW_COUNT,
    rule: TriggerRule | None = None,
    calendar: object = SAVED,
    start: str = "",
) -> dict:
    """The preview for a (possibly unsaved) schedule: {"ok", "errors", "description", "fires", "dst_notes"}.

    `data` holds the form's raw strings; every problem is reported per field, never raised. With the
    saved `rule`, each fire also says what its windows, calendar and pause do to it ("guards"): one
    next-fires table on the rule page, live as the operator types. `calendar` is the business
    calendar chosen in the form (None: none), in place of the saved rule's; with one, an unsaved
    rule's fires say what it does to them too. `start` (YYYY-MM-DD) starts the preview on that day
    of the rule's zone rather than at `at` (now).
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
    saved = rule if rule is not None and rule.pk is not None else None
    guards, guards_error = None, ""
    if saved is not None:
        try:
            guards = rule_guards(saved)
        except (ValueError, TypeError, KeyError) as exc:  # a rule saved around full_clean must not 500 the page
            guards_error = _("cannot evaluate the guards: %(error)s") % {"error": exc}
    if calendar is not SAVED and not guards_error:
        # The calendar as the form has it now: the fires read the same as the saved rule's will.
        chosen = calendar if isinstance(calendar, business_days.BusinessCalendar) else None
        if guards is not None:
            guards = dataclasses.replace(guards, calendar=chosen, timezone=spec.timezone or guards.timezone)
        elif chosen is not None:
            guards = evaluation.Guards(timezone=spec.timezone, calendar=chosen)
    shows_guards = saved is not None or guards is not None
    now_at = at
    if start:
        try:
            at = preview.preview_start(start, timezone=spec.timezone)
        except preview.StartError as exc:
            return {"ok": False, "errors": {"from": sentences.say(exc.reason)}, "fires": []}
        except schedule.ScheduleError as exc:
            return {"ok": False, "errors": {exc.field: sentences.schedule_error(exc)}, "fires": []}
    try:
        if spec.kind in (preview.HEARTBEAT, preview.EVENT):
            # No schedule of their own: a saved heartbeat rule's one fire is its deadline.
            if saved is not None and saved.kind == spec.kind and guards is not None:
                found = preview.rule_preview(saved, at=at, count=count, now=now_at)
            else:
                found = preview.unscheduled(spec.kind)
        else:
            spread_of = (saved.name, saved.start_spread()) if saved is not None and saved.kind == spec.kind else None
            found = preview.schedule_preview(
                spec,
                at=at,
                count=count,
                guards=guards,
                paused=saved is not None and not saved.enabled,
                spread_of=spread_of,
                now=now_at,
            )
    except schedule.ScheduleError as exc:
        return {"ok": False, "errors": {exc.field: sentences.schedule_error(exc)}, "fires": []}
    except (OverflowError, ValueError, TypeError) as exc:
        # e.g. an interval so long the next slot is past year 9999: the form says why; the preview
        # must not turn that into an error page.
        field = "interval_seconds" if spec.kind == "interval" else "kind"
        return {"ok": False, "errors": {field: _("no preview: %(error)s") % {"error": exc}}, "fires": []}
    fires = [
        {
            "local": sentences.local_text(f.local),
            "utc": sentences.utc_text(f.utc),
            "note": sentences.say(f.note),
            **({"guards": guards_error or sentences.say(f.guards)} if shows_guards else {}),
            **({"start": sentences.say(f.start)} if f.start else {}),
        }
        for f in found.fires
    ]
    return {
        "ok": True,
        "errors": {},
        "description": sentences.schedule_description(spec, found),
        "timezone": spec.timezone,
        "fires": fires,
        "dst_notes": [sentences.say(n) for n in found.dst_changes],
    }


def rule_preview_data(rule: TriggerRule) -> dict:
    data = {f: getattr(rule, f) for f in PREVIEW_FIELDS}
    data["run_at"] = rule.run_at
    return schedule_preview(data, at=now(), rule=rule)


def preview_view(request):
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
                raise forms.ValidationError(_("Type the date and time (in the rule's timezone) to see when it runs."))
            found = read_run_at(
                wall,
                timezone=data["timezone"].strip(),
                dst_gap=data["dst_gap"] or "shift",
                dst_repeat=data["dst_repeat"] or "first",
            )
        except forms.ValidationError as exc:
            return JsonResponse({"ok": False, "errors": {"run_at": " ".join(exc.messages)}, "fires": []}, status=400)
        except schedule.ScheduleError as exc:
            return JsonResponse(
                {"ok": False, "errors": {exc.field: sentences.schedule_error(exc)}, "fires": []}, status=400
            )
        data["run_at"] = found.utc
        note = run_at_note(found)
    rule_id = request.GET.get("rule", "")
    saved = TriggerRule.objects.filter(pk=rule_id).first() if rule_id.isascii() and rule_id.isdigit() else None
    calendar: object = SAVED
    if "business_calendar" in request.GET:  # the form's choice, "" for none
        try:
            calendar = form_calendar(request.GET["business_calendar"])
        except BusinessCalendar.DoesNotExist:
            error = _("no such business calendar; reload the page")
            return JsonResponse({"ok": False, "errors": {"business_calendar": error}, "fires": []}, status=400)
    result = schedule_preview(data, at=now(), rule=saved, calendar=calendar, start=request.GET.get("from", ""))
    if note and result["ok"]:
        result["dst_notes"] = [note, *result["dst_notes"]]
        for fire in result["fires"]:
            fire["note"] = sentences.say(found.note)
    return JsonResponse(result, status=200 if result["ok"] else 400)


def form_calendar(value: str) -> business_days.BusinessCalendar | None:
    """The business calendar the rule form has chosen (its id; "" for none), as pure data: two
    queries, then the preview's ten fires are looked up in memory."""
    value = value.strip()
    if not value:
        return None
    if not (value.isascii() and value.isdigit()):
        raise BusinessCalendar.DoesNotExist(value)
    return BusinessCalendar.objects.get(pk=int(value)).business_days()


def preview_html(found: dict) -> str:
    if not found["ok"]:
        errors = format_html_join("", "<li>{}: {}</li>", found["errors"].items())
        return format_html('<ul class="errorlist preview-errors">{}</ul>', errors)
    guarded = any("guards" in f for f in found["fires"])
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td>" + ("<td>{}</td>" if guarded else "") + "</tr>",
        ((f["local"], f["utc"], f["note"], *((f.get("guards", ""),) if guarded else ())) for f in found["fires"]),
    )
    notes = format_html_join("", "<li>{}</li>", ((n,) for n in found["dst_notes"]))
    return format_html(
        '<p class="preview-description"><strong>{}</strong></p>'
        '<table class="preview-fires stack"{}><thead><tr><th>{} ({})</th><th>UTC</th><th>DST</th>{}</tr></thead>'
        '<tbody>{}</tbody></table><ul class="preview-dst">{}</ul>',
        found["description"] or "-",
        mark_safe(' id="guard-preview"') if guarded else "",
        _("Next fires"),
        found.get("timezone", ""),
        format_html("<th>{}</th>", _("guards")) if guarded else "",
        rows,
        notes,
    )
