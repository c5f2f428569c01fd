"""Where a business calendar shows: rules export/import, the admin, the API, the rule's lint,
/healthz and the alert check. The library is the real one, except where a test needs its data to
end at a date relative to today's (the staleness tests): there the lookup is replaced at the boundary."""

import json
from datetime import UTC, date, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone, translation

from deadletters import alert_rules
from deadletters.alerts import alert_check_calendars
from deadletters.models import Alert
from tasks import sentences
from tasks.admin.rule_lint import calendar_lint
from tasks.models import BusinessCalendar, CalendarOverride, TriggerRule
from tasks.models import calendar as calendar_model
from tasks.rules import business_days, lint
from tasks.services import RuleImportError, rule_export, rule_import
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

RULE = {
    "name": "cn-report",
    "reason": "working days",
    "kind": "cron",
    "cron": "0 9 * * *",
    "timezone": "Asia/Shanghai",
    "dedupe_key_template": "{rule}:{business_date}",
    "skill": "harness.noop",
    "business_calendar": "cn",
}
CALENDAR = {
    "name": "cn",
    "country": "CN",
    "weekend": "sat-sun",
    "uncertain_days": "hold",
    "overrides": [{"date": "2026-12-31", "kind": "closed", "reason": "Year-end shutdown"}],
}


LINT_BASE = dict(
    timezone="Asia/Shanghai",
    dedupe_key_template="{rule}:{business_date}",
    params={},
    max_attempts=3,
    max_retry_window_seconds=3600,
    max_delay_seconds=600,
    jitter_min=0.5,
    jitter_max=1.5,
    catchup_max_delay_seconds=3600,
    lease_ttl_seconds=300,
    skill_p99_seconds=1.0,
    alert_fields=frozenset({"run_id", "biz_key"}),
)


def china(name: str = "cn") -> BusinessCalendar:
    return BusinessCalendar.objects.create(name=name, country="CN")


# --- export / import ------------------------------------------------------------------------


def test_a_calendar_travels_with_its_rules_and_overrides():
    result = rule_import(json.dumps({"calendars": [CALENDAR], "rules": [RULE]}))
    assert result.created == ["cn-report"]
    rule = TriggerRule.objects.get(name="cn-report")
    assert rule.business_calendar.name == "cn"
    assert list(rule.business_calendar.overrides.values_list("date", "kind", "reason")) == [
        (date(2026, 12, 31), "closed", "Year-end shutdown")
    ]
    doc = rule_export()
    assert doc["calendars"] == [{**CALENDAR, "subdivision": "", "description": ""}]
    assert doc["rules"][0]["business_calendar"] == "cn"
    again = rule_import(json.dumps(doc))
    assert again.unchanged == ["cn-report"] and not again.created and not again.updated


@pytest.mark.parametrize(
    ("calendar", "rule", "error"),
    [
        (
            None,
            {"business_calendar": "nope"},
            "rule 'cn-report' field business_calendar: no business calendar named 'nope'",
        ),
        ({"country": "XX"}, {}, "calendar 'cn' field country:"),
        ({"weekend": "someday"}, {}, "calendar 'cn' field weekend:"),
        ({"overrides": [{"date": "31/12/2026", "kind": "closed", "reason": "x"}]}, {}, "date must be YYYY-MM-DD"),
        ({"overrides": [{"date": "2026-12-31", "kind": "holiday", "reason": "x"}]}, {}, "kind must be one of"),
        ({"overrides": [{"date": "2026-12-31", "kind": "closed", "reason": ""}]}, {}, "reason must be a text"),
    ],
)
def test_a_bad_calendar_is_refused_by_name_and_field_and_nothing_changes(calendar, rule, error):
    calendars = [{**CALENDAR, **calendar}] if calendar is not None else []
    with pytest.raises(RuleImportError) as refused:
        rule_import(json.dumps({"calendars": calendars, "rules": [{**RULE, **rule}]}))
    assert any(error in e for e in refused.value.errors), refused.value.errors
    assert not BusinessCalendar.objects.exists() and not TriggerRule.objects.exists()


# --- the admin ------------------------------------------------------------------------------


@pytest.fixture
def staff(client):
    client.force_login(get_user_model().objects.create_superuser("root", password="pw-123456789"))
    return client


def test_the_calendar_page_lists_overrides_rules_and_the_days_ahead(staff):
    cal = china()
    soon = timezone.now().date() + timedelta(days=3)
    CalendarOverride.objects.create(calendar=cal, date=soon, kind="closed", reason="Stock-take")
    make_rule("cn-report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", business_calendar=cal)
    page = staff.get(f"/admin/tasks/businesscalendar/{cal.pk}/change/").content.decode()
    assert "Stock-take" in page and "cn-report" in page and "chinesecalendar 1.11.0" in page
    assert f"{soon:%Y-%m-%d}" in page
    assert staff.get("/admin/tasks/businesscalendar/").status_code == 200


def test_a_calendar_is_added_in_the_admin_and_a_bad_one_gets_a_message(staff):
    form = {
        "name": "de",
        "country": "de",
        "subdivision": "",
        "weekend": "sat-sun",
        "uncertain_days": "hold",
        "description": "",
        "overrides-TOTAL_FORMS": "1",
        "overrides-INITIAL_FORMS": "0",
        "overrides-0-date": "2026-12-24",
        "overrides-0-kind": "closed",
        "overrides-0-reason": "Christmas Eve",
    }
    response = staff.post("/admin/tasks/businesscalendar/add/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    cal = BusinessCalendar.objects.get(name="de")
    assert cal.country == "DE" and cal.business_days().reason(date(2026, 12, 24)) == "Christmas Eve"
    refused = staff.post("/admin/tasks/businesscalendar/add/", {**form, "name": "xx", "country": "XX"})
    assert refused.status_code == 200 and "Country XX not available" in refused.content.decode()


# --- the API --------------------------------------------------------------------------------


@pytest.fixture
def api(db):
    from tests.support.api import api_for
    from tests.support.desk import make_user

    return api_for(make_user("root", superuser=True))


def test_the_api_lists_calendars_and_a_calendars_days(api):
    china()
    listed = api.get("/api/v1/calendars").json()
    assert [c["name"] for c in listed] == ["cn"] and listed[0]["library"] == "chinesecalendar 1.11.0"
    days = api.get("/api/v1/calendars/cn/days?from=2026-02-13&to=2026-02-16").json()["days"]
    assert [(d["date"], d["business_day"], d["kind"], d["name"]) for d in days] == [
        ("2026-02-13", True, "workday", ""),
        ("2026-02-14", True, "makeup", "Spring Festival"),
        ("2026-02-15", False, "holiday", "Spring Festival"),
        ("2026-02-16", False, "holiday", "Spring Festival"),
    ]
    assert days[1]["summary"] == "runs: 2026-02-14 is a make-up working day (Spring Festival)"
    assert api.get("/api/v1/calendars/cn/days?from=2027-01-04&to=2027-01-04").json()["days"][0]["covered"] is False


def test_a_calendar_is_put_read_and_deleted_through_the_api(api):
    body = {"country": "CN", "overrides": [{"date": "2026-12-31", "kind": "closed", "reason": "Year-end shutdown"}]}
    put = api.put("/api/v1/calendars/cn", body)
    assert put.status_code == 200, put.content
    assert put.json()["overrides"] == body["overrides"] and put.json()["library"] == "chinesecalendar 1.11.0"
    assert api.get("/api/v1/calendars/cn").json()["country"] == "CN"
    # A put replaces the overrides; without "overrides" it keeps them.
    api.put("/api/v1/calendars/cn", {"country": "CN", "overrides": []})
    assert not CalendarOverride.objects.exists()
    bad = api.put("/api/v1/calendars/cn", {"overrides": [{"date": "someday", "kind": "closed", "reason": "x"}]})
    assert bad.status_code == 400 and bad.json()["field"] == "overrides"
    assert "YYYY-MM-DD" in bad.json()["detail"]
    nul = api.put("/api/v1/calendars/cn", {"description": "a\x00b"})
    assert nul.status_code == 400 and "\x00" not in BusinessCalendar.objects.get().description
    assert api.get("/api/v1/calendars/c%00n").status_code == 404
    make_rule(
        "cn-report",
        kind="cron",
        cron="0 9 * * *",
        timezone="Asia/Shanghai",
        business_calendar=BusinessCalendar.objects.get(),
    )
    in_use = api.delete("/api/v1/calendars/cn")
    assert in_use.status_code == 409 and "cn-report" in in_use.json()["detail"]
    TriggerRule.objects.all().delete()
    assert api.delete("/api/v1/calendars/cn").status_code == 204
    assert api.get("/api/v1/calendars/cn").status_code == 404


@pytest.mark.parametrize(
    ("query", "status", "field"),
    [
        ("from=2026-02-30", 400, "from"),
        ("from=2026-02-13&to=2026-02-12", 400, "to"),
        ("from=2026-01-01&to=2027-12-31", 400, "to"),
        ("from=9999-12-31", 200, None),
    ],
)
def test_bad_calendar_queries_are_a_problem_never_a_500(api, query, status, field):
    china()
    response = api.get(f"/api/v1/calendars/cn/days?{query}")
    assert response.status_code == status, response.content
    if field:
        assert response.json()["field"] == field
    assert api.get("/api/v1/calendars/nope/days").status_code == 404


# --- staleness: lint, /healthz, alert -------------------------------------------------------


def test_the_rule_lint_warns_weeks_before_the_calendar_runs_out():
    rule = make_rule("cn-report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", business_calendar=china())
    facts = calendar_lint(rule, today=date(2026, 11, 20))
    assert facts["calendar_gap"] == date(2027, 1, 1)
    item = lint.rule_lint(lint.LintInput(**LINT_BASE, **facts))[-1]
    assert (item.check, item.status, item.reason.params["since"], item.reason.params["days"]) == (
        lint.CHECK_CALENDAR,
        lint.WARN,
        "2027-01-01",
        42,
    )
    known = lint.rule_lint(lint.LintInput(**LINT_BASE, **calendar_lint(rule, today=date(2026, 6, 1))))[-1]
    assert known.status == lint.PASS
    assert lint.CHECK_CALENDAR not in [i.check for i in lint.rule_lint(lint.LintInput(**LINT_BASE))]


@pytest.mark.parametrize(
    ("policy", "words"),
    [("hold", "wait for an operator's approval"), ("skip", "its rules do not run"), ("run", "as on an ordinary day")],
)
def test_the_lint_says_a_china_calendar_without_a_notice_keeps_the_laws_holidays(policy, words):
    # Past its data a mainland-China calendar still knows the law's holidays and leaves the
    # uncertain days to its policy.
    cal = BusinessCalendar.objects.create(name="c", country="CN", uncertain_days=policy)
    rule = make_rule("r", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", business_calendar=cal)
    item = lint.rule_lint(lint.LintInput(**LINT_BASE, **calendar_lint(rule, today=date(2026, 11, 20))))[-1]
    assert (item.status, item.reason.code) == (lint.WARN, lint.CALENDAR_NO_NOTICE)
    said = sentences.say(item.reason)
    assert words in said
    assert "the holidays the law fixes" in said and "every weekday" not in said
    with translation.override("zh-hans"):
        zh = sentences.say(item.reason)
    assert "法定节假日" in zh and not any(w in zh for w in ("approval", "ordinary", "weekday"))


def test_past_its_data_any_other_calendar_counts_every_weekday_as_a_business_day():
    facts = {"calendar": "us", "calendar_source": "holidays", "calendar_gap": date(2027, 1, 1)}
    item = lint.rule_lint(lint.LintInput(**LINT_BASE, **facts, today=date(2026, 11, 20)))[-1]
    assert (item.status, item.reason.code) == (lint.WARN, lint.CALENDAR_NO_DATA)
    assert "counts every weekday as a business day" in sentences.say(item.reason)


@pytest.mark.parametrize(
    ("cron", "weekdays", "limited"),
    [("0 9 * * *", "", False), ("0 9 * * 1-5", "", True), ("0 9 * * *", "mon-fri", True)],
)
def test_the_rule_lint_warns_when_cron_or_weekdays_would_skip_make_up_saturdays(cron, weekdays, limited):
    rule = make_rule(
        "cn-report", kind="cron", cron=cron, weekdays=weekdays, timezone="Asia/Shanghai", business_calendar=china()
    )
    facts = calendar_lint(rule, today=date(2026, 6, 1))
    assert facts["days_limited"] is limited
    item = lint.rule_lint(lint.LintInput(**LINT_BASE, **facts))[-1]
    assert item.reason.code == (lint.CALENDAR_DAYS_LIMITED if limited else lint.CALENDAR_KNOWN)


def test_only_calendars_in_use_by_enabled_rules_are_reported():
    used, unused = china("cn"), china("cn-spare")
    make_rule("cn-report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", business_calendar=used)
    assert calendar_model.calendar_gaps(today=date(2026, 11, 20)) == [
        {
            "id": used.id,
            "calendar": "cn",
            "source": "chinesecalendar 1.11.0",
            "no_data_from": "2027-01-01",
            "days_left": 42,
            "rules": ["cn-report"],
            "uncertain_days": "hold",
        }
    ]
    assert calendar_model.calendar_gaps(today=date(2026, 6, 1)) == []
    assert unused.name not in json.dumps(calendar_model.calendar_gaps(today=date(2026, 11, 20)))


def test_the_alert_escalates_as_the_date_approaches_each_step_once_per_calendar_and_year():
    make_rule("cn-report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", business_calendar=china())

    def check(now: datetime) -> list[tuple[str, str]]:
        # The real check: its gaps as /healthz reads them at `now`, every minute for three minutes.
        found = []
        for minute in range(3):
            at = now + timedelta(minutes=minute)
            for alert in alert_check_calendars(gaps=calendar_model.calendar_gaps(today=at.date()), now=at):
                found.append((alert.payload["step"], alert.severity))
        return found

    assert check(datetime(2026, 11, 16, 8, 0, tzinfo=UTC)) == []  # 46 days: beyond the horizon
    assert check(datetime(2026, 11, 20, 8, 0, tzinfo=UTC)) == [("notice", alert_rules.NOTICE)]
    assert check(datetime(2026, 12, 4, 8, 0, tzinfo=UTC)) == []
    assert check(datetime(2026, 12, 5, 0, 0, tzinfo=UTC)) == [("warning", alert_rules.WARNING)]
    assert check(datetime(2026, 12, 24, 23, 59, tzinfo=UTC)) == [("urgent", alert_rules.URGENT)]
    assert check(datetime(2026, 12, 31, 8, 0, tzinfo=UTC)) == []
    assert check(datetime(2027, 1, 1, 0, 0, tzinfo=UTC)) == [("today", alert_rules.URGENT)]
    assert check(datetime(2027, 1, 4, 0, 0, tzinfo=UTC)) == []  # the gap is now 4 Jan: the same year
    alerts = Alert.objects.filter(kind=alert_rules.CALENDAR_NO_DATA, channel=None).order_by("created_at")
    assert [a.payload["days_left"] for a in alerts] == [42, 27, 7, 0]
    first = alerts[0].payload
    assert "has no data from 2027-01-01" in first["title"] and first["rule"] == "cn-report"
    assert first["uncertain_days"] == "hold"


def test_a_calendar_steps_alerts_reach_channels_by_their_minimum_severity():
    from deadletters.models import AlertChannel

    AlertChannel.objects.create(name="mail", kind="log", min_severity=alert_rules.WARNING)
    make_rule("cn-report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", business_calendar=china())
    for now in (datetime(2026, 11, 20, tzinfo=UTC), datetime(2026, 12, 5, tzinfo=UTC)):
        alert_check_calendars(gaps=calendar_model.calendar_gaps(today=now.date()), now=now)
    sent = Alert.objects.filter(kind=alert_rules.CALENDAR_NO_DATA, channel__name="mail")
    assert [a.payload["step"] for a in sent] == ["warning"]  # the notice stays with notice channels


def test_healthz_names_a_calendar_running_out_and_stays_ok(client, monkeypatch):
    from runs.models import SchedulerTick

    today = timezone.now().date()
    end = today + timedelta(days=10)

    def ending(country, subdivision=""):
        return lambda d: business_days.LibraryDay(None) if d <= end else None

    monkeypatch.setattr(calendar_model, "library_lookup", ending)
    cal = china()
    make_rule("cn-report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", business_calendar=cal)
    SchedulerTick.objects.update_or_create(name="scheduler", defaults={"last_tick_at": timezone.now()})
    client.force_login(get_user_model().objects.create_user("oncall", password="pw-123456789", is_staff=True))
    body = client.get("/healthz").json()
    assert body["ok"] is True, body
    assert body["calendars_without_data"] == [
        {
            "id": cal.id,
            "calendar": "cn",
            "source": "chinesecalendar 1.11.0",
            "no_data_from": (end + timedelta(days=1)).isoformat(),
            "days_left": 11,
            "rules": ["cn-report"],
            "uncertain_days": "hold",
        }
    ]


def test_operators_edit_calendars_and_viewers_only_read_them():
    from tests.support.api import api_for
    from tests.support.desk import make_user

    operator = api_for(make_user("op", "Operators"))
    viewer = api_for(make_user("view", "Viewers"))
    assert operator.put("/api/v1/calendars/cn", {"country": "CN"}).status_code == 200
    assert viewer.get("/api/v1/calendars/cn").status_code == 200
    assert viewer.put("/api/v1/calendars/cn", {"country": "DE"}).status_code == 403
    assert operator.delete("/api/v1/calendars/cn").status_code == 403  # an administrator's call
