"""How long did a run work, and how long did it wait for people? Pure: intervals in, durations out.

A run's first start to its finish also covers retry back-offs, approvals and the hours until someone
replayed its ticket. Its execution time is the time its attempts ran (overlaps counted once), and the
time it waited for a human (a proposal awaiting approval, a ticket awaiting replay) is shown apart."""

from collections.abc import Iterable
from datetime import datetime, timedelta

Interval = tuple[datetime, datetime | None]  # an open end: still going at `now`


def covered(intervals: Iterable[Interval], *, now: datetime) -> timedelta:
    """The time covered by the intervals, each counted once where they overlap; an open end runs to now."""
    spans = sorted((start, end or now) for start, end in intervals if start is not None)
    total = timedelta(0)
    cur_start: datetime | None = None
    cur_end: datetime | None = None
    for start, end in spans:
        if end <= start:
            continue
        if cur_end is None or start > cur_end:
            if cur_start is not None and cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_start is not None and cur_end is not None:
        total += cur_end - cur_start
    return total


def worked(attempts: Iterable[Interval], *, human_waits: Iterable[Interval], now: datetime) -> timedelta:
    """The attempts' running time less any part of it spent waiting for a human."""
    attempts, waits = list(attempts), list(human_waits)
    both = [
        (max(a0, w0), min(a1 or now, w1 or now))
        for a0, a1 in attempts
        for w0, w1 in waits
        if max(a0, w0) < min(a1 or now, w1 or now)
    ]
    return covered(attempts, now=now) - covered(both, now=now)
