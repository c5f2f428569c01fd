"""Backpressure at intake: above the high watermark of pending runs, recomputable triggers become
"shed" decisions, one-time input and operator runs are kept, coalescing work is coalesced, and
intake resumes at the low watermark. Every intake path: scheduler slots, events, file sensors,
heartbeats; the state is the database's, so every process agrees. Real database."""

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from harness_site.audit.models import AuditEntry
from runs.engine.backpressure import pressure_cache_clear
from runs.engine.claims import Work, run_claim
from runs.models import Backpressure, Decision, TaskRun
from tasks import sentences
from tasks.admin.rule_lint import lint_input
from tasks.models import EventDelivery, Pool, TriggerRule, TriggerSource
from tasks.rules import keys, lint
from tasks.triggers.events import event_intake
from tasks.triggers.explain import slot_explain, trigger_explain
from tasks.triggers.heartbeat import heartbeat_tick
from tasks.triggers.operator import rule_fire
from tasks.triggers.scheduler import TickResult, scheduler_tick
from tests.support.desk import client_for, operator  # noqa: F401 - fixtures
from tests.support.rules import make_rule
from tests.support.slots import due_slots, outcomes
from tests.support.webhooks import EVENT, billing_source, post  # noqa: F401 - billing_source: a fixture

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def watermark(high, low=None, *, pool="global") -> Backpressure:
    pool_row, _ = Pool.objects.get_or_create(name=pool, defaults={"reason": "test"})
    row, _ = Backpressure.objects.update_or_create(
        pool=pool_row, defaults={"high_watermark": high, "low_watermark": low}
    )
    return row


def backlog(n: int, *, rule: TriggerRule | None = None) -> None:
    """n pending runs of a rule that is never shed (what the workers have not taken yet)."""
    for i in range(n):
        work = Work(
            biz_key=keys.scoped(rule.pk, keys.MANUAL_KEY, f"backlog:{i}") if rule else f"backlog:0:{i}",
            skill="harness.noop",
            source="api",
            triggered_by="tests",
            payload={},
            rule=rule,
        )
        run_claim(work, now=T0, dispatch=False)


def event_rule(name: str, recoverability: str, **over) -> TriggerRule:
    rule = make_rule(
        name, kind="event", dedupe_key_template="{rule}:{object_id}:{version}", recoverability=recoverability, **over
    )
    TriggerSource.objects.create(name=f"{name}-in", kind="python", identity="svc:test", rule=rule)
    return rule


def send(rule, version, *, object_id="o-1", at=T0, delivery_id=None):
    payload = {"object_id": object_id, "action": "changed", "version": version}
    return event_intake(source=f"{rule.name}-in", payload=payload, now=at, delivery_id=delivery_id)


def test_a_scheduler_slot_of_a_recomputable_rule_is_shed_above_the_high_watermark_with_a_decision():
    watermark(3, 1)
    backlog(3)
    rule = make_rule("refresh", recoverability="recomputable", due=T0)

    result = scheduler_tick(now=T0 + timedelta(seconds=1))

    decision = Decision.objects.get(rule=rule)
    assert (decision.slot, decision.reason, result.decisions, result.claimed) == (T0, "shed", 1, 0)
    assert decision.details | {"shedding_since": None} == {
        "pool": "global",
        "pending": 3,
        "high_watermark": 3,
        "low_watermark": 1,
        "shedding_since": None,
        "recoverability": "recomputable",
        "source": "scheduler",
        "triggered_by": "scheduler",
        "biz_key": f"rule/{rule.pk}/slot/refresh:{T0.isoformat()}",
    }
    assert Backpressure.objects.get().shedding is True


def test_one_time_input_is_never_shed():
    watermark(3, 1)
    backlog(5)
    rule = make_rule("ledger", due=T0)  # the default class: one-time input

    scheduler_tick(now=T0 + timedelta(seconds=1))

    assert TaskRun.objects.filter(rule=rule).count() == 1 and not Decision.objects.exists()


def test_every_slot_of_a_burst_is_a_run_or_a_shed_decision_and_the_burst_itself_counts():
    """One tick claims many slots in one transaction: its own admissions count at once."""
    watermark(4, 2)
    rule = make_rule("every-second", interval_seconds=1, recoverability="recomputable", catchup="all", due=T0)
    now = T0 + timedelta(seconds=9)
    slots = due_slots(rule, now)

    scheduler_tick(now=now)

    accounted = outcomes(rule)  # fails if a slot has both, or two of one
    assert sorted(accounted) == slots
    assert list(accounted.values()).count("decision:shed") == len(slots) - 4
    assert TaskRun.objects.filter(rule=rule).count() == 4


def test_it_keeps_shedding_inside_the_band_and_resumes_at_the_low_watermark():
    watermark(4, 2)
    backlog(4)
    rule = event_rule("prices", "recomputable")
    assert send(rule, 1).outcome == "shed"

    TaskRun.objects.filter(biz_key__in=["backlog:0:0"]).update(state="succeeded")  # 3 pending: in the band
    pressure_cache_clear()  # another process, or a second later
    assert send(rule, 2).outcome == "shed"

    TaskRun.objects.filter(biz_key="backlog:0:1").update(state="succeeded")  # 2 pending: the low watermark
    pressure_cache_clear()
    admitted = send(rule, 3)
    assert (admitted.status, admitted.outcome) == (202, "accepted")
    assert Backpressure.objects.get().shedding is False


def test_a_shed_event_is_answered_202_with_the_decision_and_a_resend_gets_the_same_answer():
    watermark(1)
    backlog(1)
    rule = event_rule("quotes", "recomputable")

    shed = send(rule, 7, delivery_id="d-1")
    again = send(rule, 7, delivery_id="d-1")  # the sender retrying the same delivery
    other = send(rule, 7, delivery_id="d-2")  # the same business event under another delivery id

    body = shed.as_json()
    decision = Decision.objects.get(rule=rule)
    assert (shed.status, body["outcome"], body["run_id"], body["decision_id"]) == (202, "shed", None, decision.id)
    assert body["backpressure"]["pending"] == 1 and body["backpressure"]["high_watermark"] == 1
    assert "shed by backpressure" in body["detail"]
    assert (again.status, again.outcome, again.as_json()["decision_id"]) == (202, "shed", decision.id)
    assert (other.status, other.outcome) == (202, "shed")
    assert (decision.slot, decision.biz_key, decision.hits) == (None, f"rule/{rule.pk}/event/quotes:o-1:7", 2)
    assert not TaskRun.objects.filter(rule=rule).exists()


def test_a_shed_trigger_whose_run_exists_is_a_dedupe_hit_not_a_decision():
    rule = event_rule("quotes", "recomputable")
    first = send(rule, 1)
    watermark(1)

    again = send(rule, 1)

    assert (again.status, again.outcome, again.run_id) == (200, "duplicate", first.run_id)
    assert not Decision.objects.exists()


def test_coalescing_work_is_coalesced_instead_of_shed():
    watermark(1)
    backlog(3)
    rule = event_rule("order-state", "coalesce", object_key_template="order:{object_id}")

    results = [send(rule, v) for v in (1, 2, 3)]

    assert [r.outcome for r in results] == ["accepted"] * 3
    assert TaskRun.objects.filter(rule=rule, state="pending").count() == 1
    assert Decision.objects.filter(rule=rule, reason="coalesced").count() == 2


def test_an_operator_run_now_is_never_shed():
    watermark(1)
    backlog(2)
    rule = make_rule("refresh", recoverability="recomputable", due=None)

    claim = rule_fire(rule=rule, actor="olga", now=T0)

    assert claim.created and not claim.shed


def test_a_heartbeat_that_fires_above_the_watermark_is_shed_like_a_slot():
    watermark(1)
    backlog(1)
    rule = make_rule("ping-me", kind="heartbeat", heartbeat_every_seconds=60, recoverability="recomputable", due=T0)
    result = TickResult()

    heartbeat_tick(rule, now=T0, result=result)

    assert Decision.objects.get(rule=rule).reason == "shed" and result.decisions == 1


def test_a_pool_sheds_only_the_rules_that_draw_from_it():
    watermark(2, pool="model-provider")
    busy = make_rule("busy", due=None)
    busy.pools.add(Pool.objects.get(name="model-provider"))
    backlog(2, rule=busy)
    inside = event_rule("summaries", "recomputable")
    inside.pools.add(Pool.objects.get(name="model-provider"))
    outside = event_rule("thumbnails", "recomputable")

    assert send(inside, 1).outcome == "shed"
    assert send(outside, 1).outcome == "accepted"
    assert Decision.objects.get(rule=inside).details["pool"] == "model-provider"


def test_a_sheddable_trigger_costs_no_query_more_than_one_time_input_within_a_second():
    """The watermarks and the pending count are read once a second per process, not per trigger."""
    watermark(1000, 10)
    kept, sheddable = event_rule("ledger", "one_time_input"), event_rule("prices", "recomputable")
    send(kept, 0), send(sheddable, 0)  # the first read of the second (and each metric row made)

    queries = {}
    for rule in (kept, sheddable):
        with CaptureQueriesContext(connection) as ctx:
            send(rule, 1, at=T0 + timedelta(milliseconds=500))
        queries[rule.name] = len(ctx.captured_queries)

    assert queries["prices"] == queries["ledger"]


# --- explain and the admin ------------------------------------------------------------------


def test_explain_says_why_a_trigger_was_shed_and_why_one_was_coalesced():
    watermark(1)
    backlog(1)
    shed_rule = event_rule("quotes", "recomputable")
    send(shed_rule, 7)
    merge_rule = event_rule("order-state", "coalesce", object_key_template="order:{object_id}")
    first, second = send(merge_rule, 1), send(merge_rule, 2)

    shed = trigger_explain(rule=shed_rule, biz_key="quotes:o-1:7", now=T0)
    coalesced = trigger_explain(rule=merge_rule, biz_key="order-state:o-1:1", now=T0)
    survivor = trigger_explain(rule=merge_rule, biz_key="order-state:o-1:2", now=T0)

    assert (shed["outcome"], shed["details"]["pending"], shed["details"]["high_watermark"]) == ("shed", 1, 1)
    assert "1 pending runs in global at or above the high watermark 1" in shed["summary"]
    assert coalesced["outcome"] == "coalesced" and f"run {second.run_id}" in coalesced["summary"]
    assert coalesced["details"]["run_id"] == first.run_id
    assert survivor["outcome"] == "run"


def test_explain_of_a_shed_slot_names_the_watermark():
    watermark(1)
    backlog(1)
    rule = make_rule("refresh", recoverability="recomputable", due=T0)
    scheduler_tick(now=T0 + timedelta(seconds=1))

    answer = slot_explain(rule=rule, slot=T0, now=T0 + timedelta(seconds=2))

    assert (answer["outcome"], answer["reason"]) == ("decision", "shed")
    assert "at or above the high watermark 1" in answer["summary"]


def test_an_operator_edits_the_watermarks_in_the_admin_with_an_audit_row_and_intake_follows(operator):  # noqa: F811
    row = watermark(None)
    rule = event_rule("prices", "recomputable")
    backlog(2)
    assert send(rule, 1).outcome == "accepted"
    url = reverse("admin:runs_backpressure_change", args=[row.pk])
    c = client_for(operator)

    bad = c.post(url, {"high_watermark": "5", "low_watermark": "9", "reason": "burst"})
    assert bad.status_code == 200 and "must not be above the high watermark" in bad.content.decode()
    assert Backpressure.objects.get().high_watermark is None  # nothing saved

    ok = c.post(url, {"high_watermark": "3", "low_watermark": "1", "reason": "model provider is slow today"})
    assert ok.status_code == 302
    entry = AuditEntry.objects.get(action="watermark.change")
    assert (entry.actor, entry.reason) == ("olga", "model provider is slow today")
    assert entry.details == {
        "before": {"high_watermark": None, "low_watermark": None},
        "after": {"high_watermark": 3, "low_watermark": 1},
    }
    # Within the cache time of the next second, with no restart: 3 pending now, at the high watermark.
    assert send(rule, 2, at=T0 + timedelta(seconds=2)).outcome == "shed"
    page = c.get(reverse("admin:runs_decision_changelist")).content.decode()
    assert "prices:o-1:2" in page


def test_a_rule_lint_fails_coalescing_without_an_object_key_and_names_the_watermarks():
    watermark(10, 2)
    rule = make_rule("refresh", recoverability="recomputable", due=None)
    items = {i.check: i for i in lint.rule_lint(lint_input(rule, None))}
    assert items[lint.CHECK_BACKPRESSURE].status == lint.PASS
    assert "global at 10" in sentences.lint_message(items[lint.CHECK_BACKPRESSURE])

    TriggerRule.objects.filter(pk=rule.pk).update(recoverability="coalesce")  # around full_clean
    rule.refresh_from_db()
    items = {i.check: i for i in lint.rule_lint(lint_input(rule, None))}
    assert items[lint.CHECK_BACKPRESSURE].status == lint.FAIL


def test_a_webhook_sender_is_answered_202_shed_over_http_not_dropped_silently(client, billing_source):  # noqa: F811
    TriggerRule.objects.filter(pk=billing_source.rule_id).update(recoverability="recomputable")
    watermark(1)
    backlog(1)

    response = post(client, EVENT)

    assert response.status_code == 202
    body = response.json()
    assert (body["outcome"], body["run_id"], body["created"]) == ("shed", None, False)
    assert body["decision_id"] == Decision.objects.get(reason="shed").id
    assert EventDelivery.objects.get().run_id is None  # remembered: a resend gets the same answer
    assert post(client, EVENT).json()["outcome"] == "shed"


def test_the_explain_command_answers_for_a_trigger_by_its_business_key():
    watermark(1)
    backlog(1)
    rule = event_rule("quotes", "recomputable")
    send(rule, 7)
    out = StringIO()

    call_command("harness", "explain", "quotes", "--biz-key", "quotes:o-1:7", stdout=out)

    assert "shed: did not run: Shed by backpressure" in out.getvalue()
    with pytest.raises(CommandError, match="--biz-key"):
        call_command("harness", "explain", "quotes")


def test_the_rule_page_shows_the_class_and_the_coalesce_window(operator):  # noqa: F811
    rule = make_rule("refresh", recoverability="recomputable", due=None)
    page = client_for(operator).get(reverse("admin:tasks_triggerrule_change", args=[rule.pk])).content.decode()
    assert 'name="recoverability"' in page and 'name="coalesce_window_seconds"' in page
    assert "backpressure class fits" in page


def test_the_admin_explain_page_answers_for_a_trigger_by_its_business_key(operator):  # noqa: F811
    rule = event_rule("order-state", "coalesce", object_key_template="order:{object_id}")
    send(rule, 1)
    second = send(rule, 2)
    url = reverse("admin:tasks_triggerrule_explain", args=[rule.pk])

    page = client_for(operator).get(url, {"biz_key": "order-state:o-1:1"})

    body = page.content.decode()
    assert page.status_code == 200 and 'id="explain-outcome"><code>coalesced<' in body
    assert f"/admin/runs/taskrun/{second.run_id}/change/" in body and "order-state:o-1:1" in body
    recent = client_for(operator).get(url).content.decode()
    # the recent decisions link to their trigger
    assert f"?biz_key=rule/{rule.pk}/event/order-state%3Ao-1%3A1" in recent
