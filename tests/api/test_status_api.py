"""GET /api/v1/status: the status board as data, missed and decided slots first-class."""

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Decision
from tests.support.api import PROBLEM
from tests.support.desk import make_failed_run
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db


def test_it_lists_rules_worst_first_with_missed_and_decided_slots(admin_api):
    now = timezone.now()
    fine = make_rule("fine", due=now + timedelta(minutes=5))
    missing = make_rule("missing", due=now + timedelta(minutes=5))
    failing = make_rule("failing", due=now + timedelta(minutes=5))
    make_failed_run(f"rule/{failing.pk}/slot/x", now=now, rule=failing)
    for minutes, reason in ((3, "missed"), (2, "missed"), (1, "calendar")):
        Decision.objects.create(rule=missing, slot=now - timedelta(minutes=minutes), reason=reason, created_at=now)

    body = admin_api.get("/api/v1/status").json()

    assert [r["name"] for r in body["rules"]] == ["failing", "missing", "fine"]
    assert [r["health"] for r in body["rules"]] == ["failing", "missed", "waiting"]
    missing_row = body["rules"][1]
    assert missing_row["missed_24h"] == 2 and missing_row["decided_24h"] == {"missed": 2, "calendar": 1}
    assert missing_row["last"]["kind"] == "decision" and missing_row["last"]["reason"] == "calendar"
    assert body["rules"][0]["open_tickets"] == 1 and body["rules"][0]["last"]["state"] == "failed"
    assert body["missed_24h"] == 2 and body["decided_24h"] == {"missed": 2, "calendar": 1}
    assert body["counts"]["failing"] == 1 and body["total"] == 3
    only = admin_api.get("/api/v1/status", health="missed").json()
    assert [r["name"] for r in only["rules"]] == ["missing"] and fine.pk not in [r["id"] for r in only["rules"]]


@pytest.mark.parametrize(
    ("params", "field"), [({"health": "bad"}, "health"), ({"page": "x"}, "page"), ({"page": "0"}, "page")]
)
def test_it_refuses_bad_filters_with_a_reason(admin_api, params, field):
    response = admin_api.get("/api/v1/status", **params)
    assert response.status_code == 400 and response["Content-Type"] == PROBLEM
    assert field in response.content.decode()
