"""Re-running chosen slots from everywhere they are found, through the one plan (tasks/triggers/rerun.py):
a rule's slots by instant (API, `harness backfill --slots`), the status board's missed count leading
to the decision list's action for on-call, and a failed slot pointed at its run's replay."""

import html
import io
import re
from datetime import timedelta

import pytest
from django.contrib.admin import helpers
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from harness_site.audit.models import AuditEntry
from runs.models import Decision, TaskRun
from tasks.triggers import rerun
from tasks.triggers.work import rule_render_key
from tests.support.api import api_for, assert_problem
from tests.support.desk import client_for, make_user
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db


def outage():
    """A five-minute rule that missed its last four slots; the third of them ran, and failed."""
    now = timezone.now()
    rule = make_rule("every-5", kind="cron", cron="*/5 * * * *", timezone="Asia/Shanghai")
    last = now.replace(minute=now.minute - now.minute % 5, second=0, microsecond=0)
    slots = [last - timedelta(minutes=5 * i) for i in range(3, -1, -1)]
    for s in slots:
        Decision.objects.create(rule=rule, slot=s, reason=Decision.Reason.MISSED, created_at=now)
    failed = TaskRun.objects.create(
        biz_key=rule_render_key(rule, slots[2]),
        rule=rule,
        rule_name=rule.name,
        skill="harness.noop",
        source="scheduler",
        slot=slots[2],
        trigger_at=slots[2],
        run_after=slots[2],
        state=TaskRun.State.FAILED,
    )
    return rule, slots, failed


def test_a_rules_slots_by_instant_refuse_an_instant_off_the_schedule_and_one_not_due():
    rule, slots, failed = outage()
    now = timezone.now()
    off = slots[0] + timedelta(minutes=1)
    ahead = rule.next_fire_at
    plan = rerun.rule_slots_rerun_plan(rule=rule, slots=[*slots, slots[0], off, ahead], now=now)
    assert [i.slot for i in plan.to_run] == [slots[0], slots[1], slots[3]]  # the repeat counted once
    assert {i.slot: i.reason for i in plan.to_run} == dict.fromkeys(plan_slots(plan), "missed")
    refused = {i.slot: (i.refused, i.run_id, i.run_state) for i in plan.items if i.refused}
    assert refused == {
        slots[2]: (rerun.HAS_RUN, failed.id, TaskRun.State.FAILED),
        off: (rerun.NOT_A_SLOT, None, ""),
        ahead: (rerun.NOT_DUE, None, ""),
    }


def plan_slots(plan):
    return [i.slot for i in plan.to_run]


def test_an_event_rule_has_no_slots_to_rerun():
    with pytest.raises(rerun.RuleActionError):
        rerun.rule_slots_rerun_plan(rule=make_rule("hook", kind="event"), slots=[timezone.now()], now=timezone.now())


def test_the_api_answers_the_plan_on_a_dry_run_then_claims_exactly_it():
    rule, slots, failed = outage()
    oncall = api_for(make_user("olga", "On-call"))
    url = f"/api/v1/rules/{rule.name}/rerun"
    chosen = [s.isoformat() for s in (slots[0], slots[2], slots[3])]
    dry = oncall.post(url, {"slots": chosen})
    assert dry.status_code == 200, dry.content
    body = dry.json()
    assert body["dry_run"] is True and body["to_run"] == 2 and len(body["signature"]) == 2
    (refused,) = [i for i in body["items"] if not i["runs"]]
    assert refused["refused"] == "has_run" and refused["run_state"] == "failed"
    assert refused["run_url"] == f"/api/v1/runs/{failed.id}"
    assert TaskRun.objects.count() == 1  # a dry run creates nothing

    done = oncall.post(url, {"slots": chosen, "dry_run": False, "expect": body["signature"], "spacing_seconds": 0})
    assert done.status_code == 201, done.content
    assert done.json()["created"] == 2
    new = TaskRun.objects.exclude(id=failed.id)
    assert sorted(new.values_list("slot", flat=True)) == [slots[0], slots[3]]  # not slots[1]: not chosen
    assert set(new.values_list("source", flat=True)) == {TaskRun.Source.BACKFILL}
    assert AuditEntry.objects.get(action=AuditEntry.Action.RULE_BACKFILL).actor == "olga"

    # Confirming the same plan again: it changed (both slots have runs now), so 409 and nothing more.
    again = oncall.post(url, {"slots": chosen, "dry_run": False, "expect": body["signature"]})
    assert_problem(again, 409, field="expect", code="plan-changed")
    assert TaskRun.objects.count() == 3


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "slots"),
        ({"slots": []}, "slots"),
        ({"slots": ["yesterday"]}, "slots.0"),
        ({"slots": [5]}, "slots.0"),
        ({"slots": ["2026-12-01T09:00:00Z"], "dry_run": "no"}, "dry_run"),
        ({"slots": ["2026-12-01T09:00:00Z"], "spacing_seconds": 7200}, "spacing_seconds"),
    ],
)
def test_the_api_refuses_bad_input_with_the_field(body, field):
    rule, _slots, _failed = outage()
    api = api_for(make_user("root", superuser=True))
    assert_problem(api.post(f"/api/v1/rules/{rule.name}/rerun", body), 400, field=field)


def test_the_api_refuses_a_viewer_and_an_unknown_rule():
    rule, slots, _failed = outage()
    body = {"slots": [slots[0].isoformat()]}
    assert_problem(api_for(make_user("vera", "Viewers")).post(f"/api/v1/rules/{rule.name}/rerun", body), 403)
    assert_problem(api_for(make_user("root", superuser=True)).post("/api/v1/rules/nope/rerun", body), 404)


def harness(*args: str) -> str:
    out = io.StringIO()
    call_command("harness", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_command_prints_the_plan_and_claims_it_only_with_yes():
    rule, slots, failed = outage()
    chosen = [s.isoformat() for s in (slots[1], slots[2])]
    shown = harness("backfill", rule.name, "--slots", *chosen)
    assert "1 slot(s) would run; nothing created" in shown
    assert f"refused {slots[2].isoformat()}  has_run run {failed.id} (failed)" in shown
    assert TaskRun.objects.count() == 1
    done = harness("backfill", rule.name, "--slots", *chosen, "--yes", "--reason", "beat down", "--by", "omar")
    assert "1 run(s) created" in done
    assert TaskRun.objects.exclude(id=failed.id).get().slot == slots[1]
    assert AuditEntry.objects.get(action=AuditEntry.Action.RULE_BACKFILL).reason == "beat down"


def test_on_call_reaches_the_missed_slots_from_the_status_board_and_re_runs_them():
    rule, slots, failed = outage()
    oncall = client_for(make_user("olga", "On-call"))
    board = oncall.get(reverse("harness-status")).content.decode()
    link = re.search(rf'href="([^"]*rule__id__exact={rule.id}[^"]*)"', board)
    assert link, "the status board links the rule's missed slots"
    listed = oncall.get(html.unescape(link[1]))
    page = listed.content.decode()
    assert "rerun_slots" in page  # on-call has the action
    ids = [str(d.id) for d in listed.context["cl"].result_list]
    assert len(ids) == 4
    plan = oncall.post(
        reverse("admin:runs_decision_changelist"), {"action": "rerun_slots", helpers.ACTION_CHECKBOX_NAME: ids}
    )
    shown = plan.content.decode()
    # The failed slot is not run again: the plan points at its run's replay.
    assert reverse("admin:runs_taskrun_retry", args=[failed.id]) in shown
    assert "its run failed: replay it with Retry now" in shown
    assert TaskRun.objects.count() == 1
    confirm = {
        "action": "rerun_slots",
        helpers.ACTION_CHECKBOX_NAME: ids,
        "post": "yes",
        "confirmed": plan.context["form"]["confirmed"].value(),
        "spacing": "0",
    }
    oncall.post(reverse("admin:runs_decision_changelist"), confirm)
    new = TaskRun.objects.exclude(id=failed.id)
    assert sorted(new.values_list("slot", flat=True)) == [slots[0], slots[1], slots[3]]
