"""Retry decisions (invariant 5): pure, no database, `now` and the random draw passed in."""

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from runs.engine.retry import RetryPolicy, backoff_delay, decide_retry
from runs.models import TaskRun, run_policy_fields
from tasks.models import TriggerRule
from tasks.rules.policy import RunPolicy
from tasks.skills.sdk import ErrorKind

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ALMOST_ONE = 1 - 1e-9  # the largest draws random.random() can return
NEVER_RETRIED = ["invalid_param", "permission_denied", "state_precondition", "unclassified"]
TRANSIENT = ["timeout", "rate_limited", "dependency_unreachable", "lease_lost"]


def policy(**overrides) -> RetryPolicy:
    base = {
        "max_attempts": 10,
        "backoff_base_seconds": 2.0,
        "max_delay_seconds": 10_000.0,
        "max_retry_window_seconds": 1_000_000.0,
        "jitter_min": 1.0,
        "jitter_max": 1.0,
    }
    return RetryPolicy(**{**base, **overrides})


def decide(p: RetryPolicy, *, attempt=1, kind="timeout", first_failure_at=NOW, draw=0.5, retry_after=None):
    return decide_retry(
        p,
        attempt=attempt,
        error_kind=kind,
        first_failure_at=first_failure_at,
        now=NOW,
        draw=draw,
        retry_after=retry_after,
    )


@pytest.mark.parametrize("base", [1.5, 2.0, 3.0, 10.0])
def test_it_grows_the_delay_as_base_to_the_power_of_the_attempt(base):
    p = policy(backoff_base_seconds=base, max_delay_seconds=1e9)
    delays = [backoff_delay(p, attempt, draw=0.5) for attempt in range(1, 6)]
    assert delays == pytest.approx([base**n for n in range(1, 6)])
    assert all(later > earlier for earlier, later in pairwise(delays))


@pytest.mark.parametrize("draw", [0.0, 0.25, 0.5, ALMOST_ONE])
@pytest.mark.parametrize("attempt", [1, 3, 5, 8, 20])
def test_it_never_exceeds_the_max_delay_even_with_jitter_above_one(attempt, draw):
    p = policy(max_delay_seconds=10.0, jitter_min=1.5, jitter_max=3.0)
    assert backoff_delay(p, attempt, draw) <= 10.0


def test_it_caps_a_delay_that_only_jitter_pushes_past_the_max():
    p = policy(max_delay_seconds=10.0, jitter_min=1.5, jitter_max=1.5)
    assert 2.0**3 < 10.0 < 2.0**3 * 1.5
    assert backoff_delay(p, 3, draw=0.0) == 10.0


def test_it_caps_the_delay_for_any_attempt_number_without_overflowing():
    # A float power overflows near 2**1024; the cap must hold however many attempts a policy allows.
    p = policy(max_delay_seconds=300.0, jitter_min=0.5, jitter_max=1.5)
    assert backoff_delay(p, 2000, draw=0.5) == 300.0


@pytest.mark.parametrize("attempt", [1, 2, 4])
def test_it_keeps_the_jitter_within_its_range(attempt):
    p = policy(jitter_min=0.5, jitter_max=1.5)
    raw = 2.0**attempt
    assert backoff_delay(p, attempt, draw=0.0) == pytest.approx(raw * 0.5)
    top = backoff_delay(p, attempt, draw=ALMOST_ONE)
    assert raw * 1.5 - 1e-6 < top < raw * 1.5
    for i in range(100):
        assert raw * 0.5 <= backoff_delay(p, attempt, draw=i / 100) < raw * 1.5


@pytest.mark.parametrize("kind", NEVER_RETRIED)
def test_it_never_retries_a_non_retryable_kind(kind):
    decision = decide(policy(), attempt=1, kind=kind, retry_after=1.0)
    assert decision.retry is False
    assert decision.run_after is None
    assert kind in decision.reason


@pytest.mark.parametrize("kind", sorted(ErrorKind.RETRYABLE))
def test_it_retries_a_retryable_kind_after_the_backoff(kind):
    decision = decide(policy(jitter_min=0.5, jitter_max=1.5), attempt=2, kind=kind, draw=0.0)
    assert decision.retry is True
    assert decision.delay == timedelta(seconds=2.0**2 * 0.5)
    assert decision.run_after == NOW + decision.delay


def test_transient_kinds_are_retryable_and_the_others_are_not():
    assert set(TRANSIENT) <= ErrorKind.RETRYABLE
    assert set(NEVER_RETRIED) <= ErrorKind.ALL
    assert not set(NEVER_RETRIED) & ErrorKind.RETRYABLE


def test_it_stops_at_the_attempt_cap():
    p = policy(max_attempts=3)
    assert [decide(p, attempt=n).retry for n in range(1, 6)] == [True, True, False, False, False]
    assert "exhausted" in decide(p, attempt=3).reason


def test_it_measures_the_retry_window_from_the_first_failure():
    p = policy(max_retry_window_seconds=100.0)  # jitter 1: attempt 1 waits exactly 2s
    assert decide(p, first_failure_at=NOW - timedelta(seconds=98)).retry is True  # run_after == window end
    late = decide(p, first_failure_at=NOW - timedelta(seconds=98, microseconds=1))
    assert late.retry is False
    assert "window" in late.reason
    # The same failure at the same `now` retries when the run first failed recently.
    assert decide(p, first_failure_at=NOW).retry is True


def test_it_honours_retry_after_as_a_floor():
    p = policy(max_delay_seconds=300.0)  # backoff for attempt 1 is 2s
    assert decide(p, retry_after=60.0).delay == timedelta(seconds=60)
    assert decide(p, retry_after=0.5).delay == timedelta(seconds=2)


def test_it_caps_retry_after_at_the_max_delay():
    p = policy(max_delay_seconds=300.0)
    decision = decide(p, retry_after=5000.0)
    assert decision.delay == timedelta(seconds=300)
    assert decision.run_after == NOW + timedelta(seconds=300)


def test_retry_after_does_not_lift_the_attempt_cap():
    assert decide(policy(max_attempts=1), retry_after=1.0).retry is False


def test_a_run_s_retry_policy_is_its_rule_s_as_copied_at_claim():
    rule = TriggerRule(max_attempts=7, backoff_base_seconds=3.0, lease_ttl_seconds=60, jitter_max=2.0)
    run = TaskRun(**run_policy_fields(rule.run_policy()))
    p = run.retry_policy()
    assert (p.max_attempts, p.backoff_base_seconds, p.jitter_max) == (7, 3.0, 2.0)
    assert p.max_delay_seconds == RetryPolicy().max_delay_seconds
    assert run.lease_ttl_seconds == 60 and run.agent == ""


def test_a_rule_s_defaults_are_the_retry_policy_s():
    assert TriggerRule().run_policy() == RunPolicy()
