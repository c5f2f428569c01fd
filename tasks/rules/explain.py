"""The pure parts of "why did or didn't it run?": where the nearest real slots are, and what an
explanation says, as Reasons (tasks/sentences.py words them for the admin, the API and the CLI).

tasks/triggers/explain.py reads the records (runs, decisions, holds) and picks the Reasons; the
references below let a page turn a run, a decision or a slot into a link, and plain text into
its id or time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tasks.rules import schedule
from tasks.rules.reasons import Reason, code

# How far back explain looks for the slot before an instant that is not one. A week, so a weekly
# schedule (cron on Mondays) still names its previous slot; the search widens step by step, so a
# dense schedule (every second) never lists a week of slots to find the last one.
NEAREST_LOOKBACK = timedelta(days=7)
_LOOKBACK_STEPS = (timedelta(hours=1), timedelta(days=1), NEAREST_LOOKBACK)

NOT_A_DATETIME = code("explain.not_a_datetime")  # text, zone: the slot asked about cannot be read
# A slot that has a run.
RAN = code("explain.ran")  # run, state, source, biz_key
AWAITING_APPROVAL = code("explain.awaiting_approval")  # run: a catch-up burst (the words of older releases)
AWAITING_APPROVAL_FOR = code("explain.awaiting_approval_for")  # run, why (one of the HELD_* below)
LAST_ERROR = code("explain.last_error")  # error
STARTS_AT = code("explain.starts_at")  # at
NOT_STARTED = code("explain.not_started")  # run, waiting (the run store's words for the pool it waits for)
# A slot or trigger with a decision.
DID_NOT_RUN = code("explain.did_not_run")  # decision
DID_NOT_RUN_WHY = code("explain.did_not_run_why")  # decision, why
SHED = code("explain.shed")  # pending, pool, high, low, recoverability
ANSWERED_SO = code("explain.answered_so")  # n
# Why a late slot was not run: each cause the records show, one sentence each (missed_causes).
LATE_TICK = code("explain.late_tick")  # late (seconds), at: the first tick that reached the slot
CATCHUP_OFF = code("explain.catchup_off")
CATCHUP_TOO_LATE = code("explain.catchup_too_late")  # late, max_delay (seconds)
CATCHUP_LATEST_ONLY = code("explain.catchup_latest_only")
CATCHUP_CAPPED_AT = code("explain.catchup_capped_at")  # n
PAUSED_NOW = code("explain.paused_now")  # since
PAUSED_NOW_WHY = code("explain.paused_now_why")  # since, why
# A slot held back, or not (yet) a slot at all.
WAITING = code("explain.waiting")  # hold, recheck
WAITING_UNTIL = code("explain.waiting_until")  # hold, recheck, deadline
NOT_A_SLOT = code("explain.not_a_slot")
NEAREST_BEFORE = code("explain.nearest_before")  # slot
NEAREST_AFTER = code("explain.nearest_after")  # slot
NOT_DUE = code("explain.not_due")  # expected (a guards Reason)
NOT_DUE_PAUSED = code("explain.not_due_paused")
NOT_DUE_PAUSED_WHY = code("explain.not_due_paused_why")  # why
PAUSED_SINCE = code("explain.paused_since")  # since
PAUSED_SINCE_WHY = code("explain.paused_since_why")  # since, why
NO_RECORD_SLOT = code("explain.no_record_slot")
# A trigger, by its business key.
COALESCED = code("explain.coalesced")  # run, object, survivor, survivor_key, state
COALESCED_AWAY = code("explain.coalesced_away")  # run, object
TRIGGER_RAN = code("explain.trigger_ran")  # run, state, source, triggered_by
DEDUPE_HITS = code("explain.dedupe_hits")  # n
NO_RECORD_TRIGGER = code("explain.no_record_trigger")
# Why a run waits for an operator before it starts (held_for).
HELD_CATCHUP = code("explain.held_catchup")  # catch-up above the rule's approval threshold
HELD_UNCERTAIN_DAY = code("explain.held_uncertain_day")  # date, calendar: no notice yet, hold policy
HELD_ACTION = code("explain.held_action")  # a skill proposed an action that needs a person

# What the scheduler records in a held run's payload ("held"), one name per gate that held it.
GATE_CATCHUP = "catchup_burst"
GATE_UNCERTAIN_DAY = "uncertain_day"


@dataclass(frozen=True)
class RunRef:
    """A run, named in an explanation: its id in text, a link on a page."""

    id: int

    def __str__(self) -> str:
        return str(self.id)


@dataclass(frozen=True)
class DecisionRef:
    """A recorded decision, by its label (the reason's display name): a link on a page."""

    id: int
    label: str

    def __str__(self) -> str:
        return str(self.label)


@dataclass(frozen=True)
class SlotRef:
    """Another slot of the same rule: its time in text, a link to explain it on a page."""

    at: datetime


def nearest_slots(spec: schedule.ScheduleSpec, instant: datetime) -> tuple[datetime | None, datetime | None]:
    """The rule's last slot before `instant` (within NEAREST_LOOKBACK) and its next slot after it."""
    before = None
    for back in _LOOKBACK_STEPS:
        earlier = schedule.slots_between(spec, instant - back, instant)
        if earlier:
            before = earlier[-1]
            break
    return before, schedule.next_slot(spec, instant)


def missed_causes(*, reason: str, details: dict[str, Any], decided_at: datetime) -> list[Reason]:
    """Every cause a late slot's decision records, in order: why it was late (no tick reached it in
    time: the scheduler was down or stalled until the decision), then why it was not caught up (the
    rule's catch-up policy, its max delay, its count). Empty for a decision that is not about lateness.

    `details` is what the tick stored: late_seconds, catchup, max_delay_seconds, max_count."""
    if reason not in ("missed", "superseded", "catchup_capped"):
        return []
    late = details.get("late_seconds")
    said = []
    if isinstance(late, int | float):
        said.append(Reason.of(LATE_TICK, late=_seconds(late), at=decided_at))
    policy, max_delay = details.get("catchup"), details.get("max_delay_seconds")
    if reason == "superseded":
        said.append(Reason.of(CATCHUP_LATEST_ONLY))
    elif reason == "catchup_capped":
        said.append(Reason.of(CATCHUP_CAPPED_AT, n=details.get("max_count")))
    elif policy == "none":
        said.append(Reason.of(CATCHUP_OFF))
    elif isinstance(late, int | float) and isinstance(max_delay, int | float) and late > max_delay:
        said.append(Reason.of(CATCHUP_TOO_LATE, late=_seconds(late), max_delay=_seconds(max_delay)))
    return said


def _seconds(n: float) -> str:
    return f"{n:.0f}" if abs(n - round(n)) < 0.05 else f"{n:.1f}"


def held_gates(*, approval: bool, calendar: dict[str, Any] | None) -> list[str]:
    """The gates that hold a slot's new run for approval (recorded in its payload as "held"): a
    catch-up burst above the rule's threshold (`approval`), and a day its calendar has no notice
    for under the hold policy (`calendar`, what the calendar said of the day). [] : it starts."""
    gates = [GATE_CATCHUP] if approval else []
    if (calendar or {}).get("hold"):
        gates.append(GATE_UNCERTAIN_DAY)
    return gates


def held_for(*, source: str, attempts: int, payload: dict[str, Any]) -> list[Reason]:
    """Why a run awaiting approval waits, one Reason per gate, for the run page and explain.

    A run that has attempts waits for a skill's proposed action; one gated at claim says so in its
    payload's "held". A run claimed before that was recorded is read from what it does carry: its
    calendar note (an uncertain day under the hold policy), else its source (a catch-up burst)."""
    if attempts > 0:
        return [Reason.of(HELD_ACTION)]
    found = payload.get("calendar")
    calendar: dict[str, Any] = found if isinstance(found, dict) else {}
    gates = payload.get("held")
    if not isinstance(gates, list):
        gates = [GATE_UNCERTAIN_DAY] if calendar.get("hold") else [GATE_CATCHUP] if source == "catchup" else []
    said = []
    if GATE_CATCHUP in gates:
        said.append(Reason.of(HELD_CATCHUP))
    if GATE_UNCERTAIN_DAY in gates:
        said.append(Reason.of(HELD_UNCERTAIN_DAY, date=calendar.get("date", ""), calendar=calendar.get("calendar", "")))
    return said
