"""Backpressure decisions: is a scope shedding, and what intake does with one trigger. Pure.

A scope (the whole harness, or one pool) has a high and a low watermark of pending runs. At or
above the high one intake starts shedding; it keeps shedding until pending falls to the low one
(hysteresis, so intake does not flap at one count). The previous state is an argument: the caller
keeps it in the database, so every intake of every process agrees.
"""

from dataclasses import dataclass

from tasks.rules.reasons import Reason, code

RECOMPUTABLE = "recomputable"  # a later trigger recomputes it: may be shed
ONE_TIME_INPUT = "one_time_input"  # carries input that exists only once: never dropped
COALESCE = "coalesce"  # only the newest trigger per object matters: replaces its pending run

ADMIT, SHED = "admit", "shed"

LOW_WITHOUT_HIGH = code("backpressure.low_without_high")
HIGH_BELOW_ONE = code("backpressure.high_below_one")
LOW_ABOVE_HIGH = code("backpressure.low_above_high")  # low, high


@dataclass(frozen=True)
class Watermarks:
    high: int | None  # None: this scope never sheds
    low: int | None  # None: the same as high (no band)


def shedding_next(pending: int, *, shedding: bool, marks: Watermarks) -> bool:
    """Whether the scope sheds, given its pending runs now and whether it was shedding.

    Starts at pending >= high (the next admitted run would exceed it); stops at pending <= low.
    """
    if marks.high is None:
        return False
    low = marks.high - 1 if marks.low is None else marks.low
    if shedding:
        return pending > low
    return pending >= marks.high


def intake_verdict(recoverability: str, *, shedding: bool) -> str:
    """ADMIT or SHED for one trigger of a rule with this recoverability class.

    Only recomputable work is shed. One-time input is always admitted; coalescing work is
    admitted too, because it replaces its object's pending run instead of adding one.
    """
    return SHED if shedding and recoverability == RECOMPUTABLE else ADMIT


def watermark_errors(*, high: int | None, low: int | None) -> dict[str, Reason]:
    """Field name -> what is wrong with a pair of watermarks that cannot work; {} when they can."""
    errors: dict[str, Reason] = {}
    if high is None:
        if low is not None:
            errors["high_watermark"] = Reason.of(LOW_WITHOUT_HIGH)
        return errors
    if high < 1:
        errors["high_watermark"] = Reason.of(HIGH_BELOW_ONE)
    if low is not None and low > high:
        errors["low_watermark"] = Reason.of(LOW_ABOVE_HIGH, low=low, high=high)
    return errors
