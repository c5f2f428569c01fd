"""runs/engine/downtime.py: an outage seen by a process that lived through it becomes a span only when its
failures lasted at least the threshold (pure, `now` passed in)."""

from datetime import UTC, datetime, timedelta

import pytest

from runs.engine.downtime import Downtime, Span

T0 = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
BEAT = timedelta(seconds=2)


def _watch() -> Downtime:
    return Downtime(at_least=2 * BEAT)


def test_it_yields_nothing_while_all_is_well():
    o = _watch()
    for i in range(5):
        assert o.succeeded(now=T0 + i * BEAT) is None
    assert not o.down


def test_it_forgets_a_single_failed_try():
    o = _watch()
    o.failed(now=T0)
    assert o.down
    assert o.succeeded(now=T0 + BEAT) is None
    assert not o.down


@pytest.mark.parametrize(
    ("failures", "expected"),
    [(1, None), (2, Span(T0, T0 + 2 * BEAT)), (5, Span(T0, T0 + 5 * BEAT))],
)
def test_it_spans_from_the_first_failure_to_the_next_success(failures, expected):
    o = _watch()
    for i in range(failures):
        o.failed(now=T0 + i * BEAT)
    assert o.succeeded(now=T0 + failures * BEAT) == expected


def test_a_span_just_short_of_the_threshold_is_a_hiccup():
    o = _watch()
    o.failed(now=T0)
    assert o.succeeded(now=T0 + 2 * BEAT - timedelta(microseconds=1)) is None


def test_each_outage_is_its_own_span_over_several_ticks():
    o = _watch()
    seen = []
    # down 0..3, up 4..6, a hiccup at 7, up 8, down 9..14, up 15
    for i in range(16):
        now = T0 + i * BEAT
        if i in (0, 1, 2, 3, 7) or 9 <= i <= 14:
            o.failed(now=now)
        elif span := o.succeeded(now=now):
            seen.append(span)
    assert seen == [Span(T0, T0 + 4 * BEAT), Span(T0 + 9 * BEAT, T0 + 15 * BEAT)]
    assert seen[1].seconds == 12


def test_it_keeps_the_first_failure_across_a_dst_change():
    # Instants are UTC: the night Europe/Berlin leaves summer time changes nothing.
    start = datetime(2026, 10, 25, 0, 59, 59, tzinfo=UTC)
    o = _watch()
    o.failed(now=start)
    o.failed(now=start + BEAT)
    assert o.succeeded(now=start + 3 * BEAT) == Span(start, start + 3 * BEAT)
