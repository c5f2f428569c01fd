# ruff: noqa: F811  (pytest fixtures imported from tests.support.desk are redefined as arguments)
# ruff: noqa: RUF001  (a full-width date is one of the bad inputs)
"""The rule form's live preview with the chosen business calendar and from a chosen day, and the
API's preview from a day: the fires say which run and which a holiday or an uncertain day skips,
in the same words as the saved rule's preview (tasks/admin/rule_preview.py)."""

import io

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tasks.models import BusinessCalendar, CalendarOverride
from tests.support.api import api_for, assert_problem
from tests.support.desk import daily_report, operator, operator_client, viewer, viewer_client  # noqa: F401
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

URL = "admin:tasks_triggerrule_preview"
DAILY = {"kind": "cron", "cron": "0 9 * * *", "timezone": "Asia/Shanghai"}


def china(**over) -> BusinessCalendar:
    return BusinessCalendar.objects.create(**{"name": "cn", "country": "CN", **over})


def guards(client, **query) -> list[str]:
    response = client.get(reverse(URL), query)
    assert response.status_code == 200, response.content
    return [f["guards"] for f in response.json()["fires"]]


def test_the_add_forms_preview_says_which_spring_festival_fires_run(viewer_client):
    # 2026's notice: Sat 14 February is a make-up working day, 15 to 23 February the break.
    said = guards(viewer_client, **DAILY, business_calendar=china().id, **{"from": "2026-02-14"})
    assert said[0] == "runs: 2026-02-14 is a make-up working day (Spring Festival)"
    assert said[1:] == [f"no run: 2026-02-{d}: Spring Festival (calendar cn)" for d in range(15, 24)]


@pytest.mark.parametrize(
    ("policy", "uncertain"),
    [
        ("hold", "runs once approved (the calendar holds uncertain days)"),
        ("skip", "no run (the calendar skips uncertain days)"),
        ("run", "runs (the calendar runs uncertain days)"),
    ],
)
def test_in_a_year_without_a_notice_it_names_the_laws_holidays_and_the_policy(viewer_client, policy, uncertain):
    # 2035 has no notice in any library: 除夕 is 7 February; the weekdays before it may be bridged.
    said = guards(viewer_client, **DAILY, business_calendar=china(uncertain_days=policy).id, **{"from": "2035-02-05"})
    assert said[0] == (
        f"{uncertain}: 2035-02-05 may become a day off of Spring Festival; calendar cn has no notice for the year yet"
    )
    assert said[2] == (
        "no run: 2035-02-07: Spring Festival, a holiday fixed by law (calendar cn has no notice for the year yet)"
    )


def test_the_live_preview_speaks_as_the_saved_rules_preview(viewer_client):
    cal = china()
    CalendarOverride.objects.create(calendar=cal, date="2026-12-31", kind="closed", reason="Year-end shutdown")
    typed = guards(viewer_client, **DAILY, business_calendar=cal.id, **{"from": "2026-12-28"})
    rule = daily_report(timezone="Asia/Shanghai", business_calendar=cal)
    assert guards(viewer_client, **DAILY, rule=rule.pk, **{"from": "2026-12-28"}) == typed
    assert typed[3] == "no run: 2026-12-31 is closed: Year-end shutdown (calendar cn)"
    # The form's choice wins over the saved one: blank is no calendar, so Sunday runs.
    plain = guards(viewer_client, **DAILY, rule=rule.pk, business_calendar="", **{"from": "2027-01-03"})
    assert plain[0] == "runs"


def test_without_a_calendar_an_unsaved_rules_preview_has_no_guards_column(viewer_client):
    fires = viewer_client.get(reverse(URL), {**DAILY, "business_calendar": ""}).json()["fires"]
    assert len(fires) == 10 and not any("guards" in f for f in fires)


def test_the_preview_starts_on_the_chosen_day_in_the_rules_zone(viewer_client):
    fires = viewer_client.get(reverse(URL), {**DAILY, "cron": "0 0 * * *", "from": "2027-02-05"}).json()["fires"]
    # Midnight in Shanghai is 16:00 UTC the day before: the day's own first fire is listed.
    assert fires[0]["local"].startswith("Fri 2027-02-05 00:00:00")
    assert fires[0]["utc"].startswith("2027-02-04 16:00:00")


def test_a_one_time_rule_previewed_from_an_earlier_day_is_still_past(viewer_client):
    typed = {"kind": "once", "run_at_0": "2020-01-02", "run_at_1": "09:00", "timezone": "UTC", "from": "2019-12-01"}
    data = viewer_client.get(reverse(URL), typed).json()
    assert len(data["fires"]) == 1 and "already past" in data["description"]


@pytest.mark.parametrize(
    ("query", "field", "en", "zh"),
    [
        ({"from": "2027-2-5"}, "from", "YYYY-MM-DD", "YYYY-MM-DD"),
        ({"from": "２０２７-02-05"}, "from", "YYYY-MM-DD", "YYYY-MM-DD"),
        ({"from": "2027-02-30"}, "from", "YYYY-MM-DD", "YYYY-MM-DD"),
        ({"from": "9999-01-01"}, "from", "from the year 1900 to 9998", "1900 年到 9998 年"),
        ({"from": "0001-01-01"}, "from", "from the year 1900 to 9998", "1900 年到 9998 年"),
        ({"business_calendar": "999999"}, "business_calendar", "no such business calendar", "没有这个工作日历"),
        ({"business_calendar": "x\x00"}, "business_calendar", "no such business calendar", "没有这个工作日历"),
    ],
)
def test_a_bad_start_day_or_calendar_is_a_400_naming_the_field(viewer_client, query, field, en, zh):
    for language, words in (("en", en), ("zh-hans", zh)):
        response = viewer_client.get(reverse(URL), {**DAILY, **query}, headers={"accept-language": language})
        assert response.status_code == 400
        assert words in response.json()["errors"][field]


def test_the_live_preview_with_a_calendar_is_a_few_queries(viewer_client):
    cal = china()
    for n in range(20):
        CalendarOverride.objects.create(calendar=cal, date=f"2027-03-{n + 1:02d}", kind="closed", reason=f"r{n}")
    query = {**DAILY, "business_calendar": cal.id, "from": "2027-03-01"}
    viewer_client.get(reverse(URL), query)  # the session and the user, read once
    with CaptureQueriesContext(connection) as seen:
        said = guards(viewer_client, **query)
    assert said[0] == "no run: 2027-03-01 is closed: r0 (calendar cn)"
    # Bounded per keystroke: the calendar, its overrides and its country's notices, whatever their size.
    ours = [q["sql"] for q in seen.captured_queries if '"tasks_' in q["sql"]]
    assert len(ours) == 3, ours


def test_the_rule_page_has_a_start_day_next_to_its_preview(operator_client):
    rule = daily_report()
    page = operator_client.get(reverse("admin:tasks_triggerrule_change", args=[rule.pk])).content.decode()
    assert 'id="rule-preview-from"' in page and 'type="date"' in page
    add = operator_client.get(reverse("admin:tasks_triggerrule_add")).content.decode()
    assert 'id="rule-preview-from"' in add and "Preview from" in add


# --- the API ----------------------------------------------------------------------------------


@pytest.fixture
def api(operator):
    return api_for(operator)


def test_the_api_previews_from_a_chosen_day(api):
    make_rule("cn-report", **DAILY, business_calendar=china())
    rows = api.get("/api/v1/rules/cn-report/preview", count="3", **{"from": "2026-02-14"}).json()
    assert [r["local"][:10] for r in rows] == ["2026-02-14", "2026-02-15", "2026-02-16"]
    assert rows[0]["guards"].startswith("runs: 2026-02-14 is a make-up working day")
    assert rows[1]["guards"] == "no run: 2026-02-15: Spring Festival (calendar cn)"
    for bad in ("tomorrow", "2026-13-01", "9999-12-31", "2026-02-14T00:00"):
        body = assert_problem(api.get("/api/v1/rules/cn-report/preview", **{"from": bad}), 400, field="from")
        assert "YYYY-MM-DD" in body["detail"] or "1900" in body["detail"]


def test_the_api_schema_names_the_preview_start_day():
    schema = Client().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    params = schema["paths"]["/api/v1/rules/{name}/preview"]["get"]["parameters"]
    start = next(p for p in params if p["name"] == "from")
    assert start["in"] == "query" and start["schema"]["format"] == "date"


def test_the_cli_previews_from_a_chosen_day():
    make_rule("cn-report", **DAILY, business_calendar=china())
    out = io.StringIO()
    call_command("harness", "preview", "cn-report", "--next", "2", "--from", "2026-02-14", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Sat 2026-02-14 09:00") and "make-up working day" in lines[0]
    assert lines[1].startswith("Sun 2026-02-15 09:00") and "no run" in lines[1]
    with pytest.raises(CommandError, match="--from: a date written YYYY-MM-DD"):
        call_command("harness", "preview", "cn-report", "--from", "15/02/2026", stdout=out)
