"""Retry decisions: bounded exponential backoff with jitter (invariant 5). Pure: `now` and the
random draw come in as arguments."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from tasks.rules.policy import RetryPolicy
from tasks.skills.sdk import ErrorKind

__all__ = ["RetryDecision", "RetryPolicy", "backoff_delay", "decide_retry"]


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    reason: str
    delay: timedelta | None = None
    run_after: datetime | None = None


def backoff_delay(policy: RetryPolicy, attempt: int, draw: float) -> float:
    """Seconds to wait after failed attempt number `attempt` (1-based); `draw` is uniform in [0, 1).

    min(base^attempt, max delay) * a factor from the jitter range, then capped again so that a
    factor above 1 can never push one delay past the cap.
    """
    try:
        raw = min(policy.backoff_base_seconds**attempt, policy.max_delay_seconds)
    except OverflowError:  # base**attempt beyond float range is far past any cap
        raw = policy.max_delay_seconds
    factor = policy.jitter_min + (policy.jitter_max - policy.jitter_min) * draw
    return min(raw * factor, policy.max_delay_seconds)


def decide_retry(
    policy: RetryPolicy,
    *,
    attempt: int,
    error_kind: str,
    first_failure_at: datetime,
    now: datetime,
    draw: float,
    retry_after: float | None = None,
) -> RetryDecision:
    """Whether a failed attempt retries, and when. Never retries a non-retryable kind, beyond the
    attempt cap, or past the retry window measured from the run's first failure."""
    if error_kind not in ErrorKind.RETRYABLE:
        return RetryDecision(False, f"error kind {error_kind!r} is not retried")
    if attempt >= policy.max_attempts:
        return RetryDecision(False, f"attempt {attempt} of {policy.max_attempts}: attempts exhausted")
    seconds = backoff_delay(policy, attempt, draw)
    if retry_after is not None:
        # A server's Retry-After is a floor, but never past our own cap on one delay.
        seconds = min(max(seconds, retry_after), policy.max_delay_seconds)
    run_after = now + timedelta(seconds=seconds)
    window_end = first_failure_at + timedelta(seconds=policy.max_retry_window_seconds)
    if run_after > window_end:
        return RetryDecision(False, f"retry window of {policy.max_retry_window_seconds:g}s exhausted")
    return RetryDecision(True, f"retry {attempt + 1} of {policy.max_attempts}", timedelta(seconds=seconds), run_after)
