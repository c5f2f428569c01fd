"""Freshness objectives, pure: the deadline of a slot (offset, wall time, DST, business days), the
duration estimate, and the status with its cause at a clock passed in, for every cause."""

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from tasks import sentences
from tasks.rules import objectives as obj
from tasks.rules.reasons import CODES

SH = "Asia/Shanghai"
NY = "America/New_York"


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def local(zone: str, *args, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=ZoneInfo(zone), fold=fold).astimezone(UTC)


class Weekdays:
    """A tiny business calendar of the shape the calendars will have: Monday to Friday, minus holidays."""

    def __init__(self, holidays=()):
        self.holidays = set(holidays)

    def is_business_day(self, day: date) -> bool:
        return day.weekday() < 5 and day not in self.holidays

    def next_business_day(self, day: date) -> date:
        day += timedelta(days=1)
        while not self.is_business_day(day):
            day += timedelta(days=1)
        return day


def wall(zone: str, at: time, repeat: str = "first") -> obj.Objective:
    return obj.Objective(kind=obj.WALL, timezone=zone, wall=at, dst_repeat=repeat)


def offset(zone: str, minutes: float) -> obj.Objective:
    return obj.Objective(kind=obj.OFFSET, timezone=zone, offset=timedelta(minutes=minutes))


# --- the deadline -----------------------------------------------------------------------------


def test_it_puts_an_offset_objective_at_slot_plus_elapsed_time_even_across_dst():
    # 01:30 EST on the fall-back night + 60 min is 01:30 EDT... elapsed, whatever the wall clock says.
    slot = local(NY, 2026, 11, 1, 0, 45)
    assert obj.objective_deadline(offset(NY, 60), slot) == slot + timedelta(minutes=60)
    spring = local(NY, 2026, 3, 8, 1, 30)
    assert obj.objective_deadline(offset(NY, 60), spring) == spring + timedelta(hours=1)


def test_it_puts_a_wall_objective_on_the_slots_local_day():
    slot = local(SH, 2026, 12, 2, 6, 0)
    assert obj.objective_deadline(wall(SH, time(9, 30)), slot) == local(SH, 2026, 12, 2, 9, 30)


def test_a_wall_time_already_past_at_the_slot_is_the_next_days():
    slot = local(SH, 2026, 12, 2, 10, 0)
    assert obj.objective_deadline(wall(SH, time(9, 30)), slot) == local(SH, 2026, 12, 3, 9, 30)


def test_a_wall_objective_in_a_spring_forward_gap_is_the_gaps_end():
    # New York 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 never happens.
    slot = local(NY, 2026, 3, 8, 1, 0)
    assert obj.objective_deadline(wall(NY, time(2, 30)), slot) == utc(2026, 3, 8, 7, 0)


@pytest.mark.parametrize(
    ("repeat", "expected"),
    [
        ("first", local(NY, 2026, 11, 1, 1, 30, fold=0)),
        ("last", local(NY, 2026, 11, 1, 1, 30, fold=1)),
        ("both", local(NY, 2026, 11, 1, 1, 30, fold=1)),
    ],
)
def test_a_wall_objective_in_a_repeated_hour_follows_the_rules_repeat_policy(repeat, expected):
    slot = local(NY, 2026, 11, 1, 0, 0)
    assert obj.objective_deadline(wall(NY, time(1, 30), repeat), slot) == expected


def test_a_slot_in_the_second_pass_never_gets_a_deadline_before_itself():
    slot = local(NY, 2026, 11, 1, 1, 40, fold=1)  # second pass, after the first 01:30 and the second
    got = obj.objective_deadline(wall(NY, time(1, 30)), slot)
    assert got == local(NY, 2026, 11, 2, 1, 30)


def test_a_business_day_objective_moves_a_weekend_slot_to_monday():
    # 2026-12-05 is a Saturday: the report of the Saturday slot is due Monday 09:30.
    slot = local(SH, 2026, 12, 5, 6, 0)
    got = obj.objective_deadline(wall(SH, time(9, 30)), slot, calendar=Weekdays())
    assert got == local(SH, 2026, 12, 7, 9, 30)


def test_a_business_day_objective_skips_a_holiday_and_a_past_wall_time():
    # Friday 10:00 slot, 09:30 already past; Monday is a holiday: Tuesday 09:30.
    slot = local(SH, 2026, 12, 4, 10, 0)
    got = obj.objective_deadline(wall(SH, time(9, 30)), slot, calendar=Weekdays({date(2026, 12, 7)}))
    assert got == local(SH, 2026, 12, 8, 9, 30)


def test_without_a_calendar_every_day_is_a_business_day():
    slot = local(SH, 2026, 12, 5, 6, 0)
    assert obj.objective_deadline(wall(SH, time(9, 30)), slot) == local(SH, 2026, 12, 5, 9, 30)


# --- the estimate -----------------------------------------------------------------------------


def test_a_new_rule_gets_the_default_estimate():
    e = obj.estimate_duration([(1.0, 2.0)])
    assert (e.queue_wait, e.run_time) == (obj.DEFAULT_QUEUE_WAIT, obj.DEFAULT_RUN_TIME)


def test_the_estimate_is_the_90th_percentile_of_each_part():
    samples = [(float(i), float(10 * i)) for i in range(1, 11)]  # 1..10 s wait, 10..100 s run
    e = obj.estimate_duration(samples)
    assert e.queue_wait == timedelta(seconds=9) and e.run_time == timedelta(seconds=90) and e.samples == 10


# --- the status ---------------------------------------------------------------------------------

SLOT = local(SH, 2026, 12, 2, 9, 0)
REPORT = wall(SH, time(9, 30))  # "the report is done by 09:30 Shanghai time"
EST = obj.Estimate(queue_wait=timedelta(seconds=30), run_time=timedelta(minutes=5), samples=10)


def status(state: obj.SlotState, at: datetime, objective=REPORT, **kw) -> obj.ObjectiveStatus:
    return obj.objective_status(objective, SLOT, state, now=at, estimate=EST, **kw)


def said(s: obj.ObjectiveStatus) -> str:
    return sentences.say(s.cause)


def test_a_run_finished_before_the_objective_is_met():
    s = status(obj.SlotState(obj.SUCCEEDED, finished_at=local(SH, 2026, 12, 2, 9, 10)), local(SH, 2026, 12, 2, 9, 11))
    assert s.status == obj.MET and s.lateness == timedelta(0)


def test_a_run_finished_after_the_objective_is_breached_with_its_lateness():
    s = status(obj.SlotState(obj.SUCCEEDED, finished_at=local(SH, 2026, 12, 2, 9, 42)), local(SH, 2026, 12, 2, 9, 43))
    assert s.status == obj.BREACHED and s.lateness == timedelta(minutes=12)
    assert "12 min late" in said(s)


def test_waiting_for_readiness_goes_at_risk_before_the_objective_with_the_flag_named():
    waiting = obj.SlotState(obj.WAITING_READY, since=SLOT, flags=("raw_data.ready",))
    # 09:20: 30 s + 5 min would finish 09:25:30, in time.
    early = status(waiting, local(SH, 2026, 12, 2, 9, 20))
    assert early.status == obj.ON_TRACK
    # 09:26: even if the flag came now, 09:31:30 is after 09:30 — at risk before the breach.
    late = status(waiting, local(SH, 2026, 12, 2, 9, 26))
    assert late.status == obj.AT_RISK and late.expected_finish == local(SH, 2026, 12, 2, 9, 31, 30)
    assert said(late).startswith("waiting for readiness flag raw_data.ready (not set since ")
    assert "09:00:00 CST" in said(late)
    assert status(waiting, local(SH, 2026, 12, 2, 9, 30)).status == obj.BREACHED


def test_a_full_pool_counts_the_runs_ahead():
    waiting = obj.SlotState(obj.WAITING_POOL, since=SLOT, pool="llm-provider", in_use=8, limit=8, ahead=23)
    s = status(waiting, local(SH, 2026, 12, 2, 9, 1))
    # 24 runs for 8 slots: 3 rounds of 5 min, then its own: 09:21 > … no: 09:01 + 20 min = 09:21, on track.
    assert s.expected_finish == local(SH, 2026, 12, 2, 9, 21)
    assert s.status == obj.ON_TRACK
    s = status(waiting, local(SH, 2026, 12, 2, 9, 11))
    assert s.status == obj.AT_RISK
    assert said(s) == "pool llm-provider full (8 of 8), 23 runs ahead"


def test_a_retry_after_backoff_counts_from_the_next_try():
    retrying = obj.SlotState(
        obj.RETRYING, attempt=3, max_attempts=5, error_kind="timeout", next_try=local(SH, 2026, 12, 2, 9, 21)
    )
    s = status(retrying, local(SH, 2026, 12, 2, 9, 20))
    assert s.expected_finish == local(SH, 2026, 12, 2, 9, 26, 30) and s.status == obj.ON_TRACK
    s = status(retrying, local(SH, 2026, 12, 2, 9, 20), objective=offset(SH, 25))
    assert s.status == obj.AT_RISK
    assert said(s).startswith("attempt 3 of 5 failed with timeout; next try ")
    assert "09:21:00 CST" in said(s)


def test_a_running_run_counts_what_is_left_of_its_usual_time():
    running = obj.SlotState(obj.RUNNING, since=local(SH, 2026, 12, 2, 9, 20))
    s = status(running, local(SH, 2026, 12, 2, 9, 22))
    assert s.expected_finish == local(SH, 2026, 12, 2, 9, 25) and s.status == obj.ON_TRACK
    assert said(s) == "running for 120 s (usually 300 s)"
    assert status(running, local(SH, 2026, 12, 2, 9, 22), objective=offset(SH, 24)).status == obj.AT_RISK


def test_a_rule_paused_without_a_reason_is_at_risk_at_once_and_says_who_paused_it():
    paused = obj.SlotState(obj.PAUSED, paused_at=local(SH, 2026, 12, 2, 8, 55), paused_by="alice")
    s = status(paused, local(SH, 2026, 12, 2, 9, 0))
    assert s.status == obj.AT_RISK and s.expected_finish is None
    assert said(s).startswith("rule paused by alice at ") and said(s).endswith(": '-'")


def test_a_due_run_no_worker_takes_is_at_risk_with_the_queue_named():
    queued = obj.SlotState(
        obj.QUEUED,
        since=SLOT,
        run_after=SLOT,
        queue="agents",
        consumed_at=local(SH, 2026, 12, 2, 8, 57),
    )
    s = status(queued, local(SH, 2026, 12, 2, 9, 1))
    assert s.status == obj.AT_RISK and said(s) == "no worker has consumed queue agents for 4 min"
    # A worker took work a moment ago: only queued, on track.
    fresh = obj.SlotState(obj.QUEUED, since=SLOT, run_after=SLOT, queue="agents", consumed_at=SLOT)
    assert status(fresh, SLOT + timedelta(seconds=5)).status == obj.ON_TRACK
    none = obj.SlotState(obj.QUEUED, since=SLOT, run_after=SLOT, queue="agents")
    assert said(status(none, SLOT + timedelta(minutes=2))) == "no worker consumes queue agents"


def test_a_failed_run_and_a_missed_slot_are_at_risk_then_breached():
    failed = obj.SlotState(obj.FAILED, attempt=5, max_attempts=5, error_kind="timeout")
    assert status(failed, local(SH, 2026, 12, 2, 9, 5)).status == obj.AT_RISK
    assert status(failed, local(SH, 2026, 12, 2, 9, 31)).status == obj.BREACHED
    missed = obj.SlotState(obj.NOT_RUN, decision="Missed beyond the catch-up window", decision_reason="missed")
    s = status(missed, local(SH, 2026, 12, 2, 9, 5))
    assert s.status == obj.AT_RISK and said(s) == "did not run: Missed beyond the catch-up window"


def test_a_slot_the_calendar_excludes_is_excused():
    excluded = obj.SlotState(obj.NOT_RUN, decision="calendar", decision_reason="calendar")
    assert status(excluded, local(SH, 2026, 12, 2, 9, 40)).status == obj.EXCUSED


def test_other_causes_have_sentences():
    at = local(SH, 2026, 12, 2, 9, 29)
    for state in (
        obj.SlotState(obj.NOT_CLAIMED, since=SLOT),
        obj.SlotState(obj.WAITING_OVERLAP, since=SLOT),
        obj.SlotState(obj.WAITING_RATE, pool="llm", until=at),
        obj.SlotState(obj.AWAITING_APPROVAL),
        obj.SlotState(obj.QUEUED, run_after=at + timedelta(minutes=1)),
        obj.SlotState(obj.PAUSED, paused_at=SLOT),
    ):
        s = status(state, at)
        assert s.status == obj.AT_RISK, state.phase
        assert said(s)


def test_every_objective_code_has_a_sentence():
    for name in CODES:
        if name.startswith("objective."):
            assert name in sentences.CATALOGUE


@pytest.mark.parametrize("day", [date(2026, 3, 8), date(2026, 11, 1), date(2026, 6, 1)])
def test_a_slot_is_checked_every_minute_across_a_dst_day_and_only_ever_breaches_after_its_deadline(day):
    """Ticks through a whole New York day: the status moves on track → at risk → breached, never back."""
    objective = wall(NY, time(3, 30))
    slot = datetime.combine(day, time(0, 0), tzinfo=ZoneInfo(NY)).astimezone(UTC)
    waiting = obj.SlotState(obj.WAITING_READY, since=slot, flags=("x",))
    deadline = obj.objective_deadline(objective, slot)
    seen = []
    at = slot
    while at < slot + timedelta(hours=6):
        s = obj.objective_status(objective, slot, waiting, now=at, estimate=EST)
        assert (s.status == obj.BREACHED) == (at >= deadline)
        if not seen or seen[-1] != s.status:
            seen.append(s.status)
        at += timedelta(minutes=1)
    assert seen == [obj.ON_TRACK, obj.AT_RISK, obj.BREACHED]


def test_history_counts_met_and_missed_per_local_day():
    outcomes = [
        (local(SH, 2026, 12, 1, 9, 0), obj.MET),
        (local(SH, 2026, 12, 2, 9, 0), obj.BREACHED),
        (local(SH, 2026, 12, 2, 0, 30), obj.MET),  # 2026-12-01 16:30 UTC: the 2nd in Shanghai
        (local(SH, 2026, 12, 3, 9, 0), obj.EXCUSED),
    ]
    days = obj.history_days(outcomes, timezone=SH, today=date(2026, 12, 3), days=3)
    assert [(d.day.day, d.met, d.missed, d.outcome) for d in days] == [
        (1, 1, 0, "met"),
        (2, 1, 1, "missed"),
        (3, 0, 0, ""),
    ]


# --- overruns, unclaimed slots, latest start and lead time, pauses --------------------------------


def test_a_run_over_its_usual_time_is_expected_to_run_as_long_again_and_goes_at_risk_before_the_deadline():
    """Usual 60 s, started 09:00:05, deadline 09:30: an overrun is not "about to finish"."""
    usual = obj.Estimate(queue_wait=timedelta(seconds=1), run_time=timedelta(seconds=60), samples=10)
    running = obj.SlotState(obj.RUNNING, since=local(SH, 2026, 12, 2, 9, 0, 5))
    seen = {}
    at = SLOT
    while at < local(SH, 2026, 12, 2, 9, 30):
        s = obj.objective_status(REPORT, SLOT, running, now=at, estimate=usual)
        seen.setdefault(s.status, at)
        at += timedelta(seconds=15)
    assert seen[obj.AT_RISK] < local(SH, 2026, 12, 2, 9, 30)
    # Running 14 min 55 s at 09:15: expected as long again, 09:29:55, in time; at 09:15:15 not.
    assert seen[obj.AT_RISK] == local(SH, 2026, 12, 2, 9, 15, 15)
    s = obj.objective_status(REPORT, SLOT, running, now=local(SH, 2026, 12, 2, 9, 20), estimate=usual)
    assert s.status == obj.AT_RISK and s.expected_finish == local(SH, 2026, 12, 2, 9, 39, 55)
    assert said(s) == "running for 1195 s, over its usual 60 s"


def test_an_unclaimed_slot_is_at_risk_once_overdue_as_long_as_a_queued_run_with_no_worker():
    unclaimed = obj.SlotState(obj.NOT_CLAIMED, since=SLOT)
    assert status(unclaimed, SLOT + obj.QUEUE_STALL - timedelta(seconds=1)).status == obj.ON_TRACK
    s = status(unclaimed, SLOT + obj.QUEUE_STALL)
    assert s.status == obj.AT_RISK and s.expected_finish is None
    assert said(s).startswith("slot due since ") and "not yet taken by the scheduler" in said(s)


def test_a_slot_held_by_a_stalled_scheduler_is_at_risk_at_once_and_says_the_outage_is_paged_once():
    down = obj.SlotState(obj.NOT_CLAIMED, since=SLOT, scheduler_down_since=SLOT - timedelta(minutes=3))
    s = status(down, SLOT + timedelta(seconds=1))
    assert s.status == obj.AT_RISK and s.cause is not None and s.cause.code == obj.CAUSE_SCHEDULER_DOWN
    assert said(s) == (
        "the scheduler has not ticked since Wed 2026-12-02 08:57:00 CST (UTC+0800) "
        "(paged once, as the scheduler-stalled alert)"
    )
    assert status(down, local(SH, 2026, 12, 2, 9, 31)).status == obj.BREACHED


def test_a_slot_not_started_by_the_latest_start_is_at_risk_with_what_holds_it():
    # "Warn if not started by 09:15": 15 min before the 09:30 objective.
    objective = obj.Objective(kind=obj.WALL, timezone=SH, wall=time(9, 30), start_before=timedelta(minutes=15))
    waiting = obj.SlotState(obj.WAITING_READY, since=SLOT, flags=("raw_data.ready",))
    assert status(waiting, local(SH, 2026, 12, 2, 9, 14, 59), objective=objective).status == obj.ON_TRACK
    s = status(waiting, local(SH, 2026, 12, 2, 9, 15), objective=objective)
    assert s.status == obj.AT_RISK
    assert said(s).startswith(
        "not started by Wed 2026-12-02 09:15:00 CST (UTC+0800): waiting for readiness flag raw_data.ready"
    )
    # A run that has started is judged by its estimate, not by the latest start.
    running = obj.SlotState(obj.RUNNING, since=local(SH, 2026, 12, 2, 9, 14))
    assert status(running, local(SH, 2026, 12, 2, 9, 16), objective=objective).status == obj.ON_TRACK


def test_a_lead_time_warns_that_long_before_the_objective_for_a_rule_without_history():
    """Fewer than three successful runs: the defaults (70 s) would warn 70 s ahead; the lead time wins."""
    objective = obj.Objective(kind=obj.WALL, timezone=SH, wall=time(9, 30), lead=timedelta(minutes=20))
    waiting = obj.SlotState(obj.WAITING_READY, since=SLOT, flags=("raw_data.ready",))
    new_rule = obj.estimate_duration([])
    at = SLOT
    while obj.objective_status(objective, SLOT, waiting, now=at, estimate=new_rule).status == obj.ON_TRACK:
        at += timedelta(seconds=15)
    assert at == local(SH, 2026, 12, 2, 9, 10, 15)
    # Without a lead time: 70 s ahead, as before.
    at = SLOT
    while obj.objective_status(REPORT, SLOT, waiting, now=at, estimate=new_rule).status == obj.ON_TRACK:
        at += timedelta(seconds=15)
    assert at == local(SH, 2026, 12, 2, 9, 29)


def test_a_longer_estimate_still_warns_earlier_than_the_lead_time():
    objective = obj.Objective(kind=obj.WALL, timezone=SH, wall=time(9, 30), lead=timedelta(minutes=2))
    waiting = obj.SlotState(obj.WAITING_READY, since=SLOT, flags=("x",))
    # EST: 5 min 30 s of work, more than the 2 min lead.
    assert status(waiting, local(SH, 2026, 12, 2, 9, 24, 31), objective=objective).status == obj.AT_RISK


def test_a_rule_paused_with_a_reason_holds_its_objective_and_without_one_is_at_risk():
    paused = obj.SlotState(
        obj.PAUSED, paused_at=local(SH, 2026, 12, 2, 8, 55), paused_by="alice", pause_reason="maintenance"
    )
    for at in (local(SH, 2026, 12, 2, 9, 0), local(SH, 2026, 12, 2, 9, 45)):
        s = status(paused, at)
        assert s.status == obj.EXCUSED
        assert said(s).startswith("rule paused by alice at ") and said(s).endswith(": 'maintenance'")
    unexplained = obj.SlotState(obj.PAUSED, paused_at=local(SH, 2026, 12, 2, 8, 55))
    assert status(unexplained, local(SH, 2026, 12, 2, 9, 0)).status == obj.AT_RISK


@pytest.mark.parametrize(
    ("kind", "offset_s", "start", "lead", "field"),
    [
        (obj.OFFSET, 1800, 1800, None, "objective_start_before_seconds"),
        (obj.OFFSET, 1800, None, 2400, "objective_lead_seconds"),
    ],
)
def test_a_latest_start_or_lead_time_as_long_as_an_offset_objective_is_refused(kind, offset_s, start, lead, field):
    errors = obj.objective_errors(
        kind=kind, offset_seconds=offset_s, wall=None, scheduled=True, start_before_seconds=start, lead_seconds=lead
    )
    assert list(errors) == [field]
    assert sentences.say(errors[field][0])


def test_a_latest_start_or_lead_time_without_an_objective_is_refused():
    errors = obj.objective_errors(
        kind="", offset_seconds=None, wall=None, scheduled=True, start_before_seconds=60, lead_seconds=60
    )
    assert set(errors) == {"objective_start_before_seconds", "objective_lead_seconds"}
