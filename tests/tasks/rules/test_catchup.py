"""Catch-up planning for due slots (invariant 3): pure."""

from datetime import UTC, datetime, timedelta
from itertools import product

import pytest

from tasks.rules.catchup import CATCHUP, MISSED, RUN, SUPERSEDED, plan_due_slots

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=10)
MAX_DELAY = timedelta(minutes=5)


def minutes(*offsets: int) -> list[datetime]:
    return [T0 + timedelta(minutes=m) for m in offsets]


def plan(slots, *, now, catchup="none", max_delay=MAX_DELAY, grace=GRACE, complete=True) -> dict[datetime, str]:
    plans = plan_due_slots(slots, now=now, catchup=catchup, max_delay=max_delay, grace=grace, complete=complete)
    assert [p.slot for p in plans] == slots  # one action per slot, in order
    return {p.slot: p.action for p in plans}


def test_it_plans_nothing_for_no_slots():
    assert plan_due_slots([], now=T0, catchup="latest", max_delay=MAX_DELAY, grace=GRACE, complete=True) == []


@pytest.mark.parametrize("catchup", ["none", "latest"])
def test_it_runs_a_slot_within_the_grace(catchup):
    slot = T0
    assert plan([slot], now=slot + GRACE, catchup=catchup) == {slot: RUN}
    assert plan([slot], now=slot, catchup=catchup) == {slot: RUN}


def test_it_treats_a_slot_just_past_the_grace_as_late():
    slot = T0
    assert plan([slot], now=slot + GRACE + timedelta(microseconds=1), catchup="none") == {slot: MISSED}
    assert plan([slot], now=slot + GRACE + timedelta(microseconds=1), catchup="latest") == {slot: CATCHUP}


def test_it_records_every_late_slot_as_missed_without_catch_up():
    slots = minutes(0, 1, 2, 3)
    now = slots[-1] + timedelta(seconds=30)
    assert set(plan(slots, now=now, catchup="none").values()) == {MISSED}


def test_it_runs_only_the_latest_late_slot_and_supersedes_the_others_within_the_max_delay():
    slots = minutes(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
    now = slots[-1] + timedelta(seconds=30)
    actions = plan(slots, now=now, catchup="latest")
    assert actions[slots[-1]] == CATCHUP
    assert [s for s, a in actions.items() if a == CATCHUP] == [slots[-1]]
    for slot in slots[:-1]:
        expected = SUPERSEDED if now - slot <= MAX_DELAY else MISSED
        assert actions[slot] == expected, slot
    assert SUPERSEDED in actions.values() and MISSED in actions.values()


def test_it_treats_a_slot_exactly_at_the_max_delay_as_within():
    slot = T0
    assert plan([slot], now=slot + MAX_DELAY, catchup="latest") == {slot: CATCHUP}
    assert plan([slot], now=slot + MAX_DELAY + timedelta(microseconds=1), catchup="latest") == {slot: MISSED}


def test_it_misses_everything_when_no_late_slot_is_within_the_max_delay():
    slots = minutes(0, 1, 2)
    now = slots[-1] + MAX_DELAY + timedelta(seconds=1)
    assert set(plan(slots, now=now, catchup="latest").values()) == {MISSED}


def test_it_catches_up_nothing_from_an_incomplete_slot_list():
    # Later slots exist beyond the bound, so none of these can be the latest.
    slots = minutes(0, 1, 2)
    now = slots[-1] + timedelta(seconds=30)
    actions = plan(slots, now=now, catchup="latest", complete=False)
    assert CATCHUP not in actions.values()
    assert set(actions.values()) == {SUPERSEDED}


@pytest.mark.parametrize("catchup", ["none", "latest"])
def test_it_runs_the_on_time_slot_that_follows_late_ones_instead_of_catching_up(catchup):
    slots = minutes(0, 1, 2, 3)
    now = slots[-1] + timedelta(seconds=5)
    actions = plan(slots, now=now, catchup=catchup)
    assert actions[slots[-1]] == RUN
    assert CATCHUP not in actions.values()
    late = SUPERSEDED if catchup == "latest" else MISSED
    assert [actions[s] for s in slots[:-1]] == [late] * 3


@pytest.mark.parametrize(
    ("catchup", "count", "lateness", "complete"),
    list(product(["none", "latest"], [1, 2, 7, 30], [0, 5, 11, 90, 299, 301, 3600], [True, False])),
)
def test_it_gives_every_slot_exactly_one_action(catchup, count, lateness, complete):
    slots = minutes(*range(count))
    now = slots[-1] + timedelta(seconds=lateness)
    plans = plan_due_slots(slots, now=now, catchup=catchup, max_delay=MAX_DELAY, grace=GRACE, complete=complete)
    assert sorted(p.slot for p in plans) == slots
    assert all(p.action in {RUN, CATCHUP, MISSED, SUPERSEDED} for p in plans)
    runs = [p for p in plans if p.action in (RUN, CATCHUP)]
    # "latest" never runs more than one late slot; "none" never runs a late one.
    assert sum(p.action == CATCHUP for p in plans) <= (1 if catchup == "latest" else 0)
    assert all(now - p.slot <= GRACE for p in runs if p.action == RUN)
