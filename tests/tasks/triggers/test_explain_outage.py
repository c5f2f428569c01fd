"""Explain after an outage names every cause it knows, one sentence each: the scheduler that reached
the slot late (down or stalled), then the catch-up policy that did not run it (none, max delay,
latest only, max count), and a pause in force. A slot 112 s late against a max delay of 300 s under
catch-up none was explained as "missed beyond the catch-up window", which was wrong twice."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone, translation

from runs.models import Decision
from tasks.rules.explain import (
    CATCHUP_CAPPED_AT,
    CATCHUP_LATEST_ONLY,
    CATCHUP_OFF,
    CATCHUP_TOO_LATE,
    LATE_TICK,
    missed_causes,
)
from tasks.triggers.explain import slot_explain
from tasks.triggers.operator import rule_pause
from tasks.triggers.scheduler import scheduler_tick
from tests.support.desk import make_user
from tests.support.rules import make_rule

# 09:00 Shanghai on the day Berlin's clocks go back: the zones differ, UTC decides.
SLOT = datetime(2026, 10, 25, 1, 0, tzinfo=UTC)
BACK = SLOT + timedelta(seconds=112)


def codes(reasons):
    return [r.code for r in reasons]


@pytest.mark.parametrize(
    ("reason", "details", "expected"),
    [
        ("missed", {"late_seconds": 112.0, "catchup": "none", "max_delay_seconds": 300}, [LATE_TICK, CATCHUP_OFF]),
        (
            "missed",
            {"late_seconds": 4000, "catchup": "latest", "max_delay_seconds": 3600},
            [LATE_TICK, CATCHUP_TOO_LATE],
        ),
        ("missed", {"late_seconds": 4000, "catchup": "all", "max_delay_seconds": 3600}, [LATE_TICK, CATCHUP_TOO_LATE]),
        (
            "superseded",
            {"late_seconds": 120, "catchup": "latest", "max_delay_seconds": 3600},
            [LATE_TICK, CATCHUP_LATEST_ONLY],
        ),
        ("catchup_capped", {"late_seconds": 120, "catchup": "all", "max_count": 3}, [LATE_TICK, CATCHUP_CAPPED_AT]),
        ("calendar", {"why": "weekend"}, []),
        ("missed", {}, []),  # an old record without figures: nothing invented
    ],
)
def test_each_cause_the_decision_records_is_named(reason, details, expected):
    assert codes(missed_causes(reason=reason, details=details, decided_at=BACK)) == expected


def test_the_figures_are_the_recorded_ones():
    details = {"late_seconds": 4000.5, "catchup": "latest", "max_delay_seconds": 3600}
    [late, too_late] = missed_causes(reason="missed", details=details, decided_at=BACK)
    assert late.params == {"late": "4000.5", "at": BACK}
    assert too_late.params == {"late": "4000.5", "max_delay": "3600"}


@pytest.mark.django_db
@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_explain_after_an_outage_names_the_downtime_and_catch_up_none_and_the_pause(lang):
    rule = make_rule(
        "nightly", cron="0 9 * * *", timezone="Asia/Shanghai", catchup="none", catchup_max_delay_seconds=300, due=SLOT
    )
    # The scheduler was down from before 09:00 until 112 s after it: the first tick is late.
    scheduler_tick(now=BACK)
    decision = Decision.objects.get(rule=rule, slot=SLOT)
    assert decision.reason == "missed" and decision.details["late_seconds"] == 112.0
    rule_pause(rule=rule, actor=make_user("olga"), now=BACK + timedelta(minutes=1), reason="upstream outage")
    rule.refresh_from_db()
    with translation.override(lang):
        found = slot_explain(rule=rule, slot=SLOT, now=timezone.now())
    summary = found["summary"]
    if lang == "en":
        assert "catch-up window" not in summary
        assert "no scheduler tick reached this slot until 112 s after its time, at 2026-10-25 01:01:52 UTC" in summary
        assert "catch-up is off for this rule (none)" in summary
        assert "the rule is paused since" in summary and "upstream outage" in summary
        assert not summary.rstrip().endswith("the decision")
    else:
        assert "112 秒" in summary and "补跑" in summary and "暂停" in summary
