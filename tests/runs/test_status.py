# ruff: noqa: F811  (pytest fixtures imported from tests.support.desk are redefined as arguments)
"""The status board (runs/desk/status.py): every rule one row, worst first, with missed and decided slots,
open tickets, last outcome and a 48-cell strip; the staff landing page at /admin/."""

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from runs.desk import status
from runs.models import Decision, TaskRun
from tasks.models import TriggerRule
from tests.support.desk import client_for, make_failed_run, make_user, oncall, oncall_client  # noqa: F401
from tests.support.rules import build_rule, make_rule

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=30)


# --- health, pure ---------------------------------------------------------------------------------


def health(**over) -> str:
    facts = {
        "enabled": True,
        "next_fire_at": NOW + timedelta(hours=1),
        "last_state": TaskRun.State.SUCCEEDED,
        "open_tickets": 0,
        "missed": 0,
        "now": NOW,
        "grace": GRACE,
    }
    return status.health_of(**{**facts, **over})


def test_it_ranks_a_failure_above_everything_but_a_pause():
    assert health() == status.OK
    assert health(open_tickets=1) == status.FAILING
    assert health(last_state=TaskRun.State.FAILED) == status.FAILING
    assert health(open_tickets=1, missed=3, next_fire_at=NOW - timedelta(hours=1)) == status.FAILING
    assert health(enabled=False, open_tickets=1) == status.PAUSED


def test_it_calls_a_rule_overdue_only_past_the_grace():
    assert health(next_fire_at=NOW - GRACE) == status.OK
    assert health(next_fire_at=NOW - GRACE - timedelta(microseconds=1)) == status.OVERDUE
    assert health(next_fire_at=NOW - timedelta(hours=2), missed=4) == status.OVERDUE


def test_it_says_missed_slots_and_no_outcome_yet():
    assert health(missed=1) == status.MISSED
    assert health(last_state=None) == status.WAITING
    assert health(last_state=TaskRun.State.CANCELLED) == status.OK


# --- the board ------------------------------------------------------------------------------------


def run_of(rule, i: int, state=TaskRun.State.SUCCEEDED, *, at: datetime | None = None) -> TaskRun:
    at = at or NOW - timedelta(minutes=60 - i)
    return TaskRun(
        biz_key=f"rule/{rule.pk}/slot/{rule.name}:{at:%Y-%m-%dT%H:%M:%SZ}",
        rule=rule,
        rule_name=rule.name,
        skill="harness.noop",
        source="scheduler",
        slot=at,
        trigger_at=at,
        run_after=at,
        state=state,
        payload={"params": {}},
    )


def decide(rule, slot: datetime, reason=Decision.Reason.MISSED, *, at: datetime = NOW) -> Decision:
    return Decision.objects.create(rule=rule, slot=slot, reason=reason, created_at=at)


@pytest.mark.django_db
def test_it_lists_every_rule_worst_first_with_missed_and_decided_slots():
    fine = make_rule("fine", due=NOW + timedelta(minutes=5))
    TaskRun.objects.bulk_create([run_of(fine, 1)])
    missing = make_rule("missing", due=NOW + timedelta(minutes=5))
    TaskRun.objects.bulk_create([run_of(missing, 1)])
    decide(missing, NOW - timedelta(minutes=3))
    decide(missing, NOW - timedelta(minutes=2), Decision.Reason.CATCHUP_CAPPED)
    decide(missing, NOW - timedelta(minutes=1), Decision.Reason.OUTSIDE_WINDOW)
    decide(missing, NOW - timedelta(hours=30), at=NOW - timedelta(hours=30))  # older than 24 h: not counted
    failing = make_rule("failing", due=NOW + timedelta(minutes=5))
    make_failed_run(f"rule/{failing.pk}/slot/x", now=NOW - timedelta(minutes=5), rule=failing)
    make_rule("paused", enabled=False)

    b = status.board_build(now=NOW)

    assert [r.name for r in b.rows] == ["failing", "missing", "fine", "paused"]
    rows = {r.name: r for r in b.rows}
    assert rows["failing"].health == status.FAILING and rows["failing"].open_tickets == 1
    assert rows["failing"].last["kind"] == "run" and rows["failing"].last["state"] == TaskRun.State.FAILED
    assert rows["missing"].health == status.MISSED and rows["missing"].missed_24h == 2
    assert rows["missing"].decided_24h == {"missed": 1, "catchup_capped": 1, "outside_window": 1}
    assert rows["missing"].last["kind"] == "decision" and rows["missing"].last["reason"] == "outside_window"
    assert rows["paused"].health == status.PAUSED and rows["paused"].last is None
    assert b.missed_24h == 2 and b.decided_total == 3
    assert b.counts == {"failing": 1, "overdue": 0, "missed": 1, "ok": 1, "waiting": 0, "paused": 1}


@pytest.mark.django_db
def test_it_filters_by_health_and_searches_names():
    for name in ("alpha-report", "beta-report", "gamma-sync"):
        make_rule(name, due=NOW + timedelta(minutes=5))
    make_rule("delta-report", enabled=False)
    assert [r.name for r in status.board_build(now=NOW, q="REPORT").rows] == [
        "alpha-report",
        "beta-report",
        "delta-report",
    ]
    b = status.board_build(now=NOW, health=status.PAUSED)
    assert [r.name for r in b.rows] == ["delta-report"] and b.total == 1
    assert b.counts[status.WAITING] == 3  # the counts are before the filter


@pytest.mark.django_db
def test_a_strip_holds_the_last_48_runs_and_slot_decisions_oldest_first():
    rule, other = make_rule("strip", due=None), make_rule("other", due=None)
    TaskRun.objects.bulk_create([run_of(rule, i, at=NOW - timedelta(minutes=100 - i)) for i in range(60)])
    TaskRun.objects.bulk_create([run_of(other, i) for i in range(3)])
    newest = NOW - timedelta(minutes=30)
    decide(rule, newest)
    TaskRun.objects.filter(rule=rule, slot=NOW - timedelta(minutes=41)).update(state=TaskRun.State.FAILED)

    strip = status.history_strips([rule.pk, other.pk])

    cells = strip[rule.pk]
    assert len(cells) == 48 and all(c["kind"] != "empty" for c in cells)
    assert cells[-1]["kind"] == "decision" and cells[-1]["at"] == newest
    assert cells[-2]["at"] == NOW - timedelta(minutes=41) and cells[-2]["kind"] == "failed"
    assert cells[0]["at"] == NOW - timedelta(minutes=100 - 13)  # 47 newest runs + the decision
    assert [c["at"] for c in cells] == sorted(c["at"] for c in cells)
    assert [c["kind"] for c in strip[other.pk]][:45] == ["empty"] * 45
    assert {c["run_id"] for c in strip[other.pk][45:]} == set(
        TaskRun.objects.filter(rule=other).values_list("id", flat=True)
    )


@pytest.mark.django_db
def test_an_objective_column_appears_only_when_objectives_are_supplied():
    rule = make_rule("fresh", due=NOW + timedelta(minutes=5))
    assert status.board_build(now=NOW).has_objectives is False
    calls = []

    def objectives(ids):
        calls.append(ids)
        return {rule.pk: {"state": "breached", "label": "stale 2 h"}}

    b = status.board_build(now=NOW, objectives=objectives)
    assert b.has_objectives and b.rows[0].objective == {"state": "breached", "label": "stale 2 h"}
    assert calls == [[rule.pk]]  # one call for the rows shown


# --- the page -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_staff_land_on_the_status_page_with_the_dashboard_and_the_app_list_one_click_away(oncall_client):
    rule = make_rule("landing-rule", due=None)
    make_failed_run(f"rule/{rule.pk}/slot/landing", rule=rule)
    page = oncall_client.get("/admin/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="status-table"' in html and f'id="status-rule-{rule.pk}"' in html
    assert 'data-health="failing"' in html
    assert reverse("harness-dashboard") in html and reverse("harness-apps") in html
    apps = oncall_client.get(reverse("harness-apps"))
    assert apps.status_code == 200 and b'id="desk-links"' in apps.content


@pytest.mark.django_db
def test_staff_who_may_not_read_rules_land_on_the_app_list():
    page = client_for(make_user("nobody")).get("/admin/")
    assert page.status_code == 200 and b"status-table" not in page.content


@pytest.mark.django_db
def test_the_status_page_refuses_nothing_for_odd_input(oncall_client):
    make_rule("odd", due=None)
    for params in ({"page": "x"}, {"page": "-4"}, {"health": "nonsense"}, {"q": "\x00" * 3}, {"page": "99999"}):
        assert oncall_client.get("/admin/", params).status_code == 200, params


@pytest.mark.django_db
@pytest.mark.backend
def test_the_status_page_is_a_fixed_number_of_queries_for_a_thousand_rules(
    oncall_client, django_assert_max_num_queries
):
    rules = TriggerRule.objects.bulk_create(
        [build_rule(f"bulk-{i:04d}", next_fire_at=NOW + timedelta(minutes=i)) for i in range(1000)]
    )
    TaskRun.objects.bulk_create([run_of(rule, i, at=NOW - timedelta(minutes=i)) for rule in rules for i in range(2)])
    Decision.objects.bulk_create(
        [
            Decision(rule=rule, slot=NOW - timedelta(hours=1), reason=Decision.Reason.MISSED, created_at=NOW)
            for rule in rules[::3]
        ]
    )
    oncall_client.get("/admin/")  # warm: session, permissions, content types
    # The board's 6 queries, the objectives' 2, the spread rules' next starts and the calendar
    # rules' next runs, the harness's own health (the header's line: scheduler, workers, channels,
    # calendars and their notices, the schema's and the workers' migrations), the session and user,
    # and the permissions: fixed, whatever the rules.
    with django_assert_max_num_queries(24):
        page = oncall_client.get("/admin/")
    assert page.status_code == 200
    assert page.content.count(b'class="history-strip"') == status.PAGE_ROWS
    assert b"bulk-0999" not in page.content or b"bulk-0000" in page.content


# --- keys for people in the admin ------------------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_finds_a_run_and_a_ticket_by_the_raw_key_and_shows_it_unescaped(oncall_client):
    rule = make_rule("keys", due=None)
    run = make_failed_run(f"rule/{rule.pk}/trial-key/订单%3A7", rule=rule)
    other = make_failed_run(f"rule/{rule.pk}/trial-key/订单%3A8", rule=rule)
    runs = oncall_client.get(reverse("admin:runs_taskrun_changelist"), {"q": "订单:7"}).content.decode()
    assert f"/taskrun/{run.pk}/change/" in runs and f"/taskrun/{other.pk}/change/" not in runs
    tickets = oncall_client.get(reverse("admin:deadletters_deadletter_changelist"), {"q": "订单:7"}).content.decode()
    assert ">订单:7</code>" in tickets and "订单:8" not in tickets
    page = oncall_client.get(reverse("admin:runs_taskrun_change", args=[run.pk])).content.decode()
    title = page.split("<title>")[1].split("</title>")[0]
    assert "订单:7" in title and "%3A" not in title


@pytest.mark.django_db
def test_the_rules_list_shows_last_outcome_and_open_tickets_and_the_rule_page_says_failed(oncall_client):
    rule = make_rule("long-keys", due=None)
    run = make_failed_run(f"rule/{rule.pk}/slot/long-keys:" + "x" * 120, rule=rule)
    make_rule("quiet", due=None)
    page = oncall_client.get(reverse("admin:tasks_triggerrule_changelist")).content.decode()
    row = page.split(f"/triggerrule/{rule.pk}/change/")[1].split("</tr>")[0]
    assert 'class="badge s-failed">Failed</span>' in row
    assert "state__exact=pending_manual&amp;rule_name__exact=long-keys" in row and ">1</a>" in row
    rule_page = oncall_client.get(reverse("admin:tasks_triggerrule_change", args=[rule.pk])).content.decode()
    outcome = rule_page.split('id="rule-last-outcome"')[1][:200]
    assert f"/taskrun/{run.pk}/change/" in rule_page and ">Failed</span>" in outcome
