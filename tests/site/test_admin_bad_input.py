"""No admin page or desk button answers a 500, whatever the id, the query or the
form says; as a superuser and as an Operator, on SQLite and PostgreSQL."""

import pytest
from django.urls import reverse

from runs.models import TaskRun
from tasks.models import TriggerRule
from tests.support.desk import (  # noqa: F401 - fixtures
    client_for,
    daily_report,
    make_failed_run,
    make_user,
    operator,
    operator_client,
)
from tests.support.rules import make_rule, rule_form_post

pytestmark = pytest.mark.django_db

RULE_BUTTONS = ("run_now", "trial", "pause", "backfill", "explain")
RUN_BUTTONS = ("retry", "cancel", "release")
TICKET_BUTTONS = ("replay", "close", "assign")
BAD_IDS = ("999999", "abc", "1%00", "-1", "9" * 30)
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture(params=["superuser", "operator"])
def client(request, db):
    if request.param == "superuser":
        return client_for(make_user("root", superuser=True))
    return client_for(make_user("olga", "Operators"))


def _button_urls(object_id: str) -> list[str]:
    urls = [reverse(f"admin:tasks_triggerrule_{n}", args=["0"]).replace("/0/", f"/{object_id}/") for n in RULE_BUTTONS]
    urls += [reverse(f"admin:runs_taskrun_{n}", args=["0"]).replace("/0/", f"/{object_id}/") for n in RUN_BUTTONS]
    urls += [
        reverse(f"admin:deadletters_deadletter_{n}", args=["0"]).replace("/0/", f"/{object_id}/")
        for n in TICKET_BUTTONS
    ]
    return urls


@pytest.mark.parametrize("object_id", BAD_IDS)
def test_a_desk_button_for_an_unknown_or_malformed_id_is_a_404_or_a_message(client, object_id):
    for url in _button_urls(object_id):
        for method in ("get", "post"):
            response = getattr(client, method)(url, {"reason": "x"} if method == "post" else None)
            assert response.status_code in (302, 403, 404), (method, url, response.status_code)


@pytest.mark.parametrize("object_id", BAD_IDS)
def test_a_change_page_for_an_unknown_or_malformed_id_is_not_a_500(client, object_id):
    for name in ("tasks_triggerrule", "runs_taskrun", "deadletters_deadletter", "tasks_triggersource"):
        url = reverse(f"admin:{name}_change", args=["0"]).replace("/0/", f"/{object_id}/")
        assert client.get(url).status_code in (302, 403, 404), url


def test_explain_on_an_event_rule_says_it_has_no_slots(client):
    rule = make_rule("orders-in", kind="event", dedupe_key_template="{object_id}:{action}")
    url = reverse("admin:tasks_triggerrule_explain", args=[rule.pk])

    for query in ({}, {"slot": "2026-12-01 09:00"}, {"slot": "garbage"}):
        response = client.get(url, query)
        assert response.status_code == 200, query
        assert "event rule" in response.content.decode()
    assert client.get(reverse("admin:tasks_triggerrule_change", args=[rule.pk])).status_code == 200


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (DEEP, "nested"),
        ('{"a": ' * 40 + "1" + "}" * 40, "nested"),
        ('{"channel": "e\\u0000mail"}', "NUL"),
        ('{"channel": "email", "n": 1' + "0" * 5000 + "}", "number"),
    ],
    ids=["100000-deep", "40-deep", "nul", "huge-number"],
)
def test_bad_json_params_are_a_form_message_and_nothing_is_saved(client, params, message):
    response = client.post(reverse("admin:tasks_triggerrule_add"), rule_form_post(params=params))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not TriggerRule.objects.exists()


@pytest.mark.parametrize("field", ["reason", "name", "cron", "dedupe_key_template"])
def test_a_nul_byte_in_a_text_field_is_a_form_message(client, field):
    response = client.post(reverse("admin:tasks_triggerrule_add"), rule_form_post(**{field: "a\x00b"}))
    assert response.status_code == 200
    assert not TriggerRule.objects.exists()


def test_huge_inputs_are_a_form_message(client):
    response = client.post(
        reverse("admin:tasks_triggerrule_add"),
        rule_form_post(reason="r" * 200_000, max_attempts="9" * 40, jitter_max="1e999", name="n" * 10_000),
    )
    assert response.status_code == 200
    assert not TriggerRule.objects.exists()


@pytest.mark.parametrize(
    "changelist",
    [
        "tasks_triggerrule",
        "tasks_triggersource",
        "tasks_eventdelivery",
        "runs_taskrun",
        "runs_decision",
        "deadletters_deadletter",
        "deadletters_alert",
    ],
)
@pytest.mark.parametrize("query", [{"q": "a\x00b"}, {"q": "x" * 100_000}, {"rule__id__exact": "abc"}, {"o": "zz"}])
def test_a_changelist_with_a_nul_a_huge_or_a_malformed_query_is_not_a_500(client, changelist, query):
    response = client.get(reverse(f"admin:{changelist}_changelist"), query)
    assert response.status_code in (200, 302, 400, 403), response.status_code


def test_a_nul_byte_in_a_desk_form_is_a_message(client):
    run = make_failed_run()
    response = client.post(reverse("admin:runs_taskrun_retry", args=[run.pk]), {"reason": "a\x00b"})
    assert response.status_code in (200, 403)
    assert TaskRun.objects.get(pk=run.pk).state == TaskRun.State.FAILED


HOSTILE = ["a\x00b", "9" * 40, "9999-12-31 23:59", "0001-01-01 00:00", "x" * 100_000, "-1", "1e999", "[[[["]


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/Los_Angeles"])
@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_every_desk_form_of_an_existing_object_answers_hostile_values_without_a_500(client, value, zone):
    rule = daily_report(timezone=zone)
    run = make_failed_run(rule=rule)
    ticket = run.deadletters.get()
    posts = [
        (reverse("admin:tasks_triggerrule_run_now", args=[rule.pk]), {"slot": value, "biz_key": "", "reason": "r"}),
        (reverse("admin:tasks_triggerrule_run_now", args=[rule.pk]), {"slot": "", "biz_key": value, "reason": "r"}),
        (reverse("admin:tasks_triggerrule_trial", args=[rule.pk]), {"slot": "", "biz_key": value, "reason": value}),
        (reverse("admin:tasks_triggerrule_pause", args=[rule.pk]), {"reason": value}),
        (
            reverse("admin:tasks_triggerrule_backfill", args=[rule.pk]),
            {"start": value, "end": value, "spacing_seconds": value, "reason": "r"},
        ),
        (reverse("admin:tasks_triggerrule_backfill", args=[rule.pk]), {"token": value, "confirm": "yes"}),
        (reverse("admin:runs_taskrun_retry", args=[run.pk]), {"reason": value}),
        (reverse("admin:runs_taskrun_cancel", args=[run.pk]), {"reason": value}),
        (reverse("admin:deadletters_deadletter_assign", args=[ticket.pk]), {"owner": value, "reason": value}),
        (reverse("admin:deadletters_deadletter_close", args=[ticket.pk]), {"note": value}),
    ]
    for url, data in posts:
        assert client.post(url, data).status_code in (200, 302, 403), (url, data)
    gets = [
        (reverse("admin:tasks_triggerrule_explain", args=[rule.pk]), {"slot": value}),
        (
            reverse("admin:tasks_triggerrule_preview"),
            {"kind": "cron", "cron": value, "timezone": value, "interval_seconds": value},
        ),
        (
            reverse("admin:tasks_triggerrule_preview"),
            {"kind": "interval", "interval_seconds": value, "timezone": "UTC"},
        ),
        (reverse("admin:tasks_triggerrule_preview"), {"kind": "once", "run_at_0": value, "run_at_1": value}),
    ]
    for url, query in gets:
        assert client.get(url, query).status_code in (200, 400, 403), (url, query)


@pytest.mark.parametrize(("day", "zone"), [("0001-01-01", "Asia/Tokyo"), ("9999-12-31", "Pacific/Pago_Pago")])
def test_a_one_time_run_at_at_the_ends_of_the_calendar_is_a_form_message(client, day, zone):
    data = rule_form_post(kind="once", cron="", run_at_0=day, run_at_1="23:59" if day.startswith("9999") else "00:00")
    response = client.post(reverse("admin:tasks_triggerrule_add"), {**data, "timezone": zone})
    assert response.status_code == 200
    assert not TriggerRule.objects.exists()
