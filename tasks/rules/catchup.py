"""What to do with the due slots of one rule: run, catch up, or record a decision. Pure."""

from bisect import bisect_left
from dataclasses import dataclass
from datetime import datetime, timedelta

RUN = "run"  # on time
CATCHUP = "catchup"  # late, but chosen by the catch-up policy
MISSED = "missed"  # late beyond the catch-up window, or catch-up is off
SUPERSEDED = "superseded"  # late and within the window, but a later slot runs instead
CAPPED = "catchup_capped"  # late and within the window, but beyond the max count of catch-up "all"


@dataclass(frozen=True)
class SlotPlan:
    slot: datetime
    action: str


def plan_due_slots(
    slots: list[datetime],
    *,
    now: datetime,
    catchup: str,
    max_delay: timedelta,
    grace: timedelta,
    complete: bool,
    max_count: int | None = None,
    later: int | None = None,
) -> list[SlotPlan]:
    """Classify due slots (ascending, all <= now). Each planned slot gets exactly one action (invariant 3).

    A slot claimed within `grace` of its instant is on time. Late slots follow the policy:
    "none" records them all as missed; "latest" runs only the most recent late slot that is
    within `max_delay` and not followed by an on-time slot. `complete` is False when the slot
    list was cut at a bound: then later slots exist, so none of these can be the latest.

    "all" runs every late slot within `max_delay`, but at most the `max_count` most recent ones of
    the whole outage (None: no cap); the older ones are capped, however many ticks the outage takes
    (see _plan_all). With an incomplete list, `later` is how many late slots follow it up to `now`,
    counted up to `max_count` (None: unknown, taken as at least `max_count`).

    The plan covers every slot, in order, except under "all" with a cap and an incomplete list: it
    may then be a non-empty prefix of `slots`, and the caller leaves the rest for its next tick.
    """
    if catchup == "all":
        return _plan_all(
            slots, now=now, max_delay=max_delay, grace=grace, complete=complete, max_count=max_count, later=later
        )
    plans = []
    cut = bisect_left(slots, now - grace)  # ascending: the slots from here on are on time
    late, on_time = slots[:cut], slots[cut:]
    chosen = None
    if catchup == "latest" and complete and not on_time:
        within = [s for s in late if now - s <= max_delay]
        chosen = within[-1] if within else None
    for slot in late:
        if slot == chosen:
            plans.append(SlotPlan(slot, CATCHUP))
        elif catchup == "latest" and now - slot <= max_delay:
            plans.append(SlotPlan(slot, SUPERSEDED))
        else:
            plans.append(SlotPlan(slot, MISSED))
    plans.extend(SlotPlan(s, RUN) for s in on_time)
    return plans


def _plan_all(
    slots: list[datetime],
    *,
    now: datetime,
    max_delay: timedelta,
    grace: timedelta,
    complete: bool,
    max_count: int | None,
    later: int | None,
) -> list[SlotPlan]:
    """Catch-up "all". Under a cap, a late slot is capped once at least `max_count` late slots follow
    it: nothing that falls due later can change that. When the list is complete, the most recent
    `max_count` late slots within the max delay run. When it is incomplete, the slots that might
    still be among the most recent (fewer than `max_count` late slots follow them, counting the
    `later` ones) are not planned but left for the next tick, which sees them together with every
    slot after them, including any that fell due meanwhile; so across ticks exactly the
    `max_count` most recent slots of the outage run. Only when that would plan nothing (a cap
    larger than a tick's bound) are they chosen here, counting the `later` ones."""
    within = [s for s in slots if grace < now - s <= max_delay]
    within_set = set(within)
    plan_until = len(slots)
    if max_count is None:
        chosen = set(within)
    else:
        after = 0 if complete else max_count if later is None else min(later, max_count)
        budget = max_count - after
        candidates = within[-budget:] if budget > 0 else []
        if candidates and not complete and slots.index(candidates[0]) > 0:
            plan_until = slots.index(candidates[0])
            candidates = []
        chosen = set(candidates)
    plans = []
    for slot in slots[:plan_until]:
        if now - slot <= grace:
            plans.append(SlotPlan(slot, RUN))
        elif slot in chosen:
            plans.append(SlotPlan(slot, CATCHUP))
        elif slot in within_set:
            plans.append(SlotPlan(slot, CAPPED))
        else:
            plans.append(SlotPlan(slot, MISSED))
    return plans


def pace(
    slots: list[datetime], *, now: datetime, spacing: timedelta, last: datetime | None = None
) -> dict[datetime, datetime]:
    """run_after for each catch-up slot (ascending), `spacing` apart, so an outage is replayed at a
    bounded rate rather than in one burst. The first starts at `now`, or `spacing` after `last`
    (the latest start already scheduled for a catch-up run of the rule, by an earlier tick) if
    that is later: pacing continues across ticks instead of restarting at each."""
    start = now if last is None else max(now, last + spacing)
    return {slot: start + spacing * i for i, slot in enumerate(slots)}


def needs_approval(late: int, *, threshold: int | None) -> bool:
    """Catch-up waits for an operator when more than `threshold` slots were missed (None: never)."""
    return threshold is not None and late > threshold
