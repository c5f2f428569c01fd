# ruff: noqa: F811  (pytest fixtures imported from tests.support.desk are redefined as arguments)
# ruff: noqa: RUF001  (Chinese text uses full-width punctuation)
"""Rule pages of the operator's desk: preview, lint, run now, trial, pause/resume, backfill, roles."""

import html
import itertools
import re
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.core import signing
from django.urls import reverse
from django.utils import timezone

from harness_site.audit.models import AuditEntry
from runs.models import TaskRun
from tasks.admin.rule_preview import schedule_preview
from tasks.models import TriggerRule
from tasks.triggers.operator import MAX_BACKFILL_RUNS, rule_fire
from tests.support.desk import (  # noqa: F401 - fixtures
    daily_report,
    oncall,
    oncall_client,
    operator,
    operator_client,
    viewer,
    viewer_client,
)

pytestmark = pytest.mark.django_db


def _url(name: str, rule: TriggerRule) -> str:
    return reverse(f"admin:tasks_triggerrule_{name}", args=[rule.pk])


def _text(response) -> str:
    return html.unescape(response.content.decode())


def test_it_shows_description_fires_dst_notes_and_lint_on_the_rule_page(operator_client):
    rule = daily_report(cron="30 2 * * *", timezone="Europe/Berlin")
    page = _text(operator_client.get(reverse("admin:tasks_triggerrule_change", args=[rule.pk])))
    assert "At 02:30" in page
    assert 'id="rule-preview"' in page
    preview = page[page.index('id="rule-preview"') :]
    assert preview[: preview.index("</table>")].count(" UTC</td>") == 10
    assert "clocks go forward" in page or "clocks go back" in page
    assert 'id="rule-lint"' in page
    assert "timezone explicit" in page and "lease TTL above p99 duration" in page
    for button in ("rule-run_now", "rule-trial", "rule-pause", "rule-backfill"):
        assert f'id="{button}"' in page


def test_it_shows_the_lint_summary_as_a_list_column(operator_client):
    daily_report(dedupe_key_template="{rule}", catchup_max_delay_seconds=0)
    page = _text(operator_client.get(reverse("admin:tasks_triggerrule_changelist")))
    assert "2 fail, 1 warn" in page


def test_it_uses_the_skills_observed_p99_for_the_lease_check(operator_client):
    rule = daily_report(lease_ttl_seconds=5)
    now = timezone.now()
    TaskRun.objects.bulk_create(
        [
            TaskRun(
                biz_key=f"k{i}",
                skill="harness.noop",
                source="manual",
                trigger_at=now,
                run_after=now,
                state="succeeded",
                start_at=now,
                finish_at=now + timedelta(seconds=i),
            )
            for i in range(1, 11)
        ]
    )
    page = _text(operator_client.get(reverse("admin:tasks_triggerrule_change", args=[rule.pk])))
    assert "Lease 5s <= p99 9.9s" in page


def test_it_previews_an_unsaved_schedule_as_json(viewer_client):
    url = reverse("admin:tasks_triggerrule_preview")
    ok = viewer_client.get(url, {"kind": "cron", "cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai"})
    assert ok.status_code == 200
    data = ok.json()
    assert data["description"] == "At 09:00, Monday through Friday"
    assert len(data["fires"]) == 10
    assert all("09:00:00 CST" in f["local"] and "01:00:00 UTC" in f["utc"] for f in data["fires"])
    bad_cron = viewer_client.get(url, {"kind": "cron", "cron": "61 * * * *", "timezone": "UTC"})
    assert bad_cron.status_code == 400
    assert "minute" in bad_cron.json()["errors"]["cron"]
    bad_zone = viewer_client.get(url, {"kind": "cron", "cron": "0 9 * * *", "timezone": "Mars/Olympus"})
    assert bad_zone.status_code == 400
    assert "not a known zone" in bad_zone.json()["errors"]["timezone"]


def test_it_previews_a_one_time_rule_as_the_operator_types_it(viewer_client):
    url = reverse("admin:tasks_triggerrule_preview")
    typed = {"kind": "once", "timezone": "Asia/Shanghai", "run_at_0": "2030-01-01", "run_at_1": "09:00"}
    data = viewer_client.get(url, typed).json()
    # The wall time is read on the rule zone's clock, as the form will save it.
    assert "2030-01-01 09:00:00 CST" in data["description"] and "2030-01-01 01:00:00 UTC" in data["description"]
    assert [(f["local"], f["utc"]) for f in data["fires"]] == [
        ("Tue 2030-01-01 09:00:00 CST (UTC+0800)", "2030-01-01 01:00:00 UTC")
    ]
    gap = viewer_client.get(
        url, {**typed, "timezone": "America/New_York", "run_at_0": "2030-03-10", "run_at_1": "02:30"}
    )
    assert gap.status_code == 200
    assert "2030-03-10 03:00:00 EDT" in gap.json()["description"]
    assert "does not exist" in gap.json()["dst_notes"][0]
    assert "DST gap: 02:30 does not exist, shifted to 03:00" == gap.json()["fires"][0]["note"]
    past = viewer_client.get(url, {**typed, "run_at_0": "2020-01-01"}).json()
    assert "already past" in past["description"] and past["fires"] == []


@pytest.mark.parametrize(
    ("typed", "field", "message"),
    [
        ({"run_at_0": "", "run_at_1": ""}, "run_at", "Type the date and time"),
        ({"run_at_0": "2030-01-01", "run_at_1": ""}, "run_at", "Enter a valid time."),
        ({"run_at_0": "2030-02-30", "run_at_1": "09:00"}, "run_at", "Enter a valid date."),
        ({"run_at_0": "9999-12-31", "run_at_1": "23:00", "timezone": "America/New_York"}, "run_at", "out of range"),
        ({"timezone": "Mars/Olympus"}, "timezone", "not a known zone"),
        ({"dst_gap": "sometimes"}, "dst_gap", "is not one of shift, skip"),
        (
            {"timezone": "America/New_York", "dst_gap": "skip", "run_at_0": "2030-03-10", "run_at_1": "02:30"},
            "run_at",
            "would never run",
        ),
    ],
)
def test_it_names_the_bad_field_of_a_one_time_preview(viewer_client, typed, field, message):
    url = reverse("admin:tasks_triggerrule_preview")
    response = viewer_client.get(
        url, {"kind": "once", "timezone": "Asia/Shanghai", "run_at_0": "2030-01-01", "run_at_1": "09:00", **typed}
    )
    assert response.status_code == 400
    assert message in response.json()["errors"][field]


def test_the_rule_page_shows_a_one_time_rules_instant_in_its_zone_and_utc(operator_client):
    rule = daily_report(kind="once", cron="", run_at=datetime(2030, 1, 1, 1, 0, tzinfo=UTC), timezone="Asia/Shanghai")
    page = _text(operator_client.get(reverse("admin:tasks_triggerrule_change", args=[rule.pk])))
    assert "Once at Tue 2030-01-01 09:00:00 CST (UTC+0800) = 2030-01-01 01:00:00 UTC" in page


def test_the_rule_page_previews_heartbeat_and_event_rules_without_a_schedule_error(operator_client):
    # The one preview behind the page, the API and the CLI: a heartbeat fires at its deadline, an
    # event rule when an event arrives; neither is a schedule kind the form could get wrong.
    deadline = datetime(2030, 1, 1, 1, 0, tzinfo=UTC)
    beat = daily_report(name="beat", kind="heartbeat", cron="", heartbeat_every_seconds=300)
    TriggerRule.objects.filter(pk=beat.pk).update(next_fire_at=deadline)
    events = daily_report(name="events", kind="event", cron="", dedupe_key_template="{object_id}")
    beat_page = _text(operator_client.get(reverse("admin:tasks_triggerrule_change", args=[beat.pk])))
    event_page = _text(operator_client.get(reverse("admin:tasks_triggerrule_change", args=[events.pk])))
    assert "is not one of" not in beat_page and "is not one of" not in event_page
    assert "Heartbeat: alert when no ping arrives in time" in beat_page
    assert "if no ping arrives before" in beat_page and "2030-01-01 01:00:00 UTC" in beat_page
    assert "On events" in event_page


def test_it_notes_dst_shifts_in_the_preview():
    at = datetime(2026, 3, 25, tzinfo=UTC)
    data = schedule_preview({"kind": "cron", "cron": "30 2 * * *", "timezone": "Europe/Berlin"}, at=at)
    assert any("DST gap" in f["note"] for f in data["fires"])
    assert data["dst_notes"][0].startswith("2026-03-29: clocks go forward (UTC+01:00 → UTC+02:00)")


def test_it_runs_now_once_for_a_slot_however_often_clicked(operator_client, operator):
    rule = daily_report()
    url = _url("run_now", rule)
    first = operator_client.post(url, {"slot": "2026-03-01 09:00", "biz_key": "", "reason": "rerun"})
    assert first.status_code == 302
    run = TaskRun.objects.get()
    assert (run.biz_key, run.source, run.triggered_by, run.is_trial) == (
        f"rule/{rule.pk}/manual/report:2026-03-01",
        "manual",
        "olga",
        False,
    )
    assert run.slot == datetime(2026, 3, 1, 8, 0, tzinfo=UTC)  # 09:00 Berlin
    second = operator_client.post(url, {"slot": "2026-03-01 09:00", "biz_key": "", "reason": "again"}, follow=True)
    assert "dedupe hit" in _text(second)
    assert TaskRun.objects.count() == 1
    assert TaskRun.objects.get().dedupe_hits == 1
    actions = list(AuditEntry.objects.values_list("actor", "action", "reason"))
    assert actions == [("olga", "rule.run_now", "again"), ("olga", "rule.run_now", "rerun")]


def test_it_runs_a_chosen_business_key(operator_client):
    rule = daily_report()
    operator_client.post(_url("run_now", rule), {"slot": "", "biz_key": "report:special", "reason": ""})
    # Escaped into the rule's own namespace for named keys: it can never name another rule's run.
    assert TaskRun.objects.get().biz_key == f"rule/{rule.pk}/manual-key/report%3Aspecial"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"slot": "tomorrow at nine"}, "is not a time like 2026-12-01 09:00 (in Europe/Berlin)"),
        ({"slot": "2026-03-01 09:00", "biz_key": "x"}, "Give a slot or a business key, not both."),
    ],
)
def test_it_shows_bad_run_now_input_on_the_form(operator_client, data, message):
    rule = daily_report()
    response = operator_client.post(_url("run_now", rule), {"biz_key": "", "reason": "", **data})
    assert response.status_code == 200
    assert message in _text(response)
    assert not TaskRun.objects.exists()


def test_it_trial_runs_in_its_own_key_namespace_even_when_paused(operator_client):
    rule = daily_report(enabled=False)
    operator_client.post(_url("run_now", rule), {"slot": "2026-03-01 09:00", "biz_key": "", "reason": ""})
    response = operator_client.post(_url("trial", rule), {"slot": "2026-03-01 09:00", "biz_key": "", "reason": "gray"})
    assert response.status_code == 302
    trial = TaskRun.objects.get(is_trial=True)
    assert trial.biz_key == f"rule/{rule.pk}/trial/report:2026-03-01"
    assert trial.payload["trial"] is True
    assert TaskRun.objects.get(is_trial=False).biz_key == f"rule/{rule.pk}/manual/report:2026-03-01"
    page = _text(operator_client.get(reverse("admin:runs_taskrun_change", args=[trial.pk])))
    assert "TRIAL" in page
    listing = operator_client.get(reverse("admin:runs_taskrun_changelist"), {"is_trial__exact": "1"})
    assert listing.context["cl"].result_count == 1
    assert AuditEntry.objects.filter(action="rule.trial_run", reason="gray").count() == 1


def test_it_pauses_and_resumes_with_a_reason_and_keeps_history(operator_client):
    rule = daily_report()
    assert operator_client.post(_url("pause", rule), {"reason": "upstream outage"}).status_code == 302
    rule.refresh_from_db()
    assert (rule.enabled, rule.pause_reason, rule.next_fire_at) == (False, "upstream outage", None)
    operator_client.post(_url("pause", rule), {"reason": "upstream back"})
    rule.refresh_from_db()
    assert rule.enabled and rule.next_fire_at is not None
    assert list(AuditEntry.objects.order_by("at", "id").values_list("action", "reason")) == [
        ("rule.pause", "upstream outage"),
        ("rule.resume", "upstream back"),
    ]
    reasons = list(rule.history.order_by("history_id").values_list("history_change_reason", flat=True))
    assert reasons[-2:] == ["paused: upstream outage", "resumed: upstream back"]
    history = _text(operator_client.get(reverse("admin:tasks_triggerrule_history", args=[rule.pk])))
    assert "Paused: upstream outage" in history  # the prefix worded for the reader and "enabled" in history.lower()


def test_it_refuses_a_pause_without_a_reason_on_the_form(operator_client):
    rule = daily_report()
    response = operator_client.post(_url("pause", rule), {"reason": ""})
    assert response.status_code == 200
    assert "This field is required." in _text(response)
    rule.refresh_from_db()
    assert rule.enabled


def test_it_shows_a_rule_edit_as_a_diff_in_the_history(operator):
    rule = daily_report()
    rule.cron = "0 10 * * *"
    rule.save()
    from tests.support.desk import client_for

    page = _text(client_for(operator).get(reverse("admin:tasks_triggerrule_history", args=[rule.pk])))
    assert "0 9 * * *" in page and "0 10 * * *" in page


def _token(response) -> str:
    """The signed plan the confirmation page carries."""
    found = re.search(r'name="token" value="([^"]+)"', response.content.decode())
    assert found, "no signed plan on the page"
    return found.group(1)


def test_it_confirms_a_backfill_with_its_count_then_creates_paced_runs(operator_client):
    rule = daily_report(cron="0 9 * * *", timezone="UTC")
    url = _url("backfill", rule)
    form = {"start": "2026-01-01", "end": "2026-01-10", "spacing": "30", "reason": "late data"}
    confirm = operator_client.post(url, form)
    assert confirm.status_code == 200
    page = _text(confirm)
    assert "10 slot(s) from 2026-01-01 to 2026-01-10" in page and "This will create 10 run(s)" in page
    assert not TaskRun.objects.exists()
    done = operator_client.post(url, {"token": _token(confirm), "confirm": "yes"})
    assert done.status_code == 302
    runs = list(TaskRun.objects.order_by("slot"))
    assert len(runs) == 10 and {r.source for r in runs} == {"backfill"}
    gaps = {(b.run_after - a.run_after).total_seconds() for a, b in itertools.pairwise(runs)}
    assert gaps == {30.0}
    again = operator_client.post(url, form)
    assert "10 already have a run" in _text(again) and "This will create 0 run(s)" in _text(again)
    audit = AuditEntry.objects.get(action="rule.backfill")
    assert (audit.details["created"], audit.reason) == (10, "late data")


# --- the confirmation executes exactly the plan it showed -----------------------------------

BACKFILL_3 = {"start": "2026-01-01", "end": "2026-01-03", "spacing": "10", "reason": "late data"}
BACKFILL_8 = {"start": "2026-01-01", "end": "2026-01-08", "spacing": "0", "reason": "more"}


def test_the_backfill_confirmation_shows_the_plan_read_only(operator_client):
    rule = daily_report(cron="0 9 * * *", timezone="UTC")
    page = operator_client.post(_url("backfill", rule), BACKFILL_3)
    body = page.content.decode()
    body = body[body.index('id="desk-form"') :]
    assert "Yes, create 3 run(s)" in _text(page)
    # No input the operator could change: only the signed plan and the CSRF token travel back.
    inputs = re.findall(r"<(?:input|textarea|select)\b[^>]*>", body)
    editable = [i for i in inputs if 'type="hidden"' not in i and 'type="submit"' not in i]
    assert editable == [], editable
    assert {"start", "end", "spacing", "reason"}.isdisjoint(re.findall(r'name="([^"]+)"', body))
    text = _text(page)
    for shown in ("2026-01-01", "2026-01-03", "10s", "late data", "UTC"):
        assert shown in text, shown


def test_a_confirmation_posted_with_other_dates_executes_only_the_plan_it_showed(operator_client):
    rule = daily_report(cron="0 9 * * *", timezone="UTC")
    url = _url("backfill", rule)
    token = _token(operator_client.post(url, BACKFILL_3))
    done = operator_client.post(url, {**BACKFILL_8, "token": token, "confirm": "yes"})
    assert done.status_code == 302
    assert TaskRun.objects.count() == 3
    assert sorted(r.slot.day for r in TaskRun.objects.all()) == [1, 2, 3]


def test_a_post_that_says_confirm_without_a_signed_plan_only_shows_the_plan(operator_client):
    rule = daily_report(cron="0 9 * * *", timezone="UTC")
    page = operator_client.post(_url("backfill", rule), {**BACKFILL_8, "confirm": "yes"})
    assert page.status_code == 200
    assert "Yes, create 8 run(s)" in _text(page)
    assert not TaskRun.objects.exists() and not AuditEntry.objects.exists()


def _tampered(token: str) -> str:
    """The signed payload with a date changed, keeping the old signature."""
    payload, _sep, signature = token.rpartition(":")
    head, _sep, stamp = payload.rpartition(":")
    raw = signing.b64_decode(head.encode()).decode()
    forged = signing.b64_encode(raw.replace("2026-01-03", "2026-01-08").encode()).decode()
    assert forged != head
    return f"{forged}:{stamp}:{signature}"


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(_tampered, id="dates-changed"),
        pytest.param(lambda t: t[:-2] + ("AA" if not t.endswith("AA") else "BB"), id="signature-changed"),
        pytest.param(lambda t: "not-a-token", id="garbage"),
        pytest.param(lambda t: "", id="empty"),
    ],
)
def test_a_tampered_confirmation_creates_no_runs_and_says_so(operator_client, tamper):
    rule = daily_report(cron="0 9 * * *", timezone="UTC")
    url = _url("backfill", rule)
    token = _token(operator_client.post(url, BACKFILL_3))
    page = operator_client.post(url, {"token": tamper(token), "confirm": "yes"})
    assert page.status_code == 200
    assert "This confirmation is not valid" in _text(page)
    assert not TaskRun.objects.exists() and not AuditEntry.objects.exists()


def test_a_confirmation_for_another_rule_creates_no_runs(operator_client):
    rule = daily_report(cron="0 9 * * *", timezone="UTC")
    other = daily_report(name="other-report", cron="0 9 * * *", timezone="UTC")
    token = _token(operator_client.post(_url("backfill", other), BACKFILL_3))
    page = operator_client.post(_url("backfill", rule), {"token": token, "confirm": "yes"})
    assert page.status_code == 200
    assert "This confirmation is not valid" in _text(page)
    assert not TaskRun.objects.exists()


def test_an_expired_confirmation_creates_no_runs(operator_client, monkeypatch):
    from tasks.admin import backfill_confirm

    rule = daily_report(cron="0 9 * * *", timezone="UTC")
    url = _url("backfill", rule)
    token = _token(operator_client.post(url, BACKFILL_3))
    monkeypatch.setattr(backfill_confirm, "BACKFILL_CONFIRM_MAX_AGE", -1)
    page = operator_client.post(url, {"token": token, "confirm": "yes"})
    assert page.status_code == 200
    assert "expired" in _text(page)
    assert not TaskRun.objects.exists()


def test_a_rule_changed_since_the_confirmation_is_refused(operator_client):
    rule = daily_report(cron="0 9 * * *", timezone="UTC")
    url = _url("backfill", rule)
    token = _token(operator_client.post(url, BACKFILL_3))
    rule.cron = "0 9,21 * * *"  # now 6 slots in the range
    rule.save()
    page = operator_client.post(url, {"token": token, "confirm": "yes"})
    assert page.status_code == 200
    assert "The rule changed since this plan was shown (version 1, now 2)" in _text(page)
    assert not TaskRun.objects.exists()


def test_a_count_that_changed_since_the_confirmation_is_refused_and_the_new_plan_shown(operator_client):
    rule = daily_report(cron="0 9 * * *", timezone="UTC")
    url = _url("backfill", rule)
    token = _token(operator_client.post(url, BACKFILL_3))
    slot = datetime(2026, 1, 2, 9, 0, tzinfo=UTC)
    rule_fire(rule=rule, actor="someone", now=timezone.now(), slot=slot, source=TaskRun.Source.BACKFILL)
    page = operator_client.post(url, {"token": token, "confirm": "yes"})
    assert page.status_code == 200
    text = _text(page)
    assert "The plan changed since it was shown: it would now create 2 run(s), not 3" in text
    assert "Yes, create 2 run(s)" in text  # the fresh plan, to confirm again
    assert TaskRun.objects.count() == 1
    again = operator_client.post(url, {"token": _token(page), "confirm": "yes"})
    assert again.status_code == 302
    assert TaskRun.objects.count() == 3


def test_the_confirmed_count_leaves_out_slots_that_share_a_business_key(operator_client):
    # Hourly slots with a daily key: one run per day, and the button says so.
    rule = daily_report(cron="0 */6 * * *", timezone="UTC", dedupe_key_template="report:{business_date}")
    url = _url("backfill", rule)
    confirm = operator_client.post(url, BACKFILL_3)
    text = _text(confirm)
    assert "12 slot(s) from 2026-01-01 to 2026-01-03" in text
    assert "9 share their business key with an earlier slot" in text and "Yes, create 3 run(s)" in text
    assert operator_client.post(url, {"token": _token(confirm), "confirm": "yes"}).status_code == 302
    assert TaskRun.objects.count() == 3


def test_a_second_click_on_the_same_confirmation_creates_nothing_more(operator_client):
    rule = daily_report(cron="0 9 * * *", timezone="UTC")
    url = _url("backfill", rule)
    token = _token(operator_client.post(url, BACKFILL_3))
    assert operator_client.post(url, {"token": token, "confirm": "yes"}).status_code == 302
    second = operator_client.post(url, {"token": token, "confirm": "yes"})
    assert second.status_code == 200
    assert "it would now create 0 run(s), not 3" in _text(second)
    assert TaskRun.objects.count() == 3
    assert AuditEntry.objects.filter(action="rule.backfill").count() == 1


def test_the_executed_backfill_keeps_the_window_it_showed_even_when_more_slots_pass(operator_client):
    # "up to now" is part of the plan shown: a slot that passes between the confirmation and the
    # click is not added to it.
    rule = daily_report(cron="0 * * * *", timezone="UTC", dedupe_key_template="{rule}:{slot}")
    url = _url("backfill", rule)
    day = {**BACKFILL_3, "start": "2026-01-05", "end": "2026-01-05"}
    with mock.patch("tasks.admin.rule_backfill.now", return_value=datetime(2026, 1, 5, 10, 30, tzinfo=UTC)):
        confirm = operator_client.post(url, day)
    assert "Yes, create 11 run(s)" in _text(confirm)  # 00:00 to 10:00
    with mock.patch("tasks.admin.rule_backfill.now", return_value=datetime(2026, 1, 5, 12, 30, tzinfo=UTC)):
        done = operator_client.post(url, {"token": _token(confirm), "confirm": "yes"})
    assert done.status_code == 302
    assert TaskRun.objects.count() == 11
    assert max(TaskRun.objects.values_list("slot", flat=True)) == datetime(2026, 1, 5, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"start": "2020-01-01", "end": "2026-01-01"}, f"the limit for one backfill is {MAX_BACKFILL_RUNS}"),
        ({"start": "2026-01-10", "end": "2026-01-01"}, "is before the start date"),
        ({"start": "2999-01-01", "end": "2999-01-02"}, "a backfill is for the past"),
        ({"start": "yesterday", "end": "2026-01-02"}, "Enter a valid date."),
        ({"start": "2026-01-01", "end": "2026-01-02", "spacing": "-1"}, "greater than or equal to 0"),
    ],
)
def test_it_shows_bad_backfill_input_on_the_form(operator_client, form, message):
    rule = daily_report(cron="0 9 * * *", timezone="UTC")
    response = operator_client.post(_url("backfill", rule), {"spacing": "10", "reason": "", **form, "confirm": "yes"})
    assert response.status_code == 200
    assert message in _text(response)
    assert not TaskRun.objects.exists()


@pytest.mark.parametrize("action", ["run_now", "trial", "pause", "backfill"])
def test_it_refuses_rule_actions_to_viewers_and_oncall(viewer_client, oncall_client, action):
    rule = daily_report()
    for client in (viewer_client, oncall_client):
        assert client.get(_url(action, rule)).status_code == 403
        assert (
            client.post(
                _url(action, rule),
                {"reason": "x", "start": "2026-01-01", "end": "2026-01-01", "spacing": "1", "slot": ""},
            ).status_code
            == 403
        )
    assert not TaskRun.objects.exists() and not AuditEntry.objects.exists()
    page = _text(viewer_client.get(reverse("admin:tasks_triggerrule_change", args=[rule.pk])))
    assert 'id="rule-trial"' not in page


# --- the one-time rule and backfill pages in English and Simplified Chinese -----------------------------

ZH = {"accept_language": "zh-hans"}


@pytest.mark.parametrize(
    ("headers", "shown", "absent"),
    [
        pytest.param(
            {},
            # Backfill is 回填 (docs/glossary.md); 补跑 is catch-up.
            ["Yes, create 3 run(s)", "Reason (for the audit log): late data", "Confirming creates exactly this plan"],
            ["确认回填"],
            id="en",
        ),
        pytest.param(
            ZH,
            ["确认回填", "是，创建 3 个运行", "原因（记入审计日志）：late data", "确认后将严格按此计划"],
            ["Confirming creates exactly this plan"],
            id="zh-hans",
        ),
    ],
)
def test_the_backfill_confirmation_speaks_the_browsers_language(operator_client, headers, shown, absent):
    rule = daily_report(cron="0 9 * * *", timezone="UTC")
    page = operator_client.post(_url("backfill", rule), BACKFILL_3, headers=headers)
    text = _text(page)
    assert page.status_code == 200
    assert all(s in text for s in shown), [s for s in shown if s not in text]
    assert not any(s in text for s in absent)
    refused = _text(operator_client.post(_url("backfill", rule), {"token": "forged"}, headers=headers))
    assert ("此确认无效" in refused) == bool(headers) and ("This confirmation is not valid" in refused) != bool(headers)


@pytest.mark.parametrize(
    ("headers", "help_text", "once"),
    [
        pytest.param({}, "in the rule's timezone", "Once at ", id="en"),
        pytest.param(ZH, "按规则所在时区", "一次，于 ", id="zh-hans"),
    ],
)
def test_the_one_time_run_at_form_and_preview_speak_the_browsers_language(operator_client, headers, help_text, once):
    rule = daily_report(kind="once", cron="", run_at=datetime(2030, 1, 1, 1, 0, tzinfo=UTC), timezone="Asia/Shanghai")
    page = _text(operator_client.get(reverse("admin:tasks_triggerrule_change", args=[rule.pk]), headers=headers))
    assert help_text in page and once in page
    typed = {"kind": "once", "timezone": "Asia/Shanghai", "run_at_0": "2030-01-01", "run_at_1": "09:00"}
    data = operator_client.get(reverse("admin:tasks_triggerrule_preview"), typed, headers=headers).json()
    assert data["description"].startswith(once)
    gap = {**typed, "timezone": "America/New_York", "dst_gap": "skip", "run_at_0": "2030-03-10", "run_at_1": "02:30"}
    error = operator_client.get(reverse("admin:tasks_triggerrule_preview"), gap, headers=headers).json()
    assert ("永远不会运行" in error["errors"]["run_at"]) == bool(headers)
