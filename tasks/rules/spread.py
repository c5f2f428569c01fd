"""When a slot's run starts, given the rule's spread: many rules due at one instant (every team's
"09:00") start over the spread instead of all in one second. Pure: no Django, no clock.

Only the start moves. The slot keeps its nominal instant for everything a person or a key reads
(dedupe key, {slot}, {business_date}, catch-up, overlap, windows, objectives): the offset is added
in UTC after the slot is resolved (DST applied), and is bounded by the next slot, so a start never
reaches the next slot, whatever DST did to the gap between them.

The offset is a stable hash of the rule's name and the slot (hashlib, never Python's salted
hash()): the same rule starts a slot at the same offset after a restart, on every beat, and
different rules fall evenly over the spread. A rule may add a per-slot random part (`draw`, a
number in [0, 1) the caller draws; tests pass a fixed one).
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tasks.rules import schedule
from tasks.rules.reasons import Reason, code

ZERO = timedelta(0)
# The shortest gap is measured over this many slots from now, and around each DST change of the next year.
GAP_SAMPLE = 200
DST_LOOKAHEAD = timedelta(days=366)

# Why a spread is refused (the rule form, the API, import).
NOT_SHORTER_THAN_INTERVAL = code("spread.not_shorter_than_interval")  # spread, gap
NOT_SHORTER_THAN_GAP = code("spread.not_shorter_than_gap")  # spread, gap, at
NOT_SHORTER_THAN_START_WINDOW = code("spread.not_shorter_than_start_window")  # spread, window
NEGATIVE = code("spread.negative")
# How a spread is shown: beside a slot (explain, preview, status board) and in a change plan.
SECONDS = code("spread.seconds")  # n
SECONDS_FROM_POOL = code("spread.seconds_from_pool")  # n, pool
DUE_STARTED = code("spread.due_started")  # slot, started, spread
DUE_STARTS = code("spread.due_starts")  # slot, start, spread
STARTS = code("spread.starts")  # start, spread
STARTS_BETWEEN = code("spread.starts_between")  # first, last, spread
MOVED_STARTS = code("spread.moved_starts")  # old, new


@dataclass(frozen=True)
class Spread:
    """A rule's effective spread: its own, or (when it sets none) its pools' default; `pool` names
    the pool it comes from ("" for the rule's own or none)."""

    seconds: int = 0
    pool: str = ""
    random: bool = False

    def __bool__(self) -> bool:
        return self.seconds > 0


def words(spread: Spread) -> Reason:
    """The spread as a person reads it: "300 s", or "300 s from pool openai"."""
    if spread.pool:
        return Reason.of(SECONDS_FROM_POOL, n=spread.seconds, pool=spread.pool)
    return Reason.of(SECONDS, n=spread.seconds)


def effective(rule_seconds: int | None, pools: list[tuple[str, int | None]], *, random: bool = False) -> Spread:
    """The rule's spread when set (> 0); else the largest default of its pools (ties: the first
    pool by name), so a rule in a provider's pool shares that provider's spread."""
    if rule_seconds:
        return Spread(rule_seconds, "", random)
    named = sorted((name, seconds) for name, seconds in pools if seconds)
    if not named:
        return Spread(0, "", random)
    name, seconds = max(named, key=lambda p: p[1])  # max keeps the first of equals
    return Spread(seconds, name, random)


def fraction(rule_name: str, slot: datetime) -> float:
    """A stable number in [0, 1) for (rule, slot): the same on every process, beat and restart."""
    if slot.tzinfo is None:
        raise ValueError("slot must be timezone-aware")
    text = f"{rule_name}\x00{slot.astimezone(UTC).isoformat()}"
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def offset(
    rule_name: str,
    slot: datetime,
    spread: timedelta,
    *,
    next_slot: datetime | None = None,
    draw: float | None = None,
) -> timedelta:
    """The slot's start offset, in [0, spread) and before `next_slot` (the rule's following slot,
    when known): a spread longer than the gap to it (a pool's default on a frequent rule, a DST
    repeat under "both") is shrunk to that gap, so a start never moves into the next slot.

    `draw` in [0, 1) adds a per-slot random part (the rule's "random" flag); None: hash only.
    """
    if spread <= ZERO:
        return ZERO
    if next_slot is not None:
        spread = min(spread, next_slot - slot)
        if spread <= ZERO:
            return ZERO
    part = fraction(rule_name, slot)
    if draw is not None:
        part = (part + draw) % 1.0
    # Whole microseconds, strictly below the spread.
    micros = int(part * spread / timedelta(microseconds=1))
    return timedelta(microseconds=min(micros, spread // timedelta(microseconds=1) - 1))


def start(rule_name: str, slot: datetime, spread: timedelta, *, next_slot: datetime | None = None) -> datetime:
    """The planned start of a slot (hash only): what previews and the status board show."""
    return slot + offset(rule_name, slot, spread, next_slot=next_slot)


def shortest_gap(spec: schedule.ScheduleSpec, at: datetime) -> tuple[timedelta, datetime] | None:
    """The shortest time between two consecutive slots (and the first slot of that pair), over
    the next GAP_SAMPLE slots after `at` and the days around each DST change of the next year
    (where "both" repeats an hour and "shift" moves a slot next to another). None: a one-time rule,
    or fewer than two slots."""
    if spec.kind == "once":
        return None
    if spec.kind == "interval":
        return (timedelta(seconds=spec.interval_seconds or 0), at)
    slots = schedule.slots_between(spec, at, at + schedule.LOOKAHEAD, limit=GAP_SAMPLE)
    for change in _offset_changes(spec.timezone, at):
        slots += schedule.slots_between(spec, change - timedelta(days=2), change + timedelta(days=2), limit=GAP_SAMPLE)
    slots = sorted(set(slots))
    gaps = [(b - a, a) for a, b in itertools.pairwise(slots)]
    return min(gaps) if gaps else None


def refusal(
    spec: schedule.ScheduleSpec, seconds: int, *, at: datetime, start_window_seconds: int | None = None
) -> tuple[str, dict[str, Any]] | None:
    """Why a spread of `seconds` cannot be used with this schedule (a reason code and its
    params), or None. It must be shorter than the interval, the cron's shortest gap, and the
    start window (a run whose start is spread past its window would be cancelled)."""
    if seconds < 0:
        return NEGATIVE, {}
    if not seconds:
        return None
    if start_window_seconds is not None and seconds >= start_window_seconds:
        return NOT_SHORTER_THAN_START_WINDOW, {"spread": seconds, "window": start_window_seconds}
    found = shortest_gap(spec, at)
    if found is None:
        return None
    gap, first = found
    if timedelta(seconds=seconds) < gap:
        return None
    if spec.kind == "interval":
        return NOT_SHORTER_THAN_INTERVAL, {"spread": seconds, "gap": int(gap.total_seconds())}
    local = first.astimezone(schedule.validate_timezone(spec.timezone))
    return NOT_SHORTER_THAN_GAP, {"spread": seconds, "gap": int(gap.total_seconds()), "at": f"{local:%Y-%m-%d %H:%M}"}


def _offset_changes(timezone: str, at: datetime) -> list[datetime]:
    """The instants (to the hour) the zone's UTC offset changes within DST_LOOKAHEAD of `at`."""
    zone = schedule.validate_timezone(timezone)
    changes = []
    hour = at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    step = timedelta(days=1)
    offset_now = hour.astimezone(zone).utcoffset()
    end = hour + DST_LOOKAHEAD
    while hour < end:
        nxt = hour + step
        new = nxt.astimezone(zone).utcoffset()
        if new != offset_now:
            changes.append(nxt)
            offset_now = new
        hour = nxt
    return changes
