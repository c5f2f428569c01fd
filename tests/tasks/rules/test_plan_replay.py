"""Pure tests of tasks.rules.plan: the replay of a rule change over recorded history, across DST
days (the schedule tests' own cases) and catch-up policies; the future side by side; the key
consequences. No database: the History is built by hand as the tick would have recorded it."""

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from tasks.rules import catchup, evaluation, plan, schedule
from tests.support.dst_cases import GAP_CASES, REPEAT_CASES

GRACE = timedelta(seconds=60)
LATE = {catchup.MISSED: "missed", catchup.SUPERSEDED: "superseded", catchup.CAPPED: "catchup_capped"}


def u(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def side(spec, **guards_and_catchup) -> plan.RuleSide:
    catch = {k: guards_and_catchup.pop(k) for k in list(guards_and_catchup) if k.startswith("catchup")}
    return plan.RuleSide(spec, evaluation.Guards(timezone=spec.timezone, **guards_and_catchup), **catch)


def recorded_by_tick(s: plan.RuleSide, *, since, until, down=()) -> dict:
    """What the tick records for `s` over (since, until] when no tick ran in the `down` spans
    [start, end): the tick's own catch-up and guard code, slot by slot, as scheduler_tick runs it."""
    out = {}
    slots = schedule.slots_between(s.spec, since, until)
    groups: dict[datetime, list[datetime]] = {}
    for slot in slots:
        end = next((e for a, e in down if a <= slot < e), slot)
        groups.setdefault(end, []).append(slot)
    for now, group in groups.items():
        plans = catchup.plan_due_slots(
            group,
            now=now,
            catchup=s.catchup,
            max_delay=s.catchup_max_delay,
            grace=GRACE,
            complete=True,
            max_count=s.catchup_max_count,
        )
        for p in plans:
            if p.action in (catchup.RUN, catchup.CATCHUP):
                verdict = evaluation.evaluate_slot(s.guards, p.slot, now=now, facts=evaluation.Facts())
                outcome = verdict.reason or (plan.CATCHUP if p.action == catchup.CATCHUP else plan.RUN)
            else:
                outcome = LATE[p.action]
            out[p.slot] = plan.Recorded(outcome, now)
    return out


def history(records, *, since, last_tick, **kw) -> plan.History:
    return plan.History(since=since, last_tick=last_tick, records=records, grace=GRACE, **kw)


def local_day(tz: str, day: date) -> tuple[datetime, datetime]:
    zone = ZoneInfo(tz)
    start = datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=zone).astimezone(UTC)
    return start - timedelta(microseconds=1), end - timedelta(microseconds=1)


# --- no change: the replay is what the tick recorded, slot for slot, across DST days ---


def _dst_cases():
    for tz, day, expr, expected in GAP_CASES:
        for gap, slots in expected.items():
            yield pytest.param(tz, day, expr, gap, "first", slots, id=f"gap-{tz}-{expr}-{gap}")
    for tz, day, expr, expected in REPEAT_CASES:
        for repeat, slots in expected.items():
            yield pytest.param(tz, day, expr, "shift", repeat, slots, id=f"repeat-{tz}-{expr}-{repeat}")


@pytest.mark.parametrize(("tz", "day", "expr", "gap", "repeat", "expected"), list(_dst_cases()))
def test_it_replays_no_change_as_recorded_on_dst_days(tz, day, expr, gap, repeat, expected):
    spec = schedule.ScheduleSpec(kind="cron", timezone=tz, cron=expr, dst_gap=gap, dst_repeat=repeat)
    s = side(spec)
    since, until = local_day(tz, day)
    records = recorded_by_tick(s, since=since, until=until)
    rows = plan.replay(s, history(records, since=since, last_tick=until), until=until, since=since)

    assert sorted(rows) == sorted(set(expected))  # the schedule tests' slots, no more, no fewer
    assert {slot: r.new for slot, r in rows.items()} == {slot: r.outcome for slot, r in records.items()}


@pytest.mark.parametrize(("tz", "day", "expr", "gap", "repeat", "expected"), list(_dst_cases()))
def test_a_narrowed_window_marks_exactly_the_slots_it_excludes_on_dst_days(tz, day, expr, gap, repeat, expected):
    spec = schedule.ScheduleSpec(kind="cron", timezone=tz, cron=expr, dst_gap=gap, dst_repeat=repeat)
    since, until = local_day(tz, day)
    old = side(spec)
    records = recorded_by_tick(old, since=since, until=until)
    # Business hours that end at 02:00 local: every slot at or after 02:00 on the wall clock is out.
    new = side(spec, hours_start=time(0), hours_end=time(2), outside_hours="skip")
    rows = plan.past(old, new, history(records, since=since, last_tick=until), now=until, days=1)

    zone = ZoneInfo(tz)
    excluded = {s for s in expected if s.astimezone(zone).time() >= time(2)}
    assert {r.slot for r in rows if r.differs} == excluded
    assert all(r.new == "outside_window" for r in rows if r.differs)


# --- outages and catch-up policies ---

NOW = u(2026, 12, 1, 12)
HOURLY = schedule.ScheduleSpec(kind="cron", timezone="Europe/Berlin", cron="0 * * * *")
# No tick ran from 03:30 to 08:10 UTC: the 04:00 to 08:00 slots were first seen late, at 08:10.
DOWN = ((u(2026, 12, 1, 3, 30), u(2026, 12, 1, 8, 10)),)
SINCE = u(2026, 11, 30, 12)
POLICIES = [
    dict(catchup="none"),
    dict(catchup="latest", catchup_max_delay=timedelta(hours=1)),
    dict(catchup="latest", catchup_max_delay=timedelta(minutes=5)),
    dict(catchup="all", catchup_max_delay=timedelta(hours=3)),
    dict(catchup="all", catchup_max_delay=timedelta(hours=6), catchup_max_count=2),
]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: "-".join(str(v) for v in p.values()))
def test_it_replays_an_outage_as_the_tick_decided_it(policy):
    s = side(HOURLY, **policy)
    records = recorded_by_tick(s, since=SINCE, until=NOW, down=DOWN)
    rows = plan.replay(s, history(records, since=SINCE, last_tick=NOW), until=NOW, since=SINCE)
    assert {slot: r.new for slot, r in rows.items()} == {slot: r.outcome for slot, r in records.items()}


@pytest.mark.parametrize("before", POLICIES, ids=lambda p: "-".join(str(v) for v in p.values()))
@pytest.mark.parametrize("after", POLICIES, ids=lambda p: "-".join(str(v) for v in p.values()))
def test_a_changed_catchup_policy_replays_the_outage_under_the_new_policy(before, after):
    old, new = side(HOURLY, **before), side(HOURLY, **after)
    records = recorded_by_tick(old, since=SINCE, until=NOW, down=DOWN)
    rows = plan.past(old, new, history(records, since=SINCE, last_tick=NOW), now=NOW, days=1)
    expected = recorded_by_tick(new, since=SINCE, until=NOW, down=DOWN)
    assert {r.slot: r.new for r in rows} == {slot: r.outcome for slot, r in expected.items()}
    assert {r.slot for r in rows if r.differs} == {
        slot for slot in expected if expected[slot].outcome != records[slot].outcome
    }


def test_a_denser_schedule_is_unknown_where_no_tick_is_recorded_before_an_outage():
    old = side(HOURLY, catchup="none")
    records = recorded_by_tick(old, since=SINCE, until=NOW, down=DOWN)
    new = side(schedule.ScheduleSpec(kind="cron", timezone="Europe/Berlin", cron="*/15 * * * *"), catchup="none")
    rows = {r.slot: r for r in plan.past(old, new, history(records, since=SINCE, last_tick=NOW), now=NOW, days=1)}
    # The last slot seen on time is 03:00, the outage proven from 04:00: 03:15-03:45 cannot be told.
    for m in (15, 30, 45):
        assert rows[u(2026, 12, 1, 3, m)].new == plan.UNKNOWN
        assert rows[u(2026, 12, 1, 3, m)].why.code == plan.UNKNOWN_TICK
    assert rows[u(2026, 12, 1, 4, 15)].new == "missed"  # inside the proven outage
    # Between two on-time records no record proves a tick ran: an outage may have fallen there.
    assert rows[u(2026, 12, 1, 9, 15)].new == plan.UNKNOWN

    # The scheduler's own tick history tells them all: ticks ran up to 03:30 and again from 08:10.
    ticks = history(records, since=SINCE, last_tick=NOW, outages=DOWN, ticks_since=SINCE)
    rows = {r.slot: r for r in plan.past(old, new, ticks, now=NOW, days=1)}
    assert [rows[u(2026, 12, 1, 3, m)].new for m in (15, 30, 45)] == [plan.RUN, plan.RUN, "missed"]
    assert rows[u(2026, 12, 1, 4, 15)].new == "missed"
    assert rows[u(2026, 12, 1, 9, 15)].new == plan.RUN


# --- recorded facts: pauses, readiness, records that begin later, the last tick ---

DAILY = schedule.ScheduleSpec(kind="cron", timezone="Asia/Shanghai", cron="0 9 * * *")  # 01:00 UTC


def test_paused_slots_replay_as_paused_and_slots_after_the_last_tick_are_pending():
    s = side(DAILY)
    records = {u(2026, 11, d, 1): plan.Recorded(plan.RUN, u(2026, 11, d, 1)) for d in range(20, 30)}
    records[u(2026, 11, 25, 1)] = plan.Recorded("paused", u(2026, 11, 25, 12))
    h = history(
        records,
        since=u(2026, 11, 19),
        last_tick=u(2026, 11, 30, 0),
        pauses=((u(2026, 11, 24, 12), u(2026, 11, 25, 12)),),
    )
    rows = plan.replay(s, h, until=NOW, since=u(2026, 11, 19))
    assert rows[u(2026, 11, 25, 1)].new == plan.PAUSED == records[u(2026, 11, 25, 1)].outcome
    assert rows[u(2026, 11, 26, 1)].new == plan.RUN
    assert rows[u(2026, 12, 1, 1)].new == plan.PENDING  # after the last tick


def test_slots_before_the_records_begin_are_unknown():
    s = side(DAILY)
    h = history({}, since=u(2026, 11, 28), last_tick=NOW, ticks_since=u(2026, 11, 28))
    rows = plan.replay(s, h, until=NOW, since=u(2026, 11, 25))
    assert [rows[u(2026, 11, d, 1)].new for d in (25, 26, 27)] == [plan.UNKNOWN] * 3
    assert rows[u(2026, 11, 27, 1)].why.code == plan.UNKNOWN_BEFORE_RECORDS
    assert rows[u(2026, 11, 28, 1)].new == plan.RUN


FLAG = "pipeline.raw_data.ready"


def waiting(spec, **kw) -> plan.RuleSide:
    g = evaluation.Guards(
        timezone=spec.timezone, depends_on=(FLAG,), ready_deadline=time(12), recheck=timedelta(minutes=5), **kw
    )
    return plan.RuleSide(spec, g, flag_scope=lambda slot: schedule.business_date(spec, slot).isoformat())


@pytest.mark.parametrize(
    ("set_at", "expected"),
    [
        (u(2026, 11, 27, 0, 50), plan.RUN),  # set before the slot
        (u(2026, 11, 27, 2, 17), plan.RUN),  # late, before the 12:00 local (04:00 UTC) deadline
        (u(2026, 11, 27, 4, 0, 1), "not_ready_expired"),  # a second after the deadline: too late
        (u(2026, 11, 28, 2), "not_ready_expired"),  # the next day
    ],
)
def test_a_late_flag_is_replayed_as_it_was_set(set_at, expected):
    s = waiting(DAILY)
    h = history(
        {}, since=u(2026, 11, 26), last_tick=NOW, ticks_since=u(2026, 11, 26), flags={(FLAG, "2026-11-27"): set_at}
    )
    row = plan.replay(s, h, until=u(2026, 11, 27, 12), since=u(2026, 11, 26))[u(2026, 11, 27, 1)]
    assert row.new == expected
    if expected == plan.RUN and set_at > u(2026, 11, 27, 1):
        # Found by the re-check every 5 minutes from the first look (01:00): at 02:20.
        assert row.at == u(2026, 11, 27, 2, 20)


def test_a_late_flag_past_the_start_window_is_outside_the_window():
    s = waiting(DAILY, start_window=timedelta(hours=1))
    flags = {(FLAG, "2026-11-27"): u(2026, 11, 27, 2, 17)}
    h = history({}, since=u(2026, 11, 26), last_tick=NOW, ticks_since=u(2026, 11, 26), flags=flags)
    row = plan.replay(s, h, until=u(2026, 11, 27, 12), since=u(2026, 11, 26))[u(2026, 11, 27, 1)]
    assert row.new == "outside_window"


def test_a_flag_not_set_now_is_unknown_unless_the_slot_was_recorded_not_ready():
    s = waiting(DAILY)
    slot, other = u(2026, 11, 27, 1), u(2026, 11, 28, 1)
    records = {
        slot: plan.Recorded("not_ready_expired", u(2026, 11, 27, 4), missing=(FLAG,)),
        other: plan.Recorded(plan.RUN, u(2026, 11, 28, 2)),  # it ran, so the flag was set, and cleared since
    }
    rows = plan.replay(s, history(records, since=u(2026, 11, 26), last_tick=NOW), until=NOW, since=u(2026, 11, 26))
    assert rows[slot].new == "not_ready_expired"
    assert rows[other].new == plan.UNKNOWN
    assert rows[other].why.code == plan.UNKNOWN_FLAG


# --- the future, side by side ---


def test_the_future_names_the_first_day_the_fires_differ_and_keeps_dst_notes():
    berlin = schedule.ScheduleSpec(kind="cron", timezone="Europe/Berlin", cron="30 2 * * *")
    old = side(berlin)
    new = side(berlin, weekdays=frozenset(range(5)))  # weekdays only
    fires, first = plan.future(old, new, now=u(2026, 3, 25, 12), days=7)
    assert first == date(2026, 3, 28)  # a Saturday
    gap_day = next(f for f in fires if f.local.date() == date(2026, 3, 29))
    assert gap_day.note.code == schedule.DST_GAP_SHIFTED  # 02:30 does not exist: shifted to 03:00
    assert gap_day.old.code == evaluation.SLOT_RUNS and gap_day.new.code == evaluation.SLOT_WEEKDAY


def test_the_same_rule_has_the_same_future():
    s = side(DAILY)
    fires, first = plan.future(s, s, now=NOW, days=14)
    assert first is None and len(fires) == 14 and not any(f.differs for f in fires)


# --- consequences ---


def keyed(spec, template):
    def key(slot):
        return template.format(business_date=schedule.business_date(spec, slot), slot=schedule.slot_label(spec, slot))

    return plan.RuleSide(spec, evaluation.Guards(timezone=spec.timezone), biz_key=key)


def test_a_key_that_changes_shape_is_dangerous():
    old, new = keyed(DAILY, "r:{business_date}"), keyed(DAILY, "r:{slot}")
    slots = schedule.slots_between(DAILY, NOW, NOW + timedelta(days=2))
    found = plan.key_consequences(old, new, slots=slots, old_slots=slots, ran={}, day_of=lambda s: s.date())
    assert [c.said.code for c in found] == [plan.KEY_SHAPE] and found[0].dangerous


def test_a_moved_slot_keyed_by_slot_would_run_its_business_day_twice():
    old_spec = schedule.ScheduleSpec(kind="cron", timezone="Asia/Shanghai", cron="0 9 * * *")
    new_spec = schedule.ScheduleSpec(kind="cron", timezone="Asia/Shanghai", cron="0 15 * * *")
    old, new = keyed(old_spec, "r:{slot}"), keyed(new_spec, "r:{slot}")
    now = u(2026, 12, 1, 3)  # 11:00 in Shanghai: today's 09:00 ran
    day = date(2026, 12, 1)
    ran = {day: {old.biz_key(u(2026, 12, 1, 1))}}
    slots = schedule.slots_between(new_spec, now, now + timedelta(days=1))
    old_slots = schedule.slots_between(old_spec, now, now + timedelta(days=1))

    def day_of(s):
        return schedule.business_date(new_spec, s)

    found = plan.key_consequences(old, new, slots=slots, old_slots=old_slots, ran=ran, day_of=day_of)
    assert plan.DAY_AGAIN in [c.said.code for c in found]
    # A key by business date keeps the day to one run, wherever the slot moves.
    old, new = keyed(old_spec, "r:{business_date}"), keyed(new_spec, "r:{business_date}")
    ran = {day: {old.biz_key(u(2026, 12, 1, 1))}}
    assert plan.key_consequences(old, new, slots=slots, old_slots=old_slots, ran=ran, day_of=day_of) == []


def test_a_burst_is_what_the_edited_catchup_would_run_at_once():
    due = schedule.slots_between(HOURLY, u(2026, 12, 1, 3, 30), NOW)
    assert plan.burst(side(HOURLY, catchup="none"), due=due, now=NOW, grace=GRACE) == [NOW]
    burst = plan.burst(side(HOURLY, catchup="all", catchup_max_delay=timedelta(hours=9)), due=due, now=NOW, grace=GRACE)
    assert burst == due
