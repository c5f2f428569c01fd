"""What to do with the due slots of one rule: run, catch up, or record a decision. Pure."""

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
) -> list[SlotPlan]:
    """Classify due slots (ascending, all <= now). Each gets exactly one action (invariant 3).

    A slot claimed within `grace` of its instant is on time. Late slots follow the policy:
    "none" records them all as missed; "latest" runs only the most recent late slot that is
    within `max_delay` and not followed by an on-time slot. `complete` is False when the slot
    list was cut at a bound: then later slots exist, so none of these can be the latest.
    "all" runs every late slot within `max_delay`, but at most the `max_count` most recent ones
    (None: no cap); the older ones are capped. With an incomplete list the more recent slots are
    still to come, so under a cap these are all capped.
    """
    if catchup == "all":
        return _plan_all(slots, now=now, max_delay=max_delay, grace=grace, complete=complete, max_count=max_count)
    plans = []
    on_time = [s for s in slots if now - s <= grace]
    late = [s for s in slots if now - s > grace]
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


def _plan_all(slots, *, now, max_delay, grace, complete, max_count) -> list[SlotPlan]:
    within = [s for s in slots if grace < now - s <= max_delay]
    if max_count is None:
        chosen = set(within)
    elif not complete:
        chosen = set()
    else:
        chosen = set(within[-max_count:]) if max_count else set()
    plans = []
    for slot in slots:
        if now - slot <= grace:
            plans.append(SlotPlan(slot, RUN))
        elif slot in chosen:
            plans.append(SlotPlan(slot, CATCHUP))
        elif slot in within:
            plans.append(SlotPlan(slot, CAPPED))
        else:
            plans.append(SlotPlan(slot, MISSED))
    return plans


def pace(slots: list[datetime], *, now: datetime, spacing: timedelta) -> dict[datetime, datetime]:
    """run_after for each catch-up slot (ascending): the first now, each next `spacing` later, so an
    outage is replayed at a bounded rate rather than in one burst."""
    return {slot: now + spacing * i for i, slot in enumerate(slots)}


def needs_approval(late: int, *, threshold: int | None) -> bool:
    """Catch-up waits for an operator when more than `threshold` slots were missed (None: never)."""
    return threshold is not None and late > threshold
