"""Flow maths, pure: the token bucket, pool keys and the fair order across keys."""

from datetime import UTC, datetime, timedelta

import pytest

from tasks.rules.flow import Bucket, FairGroup, bucket_take, fair_order, pool_key_render, pool_key_validate
from tasks.rules.keys import KeyTemplateError

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def test_a_new_bucket_lets_the_burst_through_then_paces_at_the_rate():
    bucket, taken = None, []
    for _ in range(12):
        take = bucket_take(bucket, rate_count=10, period_seconds=10, burst=None, now=T0)
        bucket = take.bucket
        taken.append(take.taken)
    assert taken == [True] * 10 + [False] * 2
    # One token a second: the refusal names the instant the next one is there.
    assert take.retry_at == T0 + timedelta(seconds=1)
    assert not bucket_take(bucket, rate_count=10, period_seconds=10, burst=None, now=T0 + timedelta(seconds=0.5)).taken
    assert bucket_take(bucket, rate_count=10, period_seconds=10, burst=None, now=T0 + timedelta(seconds=1)).taken


def test_refill_stops_at_the_burst_and_a_clock_behind_refills_nothing():
    empty = Bucket(tokens=0.0, at=T0)
    later = bucket_take(empty, rate_count=1, period_seconds=1, burst=3, now=T0 + timedelta(hours=1))
    assert later.taken and later.bucket.tokens == 2.0
    behind = bucket_take(empty, rate_count=1, period_seconds=1, burst=3, now=T0 - timedelta(seconds=30))
    assert not behind.taken and behind.bucket.tokens == 0.0


def test_forty_starts_at_ten_per_ten_seconds_take_about_thirty_seconds_after_the_burst():
    bucket, now, starts = None, T0, []
    while len(starts) < 40:
        take = bucket_take(bucket, rate_count=10, period_seconds=10, burst=None, now=now)
        bucket = take.bucket
        if take.taken:
            starts.append(now)
        else:
            now = take.retry_at
    assert starts[9] == T0 and starts[10] == T0 + timedelta(seconds=1)
    assert starts[-1] == T0 + timedelta(seconds=30)


def test_pool_keys_render_from_the_run_and_refuse_unknown_placeholders():
    assert pool_key_render("", {"object_key": "x"}) == ""
    assert pool_key_render("{source}:{object_key}", {"object_key": "inv-1", "source": "webhook"}) == "webhook:inv-1"
    with pytest.raises(KeyTemplateError):
        pool_key_validate("{tenant}")


def test_round_robin_serves_each_key_before_any_key_twice():
    a = FairGroup("a", last_start_at=T0 + timedelta(seconds=5), oldest_since=T0)
    b = FairGroup("b", last_start_at=None, oldest_since=T0 + timedelta(seconds=1))
    c = FairGroup("c", last_start_at=T0 + timedelta(seconds=2), oldest_since=T0 + timedelta(seconds=2))
    # b never started, c started longer ago than a: b, c, a, then around again.
    assert fair_order([a, b, c], 5) == ["b", "c", "a", "b", "c"]
    assert fair_order([], 3) == []
