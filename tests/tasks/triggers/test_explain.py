"""`harness explain RULE SLOT`, the admin explain view and `harness preview`: the right answer for
each kind of outcome, produced by the real tick (not by writing decisions by hand)."""

import json
from datetime import UTC, datetime, time, timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import translation

from runs.models import TaskRun
from tasks.flags import flag_set
from tasks.models import TriggerRule
from tasks.triggers.scheduler import scheduler_tick
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)  # Tuesday 08:00 Berlin


def berlin_rule(name: str, **over) -> TriggerRule:
    """Every minute in Berlin, its first slot due at T0."""
    return make_rule(name, **{"timezone": "Europe/Berlin", "due": T0, **over})


def explain(rule: str, slot: datetime | str) -> dict:
    out = StringIO()
    text = slot if isinstance(slot, str) else slot.isoformat()
    call_command("harness", "explain", rule, text, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_explain_names_the_reason_of_every_kind_of_outcome():
    berlin_rule("ran")
    berlin_rule("missed")  # catch-up none, 30 s late
    berlin_rule("latest", catchup="latest", catchup_max_delay_seconds=3600)
    berlin_rule("capped", catchup="all", catchup_max_delay_seconds=3600, catchup_max_count=1)
    berlin_rule("hours", hours_start=time(9, 0), hours_end=time(17, 0), outside_hours="skip")
    berlin_rule("holiday", excluded_dates=["2026-12-01"])
    berlin_rule("skip-not-ready", depends_on=["data.ready"], not_ready_policy="skip")
    berlin_rule("wait-not-ready", depends_on=["data.ready"], ready_deadline=time(8, 1), ready_recheck_seconds=30)
    berlin_rule("waiting", depends_on=["data.ready"], ready_deadline=time(12, 0))
    berlin_rule("overlap", overlap="skip")
    berlin_rule("gated", catchup="all", catchup_max_delay_seconds=3600, catchup_approval_threshold=1)

    scheduler_tick(now=T0)  # on time: ran, overlap's first run, waiting holds...
    scheduler_tick(now=T0 + timedelta(minutes=1))  # overlap: second slot skipped
    TriggerRule.objects.filter(name__in=["missed", "latest", "capped", "gated"]).update(next_fire_at=T0)
    TaskRun.objects.filter(rule__name__in=["missed", "latest", "capped", "gated"]).delete()
    scheduler_tick(now=T0 + timedelta(minutes=1, seconds=30))  # catch-up rules see T0 and T0+1m late
    scheduler_tick(now=T0 + timedelta(minutes=2, seconds=1))  # wait-not-ready: deadline 08:01 passed

    cases = {
        ("ran", T0): ("run", "pending"),
        ("missed", T0): ("decision", "missed"),
        ("latest", T0): ("decision", "superseded"),
        ("latest", T0 + timedelta(minutes=1)): ("run", "pending"),
        ("capped", T0): ("decision", "catchup_capped"),
        ("hours", T0): ("decision", "outside_window"),
        ("holiday", T0): ("decision", "calendar"),
        ("skip-not-ready", T0): ("decision", "not_ready"),
        ("wait-not-ready", T0): ("decision", "not_ready_expired"),
        ("waiting", T0): ("waiting", "not_ready"),
        ("overlap", T0 + timedelta(minutes=1)): ("decision", "overlap"),
        ("gated", T0): ("run", "awaiting_approval"),
    }
    for (rule, slot), (outcome, reason) in cases.items():
        result = explain(rule, slot)
        assert (result["outcome"], result["reason"]) == (outcome, reason), (rule, result)
    assert "approval" in explain("gated", T0)["summary"]
    assert "09:00-17:00" in explain("hours", T0)["details"]["hours"]


def test_explain_reads_a_slot_without_offset_on_the_rule_zone_clock():
    berlin_rule("ran")
    scheduler_tick(now=T0)
    assert explain("ran", "2026-12-01T08:00")["outcome"] == "run"
    assert explain("ran", "2026-12-01T08:00")["slot_utc"] == T0.isoformat()


def test_explain_says_not_a_slot_not_due_and_no_record():
    berlin_rule("ran")
    scheduler_tick(now=T0)
    odd = explain("ran", T0 + timedelta(seconds=30))
    assert odd["outcome"] == "not_a_slot"
    assert "nearest before" in odd["summary"]
    assert explain("ran", datetime(2099, 1, 1, tzinfo=UTC))["outcome"] == "not_due"
    # Before the rule was tracked (and before the real clock: the command reads it).
    assert explain("ran", datetime(2026, 1, 1, tzinfo=UTC))["outcome"] == "no_record"


def test_explain_refuses_an_unknown_rule_and_a_bad_slot():
    berlin_rule("ran")
    with pytest.raises(CommandError, match="no rule named"):
        call_command("harness", "explain", "nope", "2026-12-01T08:00", stdout=StringIO())
    with pytest.raises(CommandError, match="not a date-time"):
        call_command("harness", "explain", "ran", "yesterday", stdout=StringIO())


def test_the_text_output_says_why():
    berlin_rule("holiday", excluded_dates=["2026-12-01"])
    scheduler_tick(now=T0)
    out = StringIO()
    call_command("harness", "explain", "holiday", T0.isoformat(), stdout=out)
    assert "did not run: Not a business day (holiday" in out.getvalue()
    assert "excluded date" in out.getvalue()


def test_the_admin_explain_view_answers_for_a_slot(client):
    rule = berlin_rule("holiday", excluded_dates=["2026-12-01"])
    scheduler_tick(now=T0)
    client.force_login(get_user_model().objects.create_superuser("op", "op@example.com", "pw-op-123456"))
    url = reverse("admin:tasks_triggerrule_explain", args=[rule.pk])
    page = client.get(url, {"slot": "2026-12-01T08:00"})
    assert page.status_code == 200
    body = page.content.decode()
    assert 'id="explain-reason"><code>calendar<' in body
    assert "Not a business day (holiday" in body
    bad = client.get(url, {"slot": "tomorrow-ish"})
    assert bad.status_code == 200 and "not a date-time" in bad.content.decode()
    # The rule page shows the next fires with the guards and links here.
    change = client.get(reverse("admin:tasks_triggerrule_change", args=[rule.pk])).content.decode()
    assert 'id="guard-preview"' in change and url in change


def test_preview_shows_dst_and_windows():
    rule = make_rule("ny", kind="cron", cron="30 2 * * *", timezone="America/New_York", weekdays="mon-fri")
    from tasks.rules.preview import rule_preview
    from tasks.sentences import say

    rows = rule_preview(rule, at=datetime(2026, 3, 6, 0, 0, tzinfo=UTC), count=4).fires
    # Fri 6th, Sat 7th (weekend), Sun 8th (DST gap: 02:30 shifted to 03:00, and weekend), Mon 9th.
    assert [r.local.day for r in rows] == [6, 7, 8, 9]
    assert say(rows[0].guards) == "runs"
    assert say(rows[1].guards).startswith("no run: calendar")
    assert "DST gap" in say(rows[2].note)
    out = StringIO()
    call_command("harness", "preview", "ny", "--next", "10", stdout=out)
    assert len(out.getvalue().strip().splitlines()) == 10


def test_flags_command_sets_lists_and_clears():
    out = StringIO()
    call_command("harness", "flags", "set", "pipeline.raw_data.ready", "2026-12-01", stdout=out)
    call_command("harness", "flags", "list", "--json", stdout=out)
    assert "set: pipeline.raw_data.ready for 2026-12-01" in out.getvalue()
    listed = StringIO()
    call_command("harness", "flags", "list", "--json", stdout=listed)
    assert json.loads(listed.getvalue())[0]["scope"] == "2026-12-01"
    cleared = StringIO()
    call_command("harness", "flags", "clear", "pipeline.raw_data.ready", "2026-12-01", stdout=cleared)
    assert "cleared" in cleared.getvalue()
    with pytest.raises(CommandError, match="name"):
        call_command("harness", "flags", "set", "bad name!", "2026-12-01", stdout=StringIO())


def test_a_flag_set_through_the_command_lets_a_waiting_slot_run():
    berlin_rule("waiting", depends_on=["data.ready"], ready_deadline=time(12, 0), ready_recheck_seconds=60)
    scheduler_tick(now=T0)
    call_command("harness", "flags", "set", "data.ready", "2026-12-01", stdout=StringIO())
    flag_set(name="data.ready", scope="2026-12-01", actor="x", now=T0)  # idempotent: refreshed, not doubled
    scheduler_tick(now=T0 + timedelta(minutes=1))
    assert explain("waiting", T0)["outcome"] == "run"


# --- a paused rule's slots ---------------------------------------------------------------


def _paused(name: str = "paused", **over) -> TriggerRule:
    from tasks.triggers.operator import rule_pause

    rule = berlin_rule(name, **over)
    rule_pause(rule=rule, actor="op", now=T0, reason="upstream outage")
    rule.refresh_from_db()
    assert not rule.enabled and rule.paused_at == T0
    return rule


def test_explain_says_a_paused_rules_future_slot_will_not_run():
    _paused()
    result = explain("paused", datetime(2099, 1, 1, tzinfo=UTC))
    assert (result["outcome"], result["reason"]) == ("not_due", "paused")
    assert "expected: runs" not in result["summary"]
    assert "expected: paused" in result["summary"]
    assert "will not run while the rule is paused" in result["summary"]
    assert "upstream outage" in result["summary"]
    assert result["details"]["paused_at"] == T0.isoformat()
    # The text output says the same.
    out = StringIO()
    call_command("harness", "explain", "paused", "2099-01-01T01:00", stdout=out)
    assert "expected: paused" in out.getvalue() and "expected: runs" not in out.getvalue()


def test_explain_says_a_paused_rules_past_slot_did_not_run_because_it_is_paused():
    from tasks.triggers.explain import slot_explain

    rule = _paused()
    result = slot_explain(rule=rule, slot=T0 + timedelta(minutes=5), now=T0 + timedelta(hours=1))
    assert (result["outcome"], result["reason"]) == ("no_record", "paused")
    assert "paused" in result["summary"] and "before the rule's schedule was last set" not in result["summary"]


def test_explain_still_says_runs_for_an_enabled_rules_future_slot():
    berlin_rule("on")
    result = explain("on", datetime(2099, 1, 1, tzinfo=UTC))
    assert (result["outcome"], result["reason"]) == ("not_due", "")
    assert result["summary"] == "not due yet; expected: runs"


def test_the_admin_explain_view_and_preview_say_paused(client):
    rule = _paused(excluded_dates=["2099-01-02"])
    client.force_login(get_user_model().objects.create_superuser("op", "op@example.com", "pw-op-123456"))
    url = reverse("admin:tasks_triggerrule_explain", args=[rule.pk])
    for accept in ("en", "zh-hans"):
        page = client.get(url, {"slot": "2099-01-01T01:00"}, headers={"accept_language": accept})
        assert page.status_code == 200
        body = page.content.decode()
        assert 'id="explain-reason"><code>paused<' in body
        assert "expected: runs" not in body and "explain-sentence" in body
    assert "解释 paused 的一个时间槽" in body and 'lang="zh-hans"' in body  # the page's own labels in Chinese
    from tasks.rules.preview import rule_preview
    from tasks.sentences import say

    rows = rule_preview(rule, at=datetime(2099, 1, 1, 23, 58, tzinfo=UTC), count=3).fires
    # Paused comes first: a calendar-excluded slot does not run either, but the pause is why.
    translation.activate("en")  # the page above left Chinese active in this thread
    assert len(rows) == 3 and all(say(r.guards).startswith("paused: will not run") for r in rows), rows
    out = StringIO()
    call_command("harness", "preview", "paused", "--next", "2", stdout=out)
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == 2 and all("paused: will not run" in line and "  runs" not in line for line in lines)
