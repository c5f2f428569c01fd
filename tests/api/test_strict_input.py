"""Strict input: a boolean is not a number nor a string, a number is not a string, and ids and
counts are ASCII digits only (full-width digits are not digits here)."""

import pytest

from deadletters.models import DeadLetter
from runs.models import TaskRun
from tests.support.api import assert_problem
from tests.support.desk import daily_report, make_failed_run

pytestmark = [pytest.mark.django_db, pytest.mark.backend]

ONCE = {"skill": "harness.noop", "delay_seconds": 60, "idempotency_key": "k"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"delay_seconds": True}, "delay_seconds"),
        ({"delay_seconds": False}, "delay_seconds"),
        ({"delay_seconds": "60"}, "delay_seconds"),
        ({"idempotency_key": 7}, "idempotency_key"),
        ({"idempotency_key": True}, "idempotency_key"),
        ({"skill": 1}, "skill"),
        ({"reason": 5}, "reason"),
        ({"reason": False}, "reason"),
        ({"params": []}, "params"),
        ({"delay_seconds": None, "run_at": 1700000000}, "run_at"),
    ],
)
def test_a_value_of_the_wrong_json_type_is_400_naming_it(admin_api, change, field):
    response = admin_api.post("/api/v1/runs", {**ONCE, **change})
    assert_problem(response, 400, field=field)
    assert not TaskRun.objects.exists()


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/v1/rules/daily-report/run-now", {"biz_key": 5}, "biz_key"),
        ("/api/v1/rules/daily-report/run-now", {"slot": True}, "slot"),
        ("/api/v1/rules/daily-report/pause", {"reason": 1}, "reason"),
        ("/api/v1/deadletters/{ticket}/close", {"note": 0}, "note"),
        ("/api/v1/deadletters/{ticket}/assign", {"owner": 1}, "owner"),
        ("/api/v1/runs/{run}/cancel", {"reason": True}, "reason"),
    ],
)
def test_every_input_serializer_is_strict(admin_api, url, body, field):
    run = make_failed_run(rule=daily_report())
    ticket = DeadLetter.objects.get(run=run)
    assert_problem(admin_api.post(url.format(ticket=ticket.id, run=run.id), body), 400, field=field)


# Each spelling turns an ASCII id into one that str.isdigit() or int() would also take.
SPELLINGS = {
    "full-width": lambda n: n.translate({ord("0") + d: 0xFF10 + d for d in range(10)}),
    "arabic-indic": lambda n: n.translate({ord("0") + d: 0x0660 + d for d in range(10)}),
    "mathematical": lambda n: n.translate({ord("0") + d: 0x1D7CE + d for d in range(10)}),
    "superscript": lambda n: n.translate({ord("0"): "⁰", ord("1"): "¹", ord("2"): "²", ord("3"): "³"}) + "¹",
    "newline": lambda n: n + "%0A",
    "space": lambda n: " " + n,
    "plus": lambda n: "+" + n,
    "decimal": lambda n: n + ".0",
}


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_run_or_ticket_id_in_anything_but_ascii_digits_is_404(admin_api, spelling):
    run = make_failed_run(rule=daily_report())
    ticket = DeadLetter.objects.get(run=run)
    for path, found in (("/api/v1/runs/{}", run.id), ("/api/v1/deadletters/{}", ticket.id)):
        assert admin_api.get(path.format(found)).status_code == 200
        assert_problem(admin_api.get(path.format(SPELLINGS[spelling](str(found)))), 404)


@pytest.mark.parametrize("count", ["\uff15", "\u0663", "3.0", "-3", "+3"])
def test_a_preview_count_in_anything_but_ascii_digits_is_400(admin_api, count):
    daily_report()
    assert_problem(admin_api.get("/api/v1/rules/daily-report/preview", count=count), 400, field="count")


@pytest.mark.parametrize(("param", "value"), [("limit", "\uff15"), ("limit", "\u0665"), ("limit", "\u00b2")])
def test_a_page_size_in_anything_but_ascii_digits_is_400(admin_api, param, value):
    assert_problem(admin_api.get("/api/v1/runs", **{param: value}), 400, field=param)


def test_a_run_search_by_id_takes_ascii_digits_only(admin_api):
    run = make_failed_run(rule=daily_report())
    assert [r["id"] for r in admin_api.get("/api/v1/runs", q=str(run.id)).json()["results"]] == [run.id]
    assert admin_api.get("/api/v1/runs", q=chr(0xFF10 + run.id)).json()["results"] == []
