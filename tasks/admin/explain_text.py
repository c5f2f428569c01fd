"""Explain, as a sentence in the user's language with links (issue 14, item 8).

tasks.triggers.explain answers with codes and an English summary (for the CLI and logs); the admin
says the same from its codes and details: what happened, a link to the run or the decision, and the
nearest slots on the rule zone's clock."""

from datetime import datetime, timedelta

from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

from harness_site.templatetags.harness import when_html
from runs.models import Decision, SlotHold, TaskRun
from tasks.models import TriggerRule
from tasks.rules import schedule

NEAR = timedelta(days=7)


def _run_link(run_id) -> SafeString:
    return format_html('<a href="{}">{}</a>', reverse("admin:runs_taskrun_change", args=[run_id]), f"#{run_id}")


def explain_sentence(request, rule: TriggerRule, result: dict, slot: datetime | None) -> SafeString:
    """One sentence (HTML, escaped) for a slot_explain or trigger_explain result."""
    zone = rule.timezone
    outcome, reason, details = result.get("outcome"), result.get("reason"), result.get("details") or {}
    what = when_html(request, slot, zone) if slot is not None else format_html("<code>{}</code>", result.get("biz_key"))
    run_id = details.get("run_id") if isinstance(details, dict) else None
    if outcome == "run" and run_id:
        run = TaskRun.objects.filter(pk=run_id).first()
        state = run.get_state_display() if run else reason
        return format_html(_("{what} ran as run {run} ({state})."), what=what, run=_run_link(run_id), state=state)
    if outcome == "coalesced":
        survivor = details.get("carried_by_run_id")
        return format_html(
            _("{what} was coalesced: run {run} was replaced before it started by a newer trigger of its object{tail}."),
            what=what,
            run=_run_link(run_id) if run_id else "—",
            tail=format_html(_("; run {survivor} carries the work"), survivor=_run_link(survivor)) if survivor else "",
        )
    if outcome in ("decision", Decision.Reason.SHED) or (outcome and outcome in Decision.Reason.values):
        decision = (
            Decision.objects.filter(rule=rule, slot=slot).first()
            if slot is not None
            else Decision.objects.filter(rule=rule, slot=None, biz_key=result.get("biz_key")).first()
        )
        label = decision.get_reason_display() if decision else reason
        link = (
            format_html(
                ' <a href="{}">{}</a>', reverse("admin:runs_decision_change", args=[decision.pk]), _("the decision")
            )
            if decision
            else ""
        )
        return format_html(_("{what} did not run: {reason}.{link}"), what=what, reason=label, link=link)
    if outcome == "waiting":
        hold = SlotHold.objects.filter(rule=rule, slot=slot).first()
        return format_html(
            _("{what} is waiting: {reason}; next check {recheck}."),
            what=what,
            reason=hold.get_reason_display() if hold else reason,
            recheck=when_html(request, hold.recheck_at, zone) if hold else "—",
        )
    if outcome == "not_a_slot" and slot is not None:
        before, after = _nearest(rule, slot)
        return format_html(
            _("{what} is not a slot of this rule. Nearest slots: {before} and {after}."),
            what=what,
            before=_slot_link(request, rule, before),
            after=_slot_link(request, rule, after),
        )
    if outcome == "not_due":
        if reason == "paused":
            return format_html(
                _("{what} is not due yet, and the rule is paused: it will not run while paused."), what=what
            )
        return format_html(_("{what} is not due yet."), what=what)
    if reason == "paused":
        return format_html(
            _("{what} did not run: the rule is paused since {since}; resuming does not catch it up."),
            what=what,
            since=when_html(request, rule.paused_at, zone),
        )
    if slot is None:
        return format_html(
            _(
                "No record of {what}: no trigger with this business key reached this rule, or its record is "
                "older than the retention period (a refused event is in the event refusals)."
            ),
            what=what,
        )
    return format_html(
        _(
            "No record of {what}: the slot is before the rule's schedule was last set (created, edited or "
            "resumed), or its decision is older than the retention period."
        ),
        what=what,
    )


def _nearest(rule: TriggerRule, slot: datetime) -> tuple[datetime | None, datetime | None]:
    try:
        spec = rule.schedule_spec()
        earlier = schedule.slots_between(spec, slot - NEAR, slot)
        return (earlier[-1] if earlier else None), schedule.next_slot(spec, slot)
    except (schedule.ScheduleError, ValueError, OverflowError):
        return None, None


def _slot_link(request, rule: TriggerRule, slot: datetime | None) -> SafeString:
    if slot is None:
        return mark_safe("—")
    url = reverse("admin:tasks_triggerrule_explain", args=[rule.pk]) + "?slot=" + slot.isoformat().replace("+", "%2B")
    return format_html('<a href="{}">{}</a>', url, when_html(request, slot, rule.timezone))
