"""Re-running chosen slots from the decision list: the plan first, then exactly those slots, each
once, with the keys, pacing and audit of a backfill; a slot that has a run is refused with its link."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin import helpers
from django.urls import reverse

from harness_site.audit.models import AuditEntry
from runs.models import Decision, TaskRun
from tasks.triggers import rerun
from tasks.triggers.work import rule_render_key
from tests.support.desk import client_for, make_user
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)
SPACING = timedelta(seconds=10)


def outage():
    """A five-minute rule that missed four slots; the third of them has since run."""
    rule = make_rule("every-5", kind="cron", cron="*/5 * * * *", timezone="Asia/Shanghai")
    slots = [NOW - timedelta(minutes=5 * i) for i in range(4, 0, -1)]
    decisions = [
        Decision.objects.create(rule=rule, slot=s, reason=Decision.Reason.MISSED, created_at=NOW) for s in slots
    ]
    ran = TaskRun.objects.create(
        biz_key=rule_render_key(rule, slots[2]),
        rule=rule,
        rule_name=rule.name,
        skill="harness.noop",
        source="scheduler",
        slot=slots[2],
        trigger_at=slots[2],
        run_after=slots[2],
        state="succeeded",
    )
    return rule, slots, decisions, ran


def test_the_plan_names_each_slots_key_and_refuses_a_slot_that_has_a_run_with_it():
    rule, slots, decisions, ran = outage()
    plan = rerun.slots_rerun_plan(decision_ids=[d.id for d in decisions], now=NOW, spacing=SPACING)
    assert [i.slot for i in plan.to_run] == [slots[0], slots[1], slots[3]]
    assert plan.signature == [rule_render_key(rule, s) for s in (slots[0], slots[1], slots[3])]
    (refused,) = [i for i in plan.items if i.refused]
    assert (refused.refused, refused.run_id, refused.slot) == (rerun.HAS_RUN, ran.id, slots[2])
    assert TaskRun.objects.count() == 1  # a plan creates nothing


def test_it_runs_exactly_the_chosen_slots_once_paced_and_audited():
    _rule, slots, decisions, ran = outage()
    chosen = [decisions[0].id, decisions[3].id]  # not decisions[1]: it must not run
    plan = rerun.slots_rerun_plan(decision_ids=chosen, now=NOW, spacing=SPACING)
    done = rerun.slots_rerun(
        decision_ids=chosen, confirmed=plan.signature, spacing=SPACING, actor="omar", now=NOW, reason="outage"
    )
    assert (done["created"], done["dedupe_hits"]) == (2, 0)
    new = TaskRun.objects.exclude(id=ran.id).order_by("slot")
    assert [(r.slot, r.source, r.run_after) for r in new] == [
        (slots[0], TaskRun.Source.BACKFILL, NOW),
        (slots[3], TaskRun.Source.BACKFILL, NOW + SPACING),
    ]
    assert [r.biz_key for r in new] == plan.signature
    entry = AuditEntry.objects.get(action=AuditEntry.Action.RULE_BACKFILL)
    assert entry.details["chosen_slots"] == [slots[0].isoformat(), slots[3].isoformat()]
    assert entry.reason == "outage"
    # Confirming the same plan again: every slot has a run now, so the plan changed; nothing is created.
    with pytest.raises(rerun.RerunStale):
        rerun.slots_rerun(decision_ids=chosen, confirmed=plan.signature, spacing=SPACING, actor="omar", now=NOW)
    assert TaskRun.objects.count() == 3


def test_a_trigger_decision_is_not_a_slot_and_is_refused():
    rule = make_rule("hook", kind="event")
    shed = Decision.objects.create(rule=rule, biz_key="x", reason=Decision.Reason.SHED, created_at=NOW)
    plan = rerun.slots_rerun_plan(decision_ids=[shed.id], now=NOW)
    assert [i.refused for i in plan.items] == [rerun.NO_SLOT] and plan.to_run == []


def test_the_decision_list_shows_the_plan_first_then_runs_it_on_yes():
    _rule, slots, decisions, ran = outage()
    oncall = client_for(make_user("olga", "Operators"))
    url = reverse("admin:runs_decision_changelist")
    ids = [str(d.id) for d in decisions]
    page = oncall.post(url, {"action": "rerun_slots", helpers.ACTION_CHECKBOX_NAME: ids})
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="rerun-table"' in html and html.count('data-refused=""') == 3
    assert reverse("admin:runs_taskrun_change", args=[ran.id]) in html  # the refused slot's run
    assert TaskRun.objects.count() == 1
    confirmed = page.context["form"]["confirmed"].value()
    assert len(json.loads(confirmed)) == 3
    done = oncall.post(
        url,
        {
            "action": "rerun_slots",
            helpers.ACTION_CHECKBOX_NAME: ids,
            "post": "yes",
            "confirmed": confirmed,
            "spacing": "0",
            "reason": "beat was down",
        },
        follow=True,
    )
    assert "Re-ran 3 slot(s)" in done.content.decode()
    assert sorted(TaskRun.objects.exclude(id=ran.id).values_list("slot", flat=True)) == [slots[0], slots[1], slots[3]]


def test_a_viewer_has_no_rerun_action():
    outage()
    viewer = client_for(make_user("vera", "Viewers"))
    page = viewer.get(reverse("admin:runs_decision_changelist")).content.decode()
    assert "rerun_slots" not in page
