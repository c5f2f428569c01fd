"""Invariant 1, keys part: a biz_key is scoped to its rule and trigger kind by construction, and its
values are escaped, so no two rules, trigger kinds or distinct inputs meet on one key. Every case
goes through the real claim path (runs.engine.claims.run_claim and the run_unique_biz_key constraint)."""

import importlib
from datetime import UTC, datetime, timedelta

import pytest
from django.apps import apps as django_apps
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.urls import reverse

from runs.engine.claims import Work, run_claim
from runs.engine.operations import run_retry_now
from runs.models import TaskRun
from tasks.models import TriggerRule, TriggerSource
from tasks.rules import keys
from tasks.triggers.events import event_intake
from tasks.triggers.operator import rule_backfill, rule_backfill_plan, rule_run_now
from tasks.triggers.work import work_for_slot
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
SLOT = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)  # 09:00 in Asia/Shanghai


def scheduled(name="nightly", template="{rule}:{slot}", **over) -> TriggerRule:
    """09:00 Shanghai every day, saved two days before NOW."""
    fields = {"kind": "cron", "cron": "0 9 * * *", "timezone": "Asia/Shanghai", "dedupe_key_template": template}
    return make_rule(name, now=NOW - timedelta(days=2), **{**fields, **over})


def event_rule(name="orders-in", template="{object_id}:{action}:{version}", **over) -> TriggerRule:
    """An event rule with a source of its own, <name>-src."""
    rule = make_rule(name, kind="event", dedupe_key_template=template, **over)
    TriggerSource.objects.create(name=f"{name}-src", kind="python", identity="svc:x", rule=rule)
    return rule


def send(rule: TriggerRule, delivery_id=None, **payload):
    body = {"object_id": "o-1", "action": "created", "version": "1", **payload}
    return event_intake(source=f"{rule.name}-src", payload=body, now=NOW, delivery_id=delivery_id)


def test_a_sender_cannot_take_a_scheduled_rules_key():
    nightly = scheduled()
    slot_run = run_claim(work_for_slot(nightly, SLOT, source=TaskRun.Source.SCHEDULER), now=NOW).run
    hook = event_rule(template="{object_id}")

    # The sender names the nightly rule's rendered slot key as its object id.
    result = send(hook, object_id="nightly:2026-12-01T09:00:00+08:00")

    assert result.created, result
    assert TaskRun.objects.get(id=result.run_id).rule_id == hook.id
    assert TaskRun.objects.get(id=slot_run.id).dedupe_hits == 0


def test_two_rules_with_the_same_template_never_share_a_key():
    one = scheduled("report-a", template="report:{business_date}")
    two = scheduled("report-b", template="report:{business_date}")

    a = run_claim(work_for_slot(one, SLOT, source=TaskRun.Source.SCHEDULER), now=NOW)
    b = run_claim(work_for_slot(two, SLOT, source=TaskRun.Source.SCHEDULER), now=NOW)

    assert a.created and b.created
    assert a.run.id != b.run.id


def test_run_now_with_a_named_key_cannot_take_another_rules_run():
    nightly = scheduled()
    other = scheduled("other")
    slot_run = run_claim(work_for_slot(nightly, SLOT, source=TaskRun.Source.SCHEDULER), now=NOW).run

    claim = rule_run_now(rule=other, actor="alice", now=NOW, biz_key=slot_run.biz_key)

    assert claim.created
    assert claim.run.rule_id == other.id
    assert TaskRun.objects.get(id=slot_run.id).dedupe_hits == 0


def test_run_now_and_trial_have_their_own_namespaces_and_a_double_click_is_one_run():
    rule = scheduled()
    slot_run = run_claim(work_for_slot(rule, SLOT, source=TaskRun.Source.SCHEDULER), now=NOW).run

    manual = rule_run_now(rule=rule, actor="alice", now=NOW, slot=SLOT)
    again = rule_run_now(rule=rule, actor="alice", now=NOW, slot=SLOT)
    trial = rule_run_now(rule=rule, actor="alice", now=NOW, slot=SLOT, trial=True)
    named = rule_run_now(rule=rule, actor="alice", now=NOW, biz_key=manual.run.biz_key)

    assert manual.created and trial.created and named.created
    assert (again.created, again.run.id) == (False, manual.run.id)
    assert len({slot_run.id, manual.run.id, trial.run.id, named.run.id}) == 4
    assert slot_run.biz_key.startswith(keys.namespace(rule.id, keys.SLOT))
    assert manual.run.biz_key.startswith(keys.namespace(rule.id, keys.MANUAL))
    assert trial.run.biz_key.startswith(keys.namespace(rule.id, keys.TRIAL))
    assert named.run.biz_key.startswith(keys.namespace(rule.id, keys.MANUAL_KEY))


def test_a_backfill_of_a_slot_that_ran_is_a_dedupe_hit():
    rule = scheduled()
    slot_run = run_claim(work_for_slot(rule, SLOT, source=TaskRun.Source.SCHEDULER), now=NOW).run
    user = User.objects.create_superuser("root", "r@example.com", "pw")
    plan = rule_backfill_plan(rule=rule, start=SLOT.date(), end=SLOT.date(), now=NOW)

    assert plan.existing == 1
    rule_backfill(plan=plan, actor=user, now=NOW, reason="test")
    assert TaskRun.objects.filter(rule=rule).count() == 1
    assert TaskRun.objects.get(id=slot_run.id).dedupe_hits == 1


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"object_id": "a:b", "action": "c"}, {"object_id": "a", "action": "b:c"}),
        ({"object_id": "a%3Ab"}, {"object_id": "a:b"}),
        ({"object_id": "a/b"}, {"object_id": "a%2Fb"}),
        ({"object_id": "x y"}, {"object_id": "x+y"}),
    ],
)
def test_distinct_events_never_render_the_same_key(first, second):
    rule = event_rule()

    one = send(rule, **first)
    two = send(rule, **second)

    assert one.created and two.created, (one, two)
    assert one.run_id != two.run_id


def test_replay_reuses_the_original_key():
    rule = scheduled()
    run = run_claim(work_for_slot(rule, SLOT, source=TaskRun.Source.SCHEDULER), now=NOW).run
    TaskRun.objects.filter(id=run.id).update(state=TaskRun.State.FAILED)

    assert run_retry_now(run_id=run.id, actor="alice", now=NOW, reason="test")
    again = run_claim(work_for_slot(rule, SLOT, source=TaskRun.Source.SCHEDULER), now=NOW)

    assert TaskRun.objects.get(id=run.id).biz_key == run.biz_key
    assert (again.created, again.run.id) == (False, run.id)


def test_a_work_for_a_rule_outside_its_namespace_is_refused():
    rule = scheduled()
    with pytest.raises(ValueError, match="namespace"):
        run_claim(
            Work(biz_key="nightly:x", skill="harness.noop", source="api", triggered_by="t", payload={}, rule=rule),
            now=NOW,
        )
    with pytest.raises(ValueError, match="namespace"):
        run_claim(
            Work(
                biz_key=keys.namespace(rule.id, keys.SLOT) + "x",
                skill="harness.noop",
                source="api",
                triggered_by="t",
                payload={},
            ),
            now=NOW,
        )


# --- time-derived placeholders in event keys ----------------------------------------------------


def test_an_event_key_with_business_date_is_refused_without_the_rule_option():
    with pytest.raises(ValidationError) as info:
        event_rule(template="{object_id}:{business_date}")
    assert "event_key_by_date" in str(info.value) or "business date" in str(info.value).lower()


def test_an_event_key_with_business_date_is_allowed_when_the_rule_says_so():
    rule = event_rule(template="{object_id}:{business_date}", event_key_by_date=True)
    assert send(rule).created


def test_the_same_event_across_midnight_is_one_run():
    rule = event_rule()
    first = event_intake(source=f"{rule.name}-src", payload={"object_id": "o", "action": "a", "version": "1"}, now=NOW)
    later = event_intake(
        source=f"{rule.name}-src",
        payload={"object_id": "o", "action": "a", "version": "1"},
        now=NOW + timedelta(days=1),
        delivery_id="again-1",
    )
    assert (later.created, later.run_id) == (False, first.run_id)


# --- runs stored before the namespaces ---------------------------------------------------------


def _old_run(rule, biz_key, source, **over) -> TaskRun:
    return TaskRun.objects.create(
        biz_key=biz_key,
        rule=rule,
        rule_name=rule.name,
        skill="harness.noop",
        source=source,
        payload={},
        trigger_at=NOW,
        run_after=NOW,
        **over,
    )


def test_the_upgrade_keeps_old_runs_deduping_their_slots_and_events():
    upgrade = importlib.import_module("runs.migrations.0003_scoped_biz_keys")
    nightly = scheduled()
    hook = event_rule()
    slot_run = _old_run(nightly, "nightly:2026-12-01T09:00:00+08:00", TaskRun.Source.SCHEDULER)
    manual = _old_run(nightly, "nightly:2026-12-02T09:00:00+08:00", TaskRun.Source.MANUAL)
    trial = _old_run(nightly, "trial:nightly:2026-12-01T09:00:00+08:00", TaskRun.Source.MANUAL, is_trial=True)
    event = _old_run(hook, "o-1:created:1", TaskRun.Source.EVENT)
    no_rule = TaskRun.objects.create(
        biz_key="api:1", skill="harness.noop", source="api", payload={}, trigger_at=NOW, run_after=NOW
    )

    upgrade.forwards(django_apps, None)
    upgrade.forwards(django_apps, None)  # twice is once

    again = run_claim(work_for_slot(nightly, SLOT, source=TaskRun.Source.SCHEDULER), now=NOW)
    next_day = run_claim(work_for_slot(nightly, SLOT + timedelta(days=1), source=TaskRun.Source.SCHEDULER), now=NOW)
    resent = send(hook, delivery_id="after-upgrade")
    assert (again.created, again.run.id) == (False, slot_run.id)
    assert (next_day.created, next_day.run.id) == (False, manual.id)
    assert (resent.created, resent.run_id) == (False, event.id)
    trial.refresh_from_db()
    no_rule.refresh_from_db()
    assert trial.biz_key == keys.namespace(nightly.id, keys.TRIAL) + "nightly:2026-12-01T09:00:00+08:00"
    assert no_rule.biz_key == "api:1"

    upgrade.backwards(django_apps, None)
    trial.refresh_from_db()
    assert trial.biz_key == "trial:nightly:2026-12-01T09:00:00+08:00"
    assert TaskRun.objects.get(id=slot_run.id).biz_key == "nightly:2026-12-01T09:00:00+08:00"


def test_the_rule_page_shows_the_keys_it_would_claim(admin_client):
    rule = scheduled()
    hook = event_rule()
    page = admin_client.get(reverse("admin:tasks_triggerrule_change", args=[rule.pk])).content.decode()
    assert f"rule/{rule.pk}/slot/nightly:" in page and f"rule/{rule.pk}/manual/nightly:" in page
    assert f"rule/{rule.pk}/trial/nightly:" in page
    page = admin_client.get(reverse("admin:tasks_triggerrule_change", args=[hook.pk])).content.decode()
    assert f"rule/{hook.pk}/event/order%3A7:shipped:2" in page
