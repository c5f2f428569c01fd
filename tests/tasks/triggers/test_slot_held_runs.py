# ruff: noqa: RUF001  (Chinese text uses full-width punctuation)
"""Runs the scheduler holds for approval say why, on the run page and in explain: a catch-up burst
above the rule's threshold, a day the calendar has no notice for (hold policy), or both; the run
list's "Approve selected held runs" releases either. Through the real tick and the admin."""

from datetime import UTC, date, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import translation

from runs.models import TaskRun
from tasks.models import BusinessCalendar, TriggerRule
from tasks.rules import explain as words
from tasks.sentences import say, say_all
from tasks.triggers.explain import slot_explanation
from tasks.triggers.scheduler import scheduler_tick
from tests.support.rules import make_rule
from tests.support.zh_complete import assert_zh_complete

# Thursday 2027-02-04 09:00 Asia/Shanghai: before 除夕 2027, a day a notice may bridge (no 2027 data).
BRIDGE = datetime(2027, 2, 4, 1, 0, tzinfo=UTC)
UNCERTAIN = {"date": "2027-02-04", "calendar": "cn-mainland", "day": "uncertain", "hold": True}


# --- pure: which gates, and what they say -----------------------------------------------------


@pytest.mark.parametrize(
    ("approval", "calendar", "gates"),
    [
        (False, None, []),
        (True, None, [words.GATE_CATCHUP]),
        (False, UNCERTAIN, [words.GATE_UNCERTAIN_DAY]),
        (True, UNCERTAIN, [words.GATE_CATCHUP, words.GATE_UNCERTAIN_DAY]),
        (False, {**UNCERTAIN, "hold": False}, []),  # the run policy: an uncertain day that runs
        (False, {"date": "2027-01-04", "no_data": True}, []),  # no data, an ordinary weekday: runs
    ],
)
def test_a_slot_is_held_by_each_gate_that_applies(approval, calendar, gates):
    assert words.held_gates(approval=approval, calendar=calendar) == gates


@pytest.mark.parametrize(
    ("source", "attempts", "payload", "codes"),
    [
        ("catchup", 0, {"held": [words.GATE_CATCHUP]}, [words.HELD_CATCHUP]),
        ("scheduler", 0, {"held": [words.GATE_UNCERTAIN_DAY], "calendar": UNCERTAIN}, [words.HELD_UNCERTAIN_DAY]),
        (
            "catchup",
            0,
            {"held": [words.GATE_CATCHUP, words.GATE_UNCERTAIN_DAY], "calendar": UNCERTAIN},
            [words.HELD_CATCHUP, words.HELD_UNCERTAIN_DAY],
        ),
        # Claimed by the previous release (no "held"): read from the calendar note, else the source.
        ("scheduler", 0, {"calendar": UNCERTAIN}, [words.HELD_UNCERTAIN_DAY]),
        ("catchup", 0, {}, [words.HELD_CATCHUP]),
        ("catchup", 0, {"calendar": UNCERTAIN}, [words.HELD_UNCERTAIN_DAY]),
        # A skill's proposed action, whatever the payload says.
        ("manual", 2, {}, [words.HELD_ACTION]),
        ("catchup", 1, {"held": [words.GATE_CATCHUP]}, [words.HELD_ACTION]),
        ("manual", 0, {}, []),
    ],
)
def test_a_held_run_says_which_gate_holds_it(source, attempts, payload, codes):
    assert [r.code for r in words.held_for(source=source, attempts=attempts, payload=payload)] == codes


@pytest.mark.parametrize("code", [words.HELD_CATCHUP, words.HELD_UNCERTAIN_DAY, words.HELD_ACTION])
def test_each_gate_is_worded_in_chinese(code):
    reason = (
        words.Reason.of(code, date="2027-02-04", calendar="cn-mainland")
        if code == words.HELD_UNCERTAIN_DAY
        else (words.Reason.of(code))
    )
    with translation.override("zh-hans"):
        text = say(words.Reason.of(words.AWAITING_APPROVAL_FOR, run=words.RunRef(7), why=reason))
    assert_zh_complete(text, allowed={"cn-mainland"}, where=code)


# --- through the tick, the run page, explain and the action ----------------------------------


@pytest.fixture
def operator(client, db):
    user = get_user_model().objects.create_superuser("op", "op@example.com", "pw-op-123456")
    client.force_login(user)
    return user


def china_rule(**over) -> TriggerRule:
    calendar = BusinessCalendar.objects.create(name="cn-mainland", country="CN")
    fields = {
        "kind": "cron",
        "cron": "0 9 * * *",
        "timezone": "Asia/Shanghai",
        "business_calendar": calendar,
        "dedupe_key_template": "{rule}:{business_date}",
        **over,
    }
    return make_rule("cn-daily-report", due=BRIDGE, now=BRIDGE, **fields)


def run_page(client, run: TaskRun, lang: str = "en") -> str:
    page = client.get(reverse("admin:runs_taskrun_change", args=[run.id]), HTTP_ACCEPT_LANGUAGE=lang)
    assert page.status_code == 200
    return page.content.decode()


def explain_text(rule, slot, lang="en") -> str:
    with translation.override(lang):
        return say_all(slot_explanation(rule=rule, slot=slot, now=slot).said)


def test_an_uncertain_day_says_it_is_held_for_the_calendar_not_for_a_catch_up(client, operator):
    rule = china_rule()
    scheduler_tick(now=BRIDGE)
    run = TaskRun.objects.get(rule=rule, slot=BRIDGE)
    assert (run.state, run.payload["held"]) == (TaskRun.State.AWAITING_APPROVAL, [words.GATE_UNCERTAIN_DAY])
    uncertain = "2027-02-04 is an uncertain day: calendar cn-mainland has no notice for the year yet"
    page = run_page(client, run)
    assert 'id="run-held-for"' in page and uncertain in page and "catch-up" not in page.split("run-held-for")[1][:300]
    said = explain_text(rule, BRIDGE)
    assert f"waiting for operator approval: run {run.id} ({uncertain}" in said
    assert "approval threshold" not in said
    zh = explain_text(rule, BRIDGE, "zh-hans")
    assert "2027-02-04 是不确定的日期：日历 cn-mainland 尚无该年的放假通知" in zh

    listing = client.get(reverse("admin:runs_taskrun_changelist")).content.decode()
    assert "Approve selected held runs (catch-up burst or uncertain calendar day)" in listing
    done = client.post(
        reverse("admin:runs_taskrun_changelist"),
        {"action": "approve_held", "_selected_action": [str(run.id)]},
        follow=True,
    )
    assert "Approved 1 held run(s)" in done.content.decode()
    run.refresh_from_db()
    assert run.state == TaskRun.State.PENDING and run.approved_by == "op"
    assert 'id="run-held-for"' not in run_page(client, run)


def test_a_catch_up_burst_on_an_uncertain_day_names_both_gates(client, operator):
    # Down from Thursday 2027-01-28 09:00 to Monday 02-01 09:00:30 CST: five slots late, above a
    # threshold of 1. 28 January is an ordinary weekday; 1 February a notice may bridge.
    monday = datetime(2027, 2, 1, 1, 0, tzinfo=UTC)
    rule = china_rule(catchup="all", catchup_max_delay_seconds=5 * 86400, catchup_approval_threshold=1)
    TriggerRule.objects.filter(pk=rule.pk).update(next_fire_at=monday - timedelta(days=4))
    scheduler_tick(now=monday + timedelta(seconds=30))
    runs = {r.slot.date(): r for r in TaskRun.objects.filter(rule=rule)}
    assert runs[date(2027, 1, 28)].payload["held"] == [words.GATE_CATCHUP]
    assert runs[date(2027, 2, 1)].payload["held"] == [words.GATE_CATCHUP, words.GATE_UNCERTAIN_DAY]
    page = run_page(client, runs[date(2027, 2, 1)])
    assert "a catch-up burst above the rule&#x27;s approval threshold" in page
    assert "2027-02-01 is an uncertain day" in page
    said = explain_text(rule, runs[date(2027, 1, 28)].slot)
    assert "(a catch-up burst above the rule's approval threshold)" in said and "uncertain day" not in said
