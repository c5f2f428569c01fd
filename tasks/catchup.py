"""What to do with the due slots of one rule: run, catch up, or record a decision. Pure."""

from dataclasses import dataclass
from datetime import datetime, timedelta

RUN = "run"  # on time
CATCHUP = "catchup"  # late, but chosen by the catch-up policy
MISSED = "missed"  # late beyond the catch-up window, or catch-up is off
SUPERSEDED = "superseded"  # late and within the window, but a later slot runs instead


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
) -> list[SlotPlan]:
    """Classify due slots (ascending, all <= now). Each gets exactly one action (invariant 3).

    A slot claimed within `grace` of its instant is on time. Late slots follow the policy:
    "none" records them all as missed; "latest" runs only the most recent late slot that is
    within `max_delay` and not followed by an on-time slot. `complete` is False when the slot
    list was cut at a bound: then later slots exist, so none of these can be the latest.
    """
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
