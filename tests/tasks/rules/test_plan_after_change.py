"""Pure tests of tasks.rules.plan where things changed: a plan after a retime, while the scheduler is
behind, over an outage only the scheduler's own tick history shows, the future compared by outcome,
and what a catch-up burst is. No database: the History is built as the service reads it."""

from datetime import UTC, date, datetime, time, timedelta

import pytest

from tasks.rules import evaluation, plan, schedule

GRACE = timedelta(seconds=60)
SHANGHAI = "Asia/Shanghai"
AT_9 = schedule.ScheduleSpec(kind="cron", timezone=SHANGHAI, cron="0 9 * * *")  # 01:00 UTC
AT_10 = schedule.ScheduleSpec(kind="cron", timezone=SHANGHAI, cron="0 10 * * *")  # 02:00 UTC


def u(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def side(spec, **kw) -> plan.RuleSide:
    catch = {k: kw.pop(k) for k in list(kw) if k.startswith("catchup")}
    return plan.RuleSide(spec, evaluation.Guards(timezone=spec.timezone, **kw), **catch)


def ran(slot: datetime) -> plan.Recorded:
    return plan.Recorded(plan.RUN, slot, run_id=1, state="succeeded")


# Ran at 09:00 from Nov 20 to Nov 26; retimed to 10:00 at Nov 26 12:00 UTC; ran at 10:00 since.
RETIMED_AT = u(2026, 11, 26, 12)
NOW = u(2026, 11, 30, 6)
RECORDS = {u(2026, 11, d, 1): ran(u(2026, 11, d, 1)) for d in range(20, 27)} | {
    u(2026, 11, d, 2): ran(u(2026, 11, d, 2)) for d in range(27, 31)
}


def after_retime(**kw) -> plan.History:
    # As the service reads it: the records of the rule as it is begin when its schedule was set.
    return plan.History(
        since=RETIMED_AT, last_tick=NOW, records=RECORDS, grace=GRACE, schedule_set=True, ticks_since=RETIMED_AT, **kw
    )


def test_a_plan_of_no_change_after_a_retime_differs_nowhere():
    rows = plan.past(side(AT_10), side(AT_10), after_retime(), now=NOW, days=14)
    assert [r for r in rows if r.differs] == []
    assert [r.slot for r in rows if r.compared] == [u(2026, 11, d, 2) for d in range(27, 31)]
    before = next(r for r in rows if r.slot == u(2026, 11, 25, 2))
    assert (before.new, before.current, before.why.code) == (plan.UNKNOWN, plan.UNKNOWN, plan.UNKNOWN_BEFORE_SCHEDULE)


def test_reverting_a_retime_differs_only_since_the_retime():
    rows = plan.past(side(AT_10), side(AT_9), after_retime(), now=NOW, days=14)
    differing = {(r.slot, r.current, r.new) for r in rows if r.differs}
    assert differing == {(u(2026, 11, d, 2), plan.RUN, plan.NONE) for d in range(27, 31)} | {
        (u(2026, 11, d, 1), plan.NONE, plan.RUN) for d in range(27, 31)
    }
    # The 09:00 runs that happened under the old schedule are shown as they happened, not compared.
    old_run = next(r for r in rows if r.slot == u(2026, 11, 24, 1))
    assert old_run.recorded == RECORDS[u(2026, 11, 24, 1)] and not old_run.differs
    assert (old_run.current, old_run.new) != (plan.NONE, plan.RUN)


def test_slots_after_the_last_tick_are_pending_on_both_sides():
    behind = u(2026, 11, 28, 12)  # no tick since: the 29th and 30th are not decided yet
    records = {s: r for s, r in RECORDS.items() if s <= behind}
    h = plan.History(since=RETIMED_AT, last_tick=behind, records=records, grace=GRACE, ticks_since=RETIMED_AT)
    rows = plan.past(side(AT_10), side(AT_10), h, now=NOW, days=14)
    assert [r for r in rows if r.differs] == []
    pending = [r for r in rows if r.slot > behind]
    assert [(r.current, r.new) for r in pending] == [(plan.PENDING, plan.PENDING)] * 2

    # An edit planned during the outage: what it changes is said, the undecided slots are not.
    narrowed = side(AT_10, hours_start=time(11), hours_end=time(18), outside_hours="skip")
    rows = plan.past(side(AT_10), narrowed, h, now=NOW, days=14)
    assert {(r.current, r.new) for r in rows if r.differs} == {(plan.RUN, "outside_window")}
    assert all((r.current, r.new) == (plan.PENDING, plan.PENDING) for r in rows if r.slot > behind)


def test_a_slot_recorded_after_the_tick_row_was_read_is_decided_not_pending():
    """A tick commits its slots' runs before it records itself: a plan read between the two sees the
    newest run and a last tick from before it. The run proves a tick reached its slot (CI saw a plan
    of no change differ there, "run" against "pending", on a loaded machine)."""
    stale = u(2026, 11, 29, 12)  # the tick row, read before the tick that claimed the 30th recorded itself
    h = plan.History(since=RETIMED_AT, last_tick=stale, records=RECORDS, grace=GRACE, ticks_since=RETIMED_AT)
    rows = plan.past(side(AT_10), side(AT_10), h, now=NOW, days=14)
    assert [(r.slot, r.current, r.new) for r in rows if r.differs] == []
    assert next(r for r in rows if r.slot == u(2026, 11, 30, 2)).new == plan.RUN


# An outage from Nov 28 09:30 to 13:30 Shanghai (01:30 to 05:30 UTC): the 09:00 slot ran on time,
# and no slot of the rule as it is fell inside, so only the scheduler's tick history shows it.
DOWN = (u(2026, 11, 28, 1, 30), u(2026, 11, 28, 5, 30))
NINE = {u(2026, 11, d, 1): ran(u(2026, 11, d, 1)) for d in range(20, 31)}


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (dict(catchup="none"), "missed"),
        (dict(catchup="latest", catchup_max_delay=timedelta(hours=1)), "missed"),
        (dict(catchup="latest", catchup_max_delay=timedelta(hours=6)), plan.CATCHUP),
    ],
)
def test_a_retimed_slot_inside_a_recorded_outage_is_what_the_outage_did(policy, expected):
    h = plan.History(
        since=u(2026, 11, 19), last_tick=NOW, records=NINE, grace=GRACE, outages=(DOWN,), ticks_since=u(2026, 11, 19)
    )
    rows = {r.slot: r for r in plan.past(side(AT_9, **policy), side(AT_10, **policy), h, now=NOW, days=14)}
    assert rows[u(2026, 11, 28, 2)].new == expected
    assert rows[u(2026, 11, 27, 2)].new == plan.RUN  # no outage that day
    if expected == plan.CATCHUP:
        assert rows[u(2026, 11, 28, 2)].at == DOWN[1]


def test_a_retimed_slot_no_record_proves_a_tick_saw_is_unknown_without_tick_history():
    h = plan.History(since=u(2026, 11, 19), last_tick=NOW, records=NINE, grace=GRACE)
    rows = {r.slot: r for r in plan.past(side(AT_9), side(AT_10), h, now=NOW, days=14)}
    assert rows[u(2026, 11, 28, 2)].new == plan.UNKNOWN
    assert rows[u(2026, 11, 28, 2)].why.code == plan.UNKNOWN_TICK
    assert rows[u(2026, 11, 28, 1)].new == plan.NONE and rows[u(2026, 11, 28, 1)].current == plan.RUN


# --- the future compares outcomes ---


def test_narrowed_hours_differ_only_where_a_fire_goes_otherwise():
    hourly = schedule.ScheduleSpec(kind="cron", timezone=SHANGHAI, cron="0 * * * *")
    old = side(hourly, hours_start=time(9), hours_end=time(18), outside_hours="skip")
    new = side(hourly, hours_start=time(10), hours_end=time(18), outside_hours="skip")
    now = u(2026, 12, 1, 6)  # 14:00 in Shanghai: today's 09:00 has passed
    fires, first = plan.future(old, new, now=now, days=3)
    differing = [f for f in fires if f.differs]
    assert [f.local.strftime("%m-%d %H:%M") for f in differing] == ["12-02 09:00", "12-03 09:00", "12-04 09:00"]
    assert first == date(2026, 12, 2)
    assert {(f.old_outcome, f.new_outcome) for f in differing} == {(plan.RUN, "outside_window")}
    # The same outcome in other words is not a difference: 19:00 is skipped either way.
    evening = next(f for f in fires if f.local.strftime("%m-%d %H") == "12-01 19")
    assert evening.old != evening.new and not evening.differs


def test_the_future_and_the_past_use_one_vocabulary():
    hourly = schedule.ScheduleSpec(kind="cron", timezone=SHANGHAI, cron="0 * * * *")
    g = evaluation.Guards(timezone=SHANGHAI, hours_start=time(10), hours_end=time(18), outside_hours="skip")
    assert plan.fire_outcome(g, u(2026, 12, 2, 1)) == "outside_window"  # 09:00
    assert plan.fire_outcome(g, u(2026, 12, 2, 3)) == plan.RUN
    assert plan.fire_outcome(None, u(2026, 12, 2, 3)) == plan.NONE
    deferred = evaluation.Guards(timezone=SHANGHAI, hours_start=time(10), hours_end=time(18), outside_hours="defer")
    assert plan.fire_outcome(deferred, u(2026, 12, 2, 1)) == plan.RUN  # runs, later
    assert hourly.timezone == SHANGHAI


# --- a burst ---


@pytest.mark.parametrize(("n", "dangerous"), [(1, False), (plan.BURST_AT - 1, False), (plan.BURST_AT, True), (9, True)])
def test_a_burst_is_dangerous_from_several_runs_at_once(n, dangerous):
    fresh = [u(2026, 12, 1, h) for h in range(n)]
    found = plan.burst_consequence(fresh)
    assert found is not None and found.dangerous is dangerous
    assert found.said.params["n"] == n


def test_no_fresh_run_is_no_burst():
    assert plan.burst_consequence([]) is None
