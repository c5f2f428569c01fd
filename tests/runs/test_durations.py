"""Execution time counts the attempts' running time only: a retry back-off, an approval and the wait
for a human to replay a ticket are not execution (the run page said "execution 1.7 min" for 4 s of
work and 1.7 min waiting for a person)."""

from datetime import UTC, datetime, timedelta

from runs.engine.durations import covered, worked

T = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)  # a DST night in Europe: UTC arithmetic does not care


def at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


def test_overlapping_intervals_count_once_and_an_open_one_runs_to_now():
    assert covered([(at(0), at(10)), (at(5), at(15)), (at(20), at(21))], now=at(100)) == timedelta(seconds=16)
    assert covered([(at(90), None)], now=at(100)) == timedelta(seconds=10)
    assert covered([], now=at(100)) == timedelta(0)


def test_a_replayed_run_worked_for_its_two_attempts_not_the_hours_between():
    attempts = [(at(0), at(2)), (at(7200), at(7203))]  # the ticket waited two hours for its replay
    assert worked(attempts, human_waits=[(at(2), at(7200))], now=at(9000)) == timedelta(seconds=5)


def test_an_attempt_that_waits_for_an_approval_inside_it_does_not_count_the_wait():
    attempts = [(at(0), at(106))]
    waits = [(at(3), at(103))]  # a proposal awaiting approval for 100 s while the attempt was open
    assert worked(attempts, human_waits=waits, now=at(200)) == timedelta(seconds=6)
    # Still waiting: only the work before it counts so far.
    assert worked([(at(0), None)], human_waits=[(at(3), None)], now=at(50)) == timedelta(seconds=3)
