"""Rule evaluation, pure: calendar, business hours, start window, readiness, overlap; catch-up all."""

from datetime import UTC, date, datetime, time, timedelta

import pytest

from tasks.rules import catchup
from tasks.rules.evaluation import (
    CALENDAR,
    DECIDE,
    FAIL,
    HOLD,
    NOT_READY,
    NOT_READY_EXPIRED,
    OUTSIDE_WINDOW,
    OVERLAP,
    RUN,
    Facts,
    GuardError,
    Guards,
    describe_slot,
    evaluate_slot,
    next_opening,
    parse_dates,
    parse_weekdays,
    ready_deadline_at,
)
from tasks.sentences import say

BERLIN = "Europe/Berlin"
NY = "America/New_York"


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


# 2026-12-01 is a Tuesday. Berlin is UTC+1 in December.
TUE_0800_BERLIN = utc(2026, 12, 1, 7, 0)


def test_it_runs_an_unguarded_slot_at_once():
    v = evaluate_slot(Guards(), TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=Facts())
    assert (v.action, v.run_after) == (RUN, TUE_0800_BERLIN)


@pytest.mark.parametrize(
    ("weekdays", "expected"),
    [("mon-fri", RUN), ("tue", RUN), ("sat,sun", DECIDE), ("wed-mon", DECIDE), ("sun-tue", RUN), ("", RUN)],
)
def test_it_applies_allowed_weekdays_in_the_rule_zone(weekdays, expected):
    g = Guards(timezone=BERLIN, weekdays=parse_weekdays(weekdays))
    v = evaluate_slot(g, TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=Facts())
    assert v.action == expected
    if expected == DECIDE:
        assert (v.reason, v.details["weekday"]) == (CALENDAR, "tue")


def test_it_reads_the_weekday_on_the_rule_zone_calendar_not_utc():
    # 23:30 UTC Monday is 08:30 Tuesday in Tokyo.
    slot = utc(2026, 11, 30, 23, 30)
    assert (
        evaluate_slot(
            Guards(timezone="Asia/Tokyo", weekdays=parse_weekdays("tue")), slot, now=slot, facts=Facts()
        ).action
        == RUN
    )
    assert (
        evaluate_slot(Guards(timezone="UTC", weekdays=parse_weekdays("tue")), slot, now=slot, facts=Facts()).action
        == DECIDE
    )


def test_it_skips_excluded_dates_with_a_calendar_decision():
    g = Guards(timezone=BERLIN, excluded_dates=parse_dates(["2026-12-01"]))
    v = evaluate_slot(g, TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=Facts())
    assert (v.action, v.reason, v.details["date"]) == (DECIDE, CALENDAR, "2026-12-01")


HOURS = {"hours_start": time(9, 0), "hours_end": time(17, 0)}


def test_it_defers_a_slot_before_business_hours_to_the_opening():
    g = Guards(timezone=BERLIN, outside_hours="defer", **HOURS)
    v = evaluate_slot(g, TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=Facts())
    assert (v.action, v.run_after) == (RUN, utc(2026, 12, 1, 8, 0))


def test_it_defers_an_evening_slot_past_the_weekend_and_excluded_days():
    friday_1800 = utc(2026, 12, 4, 17, 0)
    g = Guards(
        timezone=BERLIN,
        outside_hours="defer",
        weekdays=parse_weekdays("mon-fri"),
        excluded_dates=parse_dates(["2026-12-07"]),
        **HOURS,
    )
    v = evaluate_slot(g, friday_1800, now=friday_1800, facts=Facts())
    assert v.run_after == utc(2026, 12, 8, 8, 0)  # Tuesday 09:00 Berlin


def test_it_skips_or_runs_anyway_outside_business_hours_by_policy():
    skip = evaluate_slot(
        Guards(timezone=BERLIN, outside_hours="skip", **HOURS), TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=Facts()
    )
    assert (skip.action, skip.reason, skip.details["hours"]) == (DECIDE, OUTSIDE_WINDOW, "09:00-17:00")
    run = evaluate_slot(
        Guards(timezone=BERLIN, outside_hours="run", **HOURS), TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=Facts()
    )
    assert (run.action, run.run_after) == (RUN, TUE_0800_BERLIN)


def test_business_hours_end_is_exclusive():
    g = Guards(timezone="UTC", outside_hours="skip", **HOURS)
    assert evaluate_slot(g, utc(2026, 12, 1, 16, 59), now=utc(2026, 12, 1, 16, 59), facts=Facts()).action == RUN
    assert evaluate_slot(g, utc(2026, 12, 1, 17, 0), now=utc(2026, 12, 1, 17, 0), facts=Facts()).action == DECIDE
    assert evaluate_slot(g, utc(2026, 12, 1, 9, 0), now=utc(2026, 12, 1, 9, 0), facts=Facts()).action == RUN


def test_business_hours_follow_the_local_clock_across_dst():
    # 09:00 New York is 14:00 UTC in winter and 13:00 UTC in summer.
    g = Guards(timezone=NY, outside_hours="defer", **HOURS)
    winter = utc(2026, 3, 6, 12, 0)  # 07:00 EST, Friday
    summer = utc(2026, 3, 9, 11, 0)  # 07:00 EDT, Monday
    assert evaluate_slot(g, winter, now=winter, facts=Facts()).run_after == utc(2026, 3, 6, 14, 0)
    assert evaluate_slot(g, summer, now=summer, facts=Facts()).run_after == utc(2026, 3, 9, 13, 0)


@pytest.mark.parametrize(
    ("late", "expected"),
    [(timedelta(0), RUN), (timedelta(hours=2), RUN), (timedelta(hours=2, seconds=1), DECIDE)],
)
def test_it_enforces_the_start_window_relative_to_the_slot(late, expected):
    g = Guards(start_window=timedelta(hours=2))
    v = evaluate_slot(g, TUE_0800_BERLIN, now=TUE_0800_BERLIN + late, facts=Facts())
    assert v.action == expected
    if expected == DECIDE:
        assert (v.reason, v.details["why"]) == (OUTSIDE_WINDOW, "start window passed")


def test_a_deferral_beyond_the_start_window_is_outside_the_window():
    g = Guards(timezone=BERLIN, outside_hours="defer", start_window=timedelta(minutes=30), **HOURS)
    v = evaluate_slot(g, TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=Facts())
    assert (v.action, v.reason) == (DECIDE, OUTSIDE_WINDOW)


READY = {"depends_on": ("pipeline.raw_data.ready",), "ready_deadline": time(12, 0), "timezone": BERLIN}


def test_it_holds_a_slot_that_is_not_ready_and_rechecks_every_interval():
    g = Guards(not_ready_policy="wait", recheck=timedelta(minutes=5), **READY)
    facts = Facts(missing=("pipeline.raw_data.ready",))
    v = evaluate_slot(g, TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=facts)
    assert (v.action, v.reason) == (HOLD, NOT_READY)
    assert v.recheck_at == TUE_0800_BERLIN + timedelta(minutes=5)
    assert v.deadline == utc(2026, 12, 1, 11, 0)  # 12:00 Berlin
    # The last re-check is at the deadline itself, not after it.
    late = evaluate_slot(g, TUE_0800_BERLIN, now=utc(2026, 12, 1, 10, 58), facts=facts)
    assert late.recheck_at == utc(2026, 12, 1, 11, 0)


def test_it_expires_a_waiting_slot_at_the_deadline():
    g = Guards(not_ready_policy="wait", **READY)
    v = evaluate_slot(g, TUE_0800_BERLIN, now=utc(2026, 12, 1, 11, 0), facts=Facts(missing=READY["depends_on"]))
    assert (v.action, v.reason) == (DECIDE, NOT_READY_EXPIRED)
    assert v.details["missing"] == ["pipeline.raw_data.ready"]


def test_it_runs_a_ready_slot_and_skips_or_fails_by_policy():
    missing = Facts(missing=READY["depends_on"])
    assert evaluate_slot(Guards(**READY), TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=Facts()).action == RUN
    skip = evaluate_slot(Guards(not_ready_policy="skip", **READY), TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=missing)
    assert (skip.action, skip.reason) == (DECIDE, NOT_READY)
    fail = evaluate_slot(Guards(not_ready_policy="fail", **READY), TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=missing)
    assert (fail.action, fail.reason) == (FAIL, NOT_READY)


@pytest.mark.parametrize(
    ("slot", "deadline", "expected"),
    [
        (utc(2026, 12, 1, 7, 0), time(12, 0), utc(2026, 12, 1, 11, 0)),  # same local day
        (utc(2026, 12, 1, 12, 0), time(12, 0), utc(2026, 12, 2, 11, 0)),  # slot 13:00 local: next day
        (utc(2026, 12, 1, 11, 0), time(12, 0), utc(2026, 12, 1, 11, 0)),  # slot at the deadline
        (utc(2026, 3, 29, 0, 0), time(12, 0), utc(2026, 3, 29, 10, 0)),  # spring-forward day: CEST
    ],
)
def test_the_ready_deadline_is_the_next_local_deadline_at_or_after_the_slot(slot, deadline, expected):
    g = Guards(timezone=BERLIN, ready_deadline=deadline)
    assert ready_deadline_at(g, slot) == expected


def test_without_a_deadline_a_wait_gives_up_after_a_day():
    assert ready_deadline_at(Guards(), TUE_0800_BERLIN) == TUE_0800_BERLIN + timedelta(days=1)


def test_it_applies_the_overlap_policy():
    busy = Facts(active_runs=1)
    assert evaluate_slot(Guards(overlap="allow"), TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=busy).action == RUN
    skip = evaluate_slot(Guards(overlap="skip"), TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=busy)
    assert (skip.action, skip.reason) == (DECIDE, OVERLAP)
    buffer = evaluate_slot(Guards(overlap="buffer"), TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=busy)
    assert (buffer.action, buffer.reason) == (HOLD, OVERLAP)
    full = evaluate_slot(
        Guards(overlap="buffer"), TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=Facts(active_runs=1, buffered=True)
    )
    assert (full.action, full.reason) == (DECIDE, OVERLAP)
    # The buffered slot itself stays held until the active run ends, then runs.
    again = evaluate_slot(
        Guards(overlap="buffer"), TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=Facts(active_runs=1, held_as=OVERLAP)
    )
    assert again.action == HOLD
    assert (
        evaluate_slot(
            Guards(overlap="buffer"), TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=Facts(held_as=OVERLAP)
        ).action
        == RUN
    )


def test_the_calendar_is_checked_before_readiness_and_overlap():
    g = Guards(excluded_dates=frozenset({date(2026, 12, 1)}), overlap="skip", **READY)
    v = evaluate_slot(g, TUE_0800_BERLIN, now=TUE_0800_BERLIN, facts=Facts(missing=("x",), active_runs=3))
    assert v.reason == CALENDAR


def test_next_opening_is_none_when_the_calendar_never_opens():
    g = Guards(timezone="UTC", weekdays=frozenset(), **HOURS)
    assert next_opening(g, TUE_0800_BERLIN.astimezone(UTC)) is None


@pytest.mark.parametrize(
    ("text", "days"),
    [("mon-fri", {0, 1, 2, 3, 4}), ("Sat, Sun", {5, 6}), ("fri-mon", {4, 5, 6, 0}), ("wednesday", {2}), (" ", None)],
)
def test_it_parses_weekdays(text, days):
    assert parse_weekdays(text) == (frozenset(days) if days is not None else None)


@pytest.mark.parametrize("text", ["mon-", "funday", "mon-tue-wed", "1-5"])
def test_it_rejects_bad_weekdays_naming_the_part(text):
    with pytest.raises(GuardError) as caught:
        parse_weekdays(text)
    assert text in say(caught.value.reason) and "mon-fri" in say(caught.value.reason)


@pytest.mark.parametrize("value", ["2026-12-25", ["2026-13-01"], [20261225], ["25.12.2026"]])
def test_it_rejects_bad_excluded_dates(value):
    with pytest.raises(GuardError) as caught:
        parse_dates(value)
    assert "YYYY-MM-DD" in say(caught.value.reason) or "JSON list" in say(caught.value.reason)


def test_describe_slot_says_what_the_static_guards_do():
    g = Guards(timezone=BERLIN, outside_hours="defer", weekdays=parse_weekdays("mon-fri"), **HOURS)
    assert say(describe_slot(g, TUE_0800_BERLIN)) == "deferred to 2026-12-01 09:00 CET"
    assert say(describe_slot(g, utc(2026, 12, 1, 9, 0))) == "runs"
    assert say(describe_slot(g, utc(2026, 12, 5, 9, 0))) == "no run: calendar (weekday sat not allowed)"


# --- catch-up "all": cap, pacing, approval ------------------------------------------------------

T0 = utc(2026, 3, 1, 0, 0)
GRACE = timedelta(seconds=10)


def test_catchup_all_runs_the_most_recent_max_count_and_caps_the_rest():
    slots = [T0 + timedelta(minutes=m) for m in range(720)]  # a 12-hour outage, every minute
    now = slots[-1] + timedelta(minutes=1)
    plans = catchup.plan_due_slots(
        slots, now=now, catchup="all", max_delay=timedelta(hours=13), grace=GRACE, complete=True, max_count=5
    )
    actions = [p.action for p in plans]
    assert actions.count(catchup.CATCHUP) == 5
    assert [p.slot for p in plans if p.action == catchup.CATCHUP] == slots[-5:]
    assert actions.count(catchup.CAPPED) == 715


def test_catchup_all_records_slots_beyond_the_max_delay_as_missed():
    slots = [T0 + timedelta(minutes=m) for m in range(10)]
    now = slots[-1] + timedelta(minutes=1)
    plans = catchup.plan_due_slots(
        slots, now=now, catchup="all", max_delay=timedelta(minutes=5), grace=GRACE, complete=True
    )
    assert {p.slot: p.action for p in plans} == {
        s: (catchup.CATCHUP if now - s <= timedelta(minutes=5) else catchup.MISSED) for s in slots
    }


def test_catchup_all_caps_an_incomplete_batch_since_later_slots_are_more_recent():
    slots = [T0 + timedelta(minutes=m) for m in range(10)]
    plans = catchup.plan_due_slots(
        slots,
        now=T0 + timedelta(hours=1),
        catchup="all",
        max_delay=timedelta(hours=2),
        grace=GRACE,
        complete=False,
        max_count=3,
    )
    assert {p.action for p in plans} == {catchup.CAPPED}


def test_catchup_all_keeps_on_time_slots_on_time():
    slots = [T0, T0 + timedelta(minutes=1)]
    now = slots[-1]
    plans = catchup.plan_due_slots(
        slots, now=now, catchup="all", max_delay=timedelta(hours=1), grace=GRACE, complete=True, max_count=1
    )
    assert [p.action for p in plans] == [catchup.CATCHUP, catchup.RUN]


def test_pace_spaces_catch_up_runs():
    slots = [T0 + timedelta(minutes=m) for m in range(5)]
    now = T0 + timedelta(hours=12)
    paced = catchup.pace(slots, now=now, spacing=timedelta(minutes=1))
    assert [paced[s] for s in slots] == [now + timedelta(minutes=i) for i in range(5)]


@pytest.mark.parametrize(
    ("late", "threshold", "expected"), [(5, None, False), (5, 5, False), (6, 5, True), (1, 0, True)]
)
def test_approval_is_needed_above_the_threshold(late, threshold, expected):
    assert catchup.needs_approval(late, threshold=threshold) is expected
