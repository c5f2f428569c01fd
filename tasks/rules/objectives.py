"""Freshness objectives: by when each slot's work must be done, and whether it will be. Pure: no
ORM, no clock; `now` and the slot's state come in as plain data, a status and its cause go out.

An objective is written in the rule's zone, either as an offset from the slot ("slot + 30 min", an
elapsed time, so DST never moves it) or as a wall time on the slot's business day ("09:30"), read
on the zone's wall clock like the readiness deadline (evaluation.local_time_instants): in a gap it
is the gap's end, in a repeated hour the rule's dst_repeat policy picks the pass ("first": the
first; "last" and "both": the second, since under "both" the slot runs in the second pass too).

The status of an open slot is predicted, not only observed: expected finish = now + what remains of
the rule's usual queue wait and run time (a high percentile of its recent successful runs), given
where the slot's run is now; a run already past its usual time is expected to run as long again.
Expected after the objective: at risk, with the cause in a Reason (worded by tasks/sentences.py),
before the objective has passed. An objective may also say how long before its deadline on-call must
hear (the lead time: at risk from deadline - lead whatever the estimate) and by when the run must
have started (the latest start: a slot not started by then is at risk).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from tasks.rules.evaluation import local_time_instants
from tasks.rules.reasons import Reason, code

# Objective kinds (TriggerRule.objective).
OFFSET = "offset"
WALL = "wall"

# Statuses. EXCUSED: the slot was not meant to run (calendar, business hours, superseded by a later
# slot, coalesced): no promise to keep, counted neither as met nor as missed.
MET = "met"
ON_TRACK = "on_track"
AT_RISK = "at_risk"
BREACHED = "breached"
EXCUSED = "excused"
OPEN_STATUSES = (ON_TRACK, AT_RISK)

# Where a slot's work is now (SlotState.phase).
NOT_CLAIMED = "not_claimed"  # due, but no tick has turned it into a run or a decision yet
WAITING_READY = "waiting_ready"  # held: readiness flags not set
WAITING_OVERLAP = "waiting_overlap"  # held: buffered behind an active run of the rule
WAITING_POOL = "waiting_pool"  # a run that waits for a pool slot (concurrency)
WAITING_RATE = "waiting_rate"  # a run that waits for a pool's rate token or the provider's pause
AWAITING_APPROVAL = "awaiting_approval"  # a run held for an operator (catch-up burst, uncertain day)
QUEUED = "queued"  # a run pending (deferred, or due and waiting for a worker)
RETRYING = "retrying"  # an attempt failed; the next is due at next_try
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"  # failed for good (or cancelled): it will not finish
NOT_RUN = "not_run"  # a decision: the slot did not run
PAUSED = "paused"  # the rule is paused: the slot will not run

# Decisions that excuse a slot (runs.models.Decision.Reason values).
EXCUSING_DECISIONS = frozenset({"calendar", "outside_window", "superseded", "coalesced"})
# Phases in which the slot's run has started (an attempt ran): the latest start no longer applies.
STARTED = frozenset({RUNNING, RETRYING, SUCCEEDED})

# The estimate: a high percentile of the recent successful runs; a rule with fewer than
# MIN_SAMPLES of them gets the defaults (a minute's work after a short queue wait).
PERCENTILE = 0.9
MIN_SAMPLES = 3
SAMPLE_RUNS = 20
DEFAULT_QUEUE_WAIT = timedelta(seconds=10)
DEFAULT_RUN_TIME = timedelta(seconds=60)
# A due run that no worker on its queue has taken for this long will not start by itself; nor will a
# due slot that no scheduler tick has taken for as long.
QUEUE_STALL = timedelta(seconds=60)

# Causes: what holds the slot (the same facts `explain` names), as Reasons.
CAUSE_NOT_CLAIMED = code("objective.not_claimed")  # since
CAUSE_WAITING_READY = code("objective.waiting_ready")  # flags, since
CAUSE_WAITING_OVERLAP = code("objective.waiting_overlap")  # since
CAUSE_WAITING_POOL = code("objective.waiting_pool")  # pool, in_use, limit, ahead
CAUSE_WAITING_RATE = code("objective.waiting_rate")  # pool, until
CAUSE_AWAITING_APPROVAL = code("objective.awaiting_approval")
CAUSE_QUEUED = code("objective.queued")  # at
CAUSE_QUEUE_STALLED = code("objective.queue_stalled")  # queue, minutes
CAUSE_QUEUE_NO_WORKER = code("objective.queue_no_worker")  # queue
CAUSE_RETRYING = code("objective.retrying")  # attempt, max, kind, next
CAUSE_RUNNING = code("objective.running")  # seconds, usual
CAUSE_OVERRUN = code("objective.overrun")  # seconds, usual
CAUSE_SCHEDULER_DOWN = code("objective.scheduler_down")  # since
CAUSE_NOT_STARTED = code("objective.not_started")  # by, cause (what holds it: a Reason)
CAUSE_FAILED = code("objective.failed")  # attempt, max, kind
CAUSE_NOT_RUN = code("objective.not_run")  # decision
CAUSE_PAUSED = code("objective.paused")  # at
CAUSE_PAUSED_BY = code("objective.paused_by")  # actor, at, why
CAUSE_FINISHED = code("objective.finished")  # at
CAUSE_FINISHED_LATE = code("objective.finished_late")  # at, minutes
# The rule form's refusals.
OFFSET_NEEDED = code("objective.offset_needed")
WALL_NEEDED = code("objective.wall_needed")
NEEDS_SCHEDULE = code("objective.needs_schedule")
NEEDS_OBJECTIVE = code("objective.needs_objective")
WITHIN_OFFSET = code("objective.within_offset")  # seconds


class Calendar(Protocol):
    """Business days (a rule's calendar): the slot's business day is its local date if that is one,
    else the next one."""

    def is_business_day(self, day: date, /) -> bool: ...

    def next_business_day(self, day: date, /) -> date: ...


@dataclass(frozen=True)
class Objective:
    """A rule's promise: the latest finish of each slot."""

    kind: str  # OFFSET | WALL
    timezone: str = "UTC"
    offset: timedelta | None = None
    wall: time | None = None
    dst_repeat: str = "first"  # the rule's policy for a repeated hour
    start_before: timedelta | None = None  # latest start: this long before the deadline
    lead: timedelta | None = None  # on-call hears at least this long before the deadline


def objective_deadline(obj: Objective, slot: datetime, *, calendar: Calendar | None = None) -> datetime:
    """The latest finish for `slot` (UTC). Never before the slot.

    OFFSET: slot + offset, elapsed time (DST does not move it). WALL: the wall time on the slot's
    business day (its local date, or the next business day of `calendar`; None: every day is one);
    a wall time already past at the slot is the next business day's.
    """
    if obj.kind == OFFSET:
        return slot + (obj.offset or timedelta(0))
    assert obj.wall is not None
    zone = ZoneInfo(obj.timezone)
    day = _business_day(slot.astimezone(zone).date(), calendar)
    for _ in range(8):  # bounded: some business day within a few has the wall time after the slot
        instants = local_time_instants(zone, day, obj.wall)
        preferred = instants[-1] if obj.dst_repeat in ("last", "both") else instants[0]
        for candidate in (preferred, *instants):
            if candidate >= slot:
                return candidate
        day = _business_day(day + timedelta(days=1), calendar)
    return slot + timedelta(days=1)  # unreachable for any real calendar


def _business_day(day: date, calendar: Calendar | None) -> date:
    if calendar is None or calendar.is_business_day(day):
        return day
    return calendar.next_business_day(day)


@dataclass(frozen=True)
class Estimate:
    """How long a slot's run usually waits in the queue and runs."""

    queue_wait: timedelta = DEFAULT_QUEUE_WAIT
    run_time: timedelta = DEFAULT_RUN_TIME
    samples: int = 0


def estimate_duration(samples: Sequence[tuple[float, float]], *, percentile: float = PERCENTILE) -> Estimate:
    """The estimate from recent successful runs, each (queue wait s, run time s): the nearest-rank
    `percentile` of each. Fewer than MIN_SAMPLES runs: the defaults."""
    if len(samples) < MIN_SAMPLES:
        return Estimate(samples=len(samples))
    waits = sorted(max(0.0, w) for w, _ in samples)
    runs = sorted(max(0.0, r) for _, r in samples)
    rank = max(1, math.ceil(percentile * len(samples))) - 1
    return Estimate(timedelta(seconds=waits[rank]), timedelta(seconds=runs[rank]), len(samples))


@dataclass(frozen=True)
class SlotState:
    """Where one slot's work is at `now`, as the service read it (plain data)."""

    phase: str
    since: datetime | None = None  # when the slot entered this phase (hold, wait, run start)
    run_after: datetime | None = None  # QUEUED: when the run may start
    finished_at: datetime | None = None  # SUCCEEDED
    flags: tuple[str, ...] = ()  # WAITING_READY: the flags not set
    pool: str = ""
    in_use: int = 0
    limit: int | None = None
    ahead: int = 0  # WAITING_POOL: runs waiting before this one
    until: datetime | None = None  # WAITING_RATE
    attempt: int = 0
    max_attempts: int = 0
    error_kind: str = ""
    next_try: datetime | None = None  # RETRYING
    queue: str = ""
    consumed_at: datetime | None = None  # QUEUED: when a worker on `queue` last took work; None: none seen
    decision: str = ""  # NOT_RUN: the decision's label
    decision_reason: str = ""  # NOT_RUN: the decision's reason value
    paused_at: datetime | None = None
    paused_by: str = ""
    pause_reason: str = ""
    scheduler_down_since: datetime | None = None  # NOT_CLAIMED: the scheduler's last tick, when it stalled


@dataclass(frozen=True)
class ObjectiveStatus:
    status: str
    deadline: datetime
    cause: Reason | None = None
    expected_finish: datetime | None = None  # None: it will not finish by itself (or has finished)
    finished_at: datetime | None = None
    lateness: timedelta | None = field(default=None)  # finished or breached: how late (0 when met)


def objective_status(
    obj: Objective,
    slot: datetime,
    state: SlotState,
    *,
    now: datetime,
    estimate: Estimate | None = None,
    calendar: Calendar | None = None,
) -> ObjectiveStatus:
    """The objective status of one slot at `now`: met, on track, at risk, breached or excused.

    Finished: met when done by the deadline, else breached. Excused: a decision that the slot was not
    meant to run, or a pause an operator gave a reason for (the objective is held, as on a holiday).
    Not finished: breached once the deadline has passed; before it, at risk when the work will not
    finish by itself (paused, failed, not run, no worker on its queue, no scheduler tick for
    QUEUE_STALL), when it has not started by the latest start, or when the expected finish (or
    now + lead time, whichever is later) is after the deadline; else on track. The cause names what
    holds the slot now.
    """
    deadline = objective_deadline(obj, slot, calendar=calendar)
    zone = ZoneInfo(obj.timezone)
    if state.phase == SUCCEEDED and state.finished_at is not None:
        late = state.finished_at - deadline
        if late <= timedelta(0):
            cause = Reason.of(CAUSE_FINISHED, at=state.finished_at.astimezone(zone))
            return ObjectiveStatus(MET, deadline, cause, finished_at=state.finished_at, lateness=timedelta(0))
        cause = Reason.of(CAUSE_FINISHED_LATE, at=state.finished_at.astimezone(zone), minutes=_minutes(late))
        return ObjectiveStatus(BREACHED, deadline, cause, finished_at=state.finished_at, lateness=late)
    if state.phase == NOT_RUN and state.decision_reason in EXCUSING_DECISIONS:
        return ObjectiveStatus(EXCUSED, deadline, Reason.of(CAUSE_NOT_RUN, decision=state.decision))
    est = estimate or Estimate()
    cause, remaining = _cause_and_remaining(state, slot, est, now=now, zone=zone)
    if state.phase == PAUSED and state.pause_reason:
        return ObjectiveStatus(EXCUSED, deadline, cause)
    if now >= deadline:
        return ObjectiveStatus(BREACHED, deadline, cause, lateness=now - deadline)
    if remaining is None:
        return ObjectiveStatus(AT_RISK, deadline, cause)
    expected = now + remaining
    if obj.start_before and state.phase not in STARTED and now >= deadline - obj.start_before:
        latest = (deadline - obj.start_before).astimezone(zone)
        return ObjectiveStatus(AT_RISK, deadline, Reason.of(CAUSE_NOT_STARTED, by=latest, cause=cause), expected)
    warn_from = max(expected, now + (obj.lead or _ZERO))
    return ObjectiveStatus(AT_RISK if warn_from > deadline else ON_TRACK, deadline, cause, expected_finish=expected)


def _cause_and_remaining(
    s: SlotState, slot: datetime, est: Estimate, *, now: datetime, zone: ZoneInfo
) -> tuple[Reason, timedelta | None]:
    """What holds the slot, and how long its work should still take (None: it will not finish)."""
    q, r = est.queue_wait, est.run_time
    since = (s.since or slot).astimezone(zone)
    if s.phase == PAUSED:
        at = (s.paused_at or slot).astimezone(zone)
        if s.paused_by:
            return Reason.of(CAUSE_PAUSED_BY, actor=s.paused_by, at=at, why=s.pause_reason or "-"), None
        return Reason.of(CAUSE_PAUSED, at=at), None
    if s.phase == NOT_RUN:
        return Reason.of(CAUSE_NOT_RUN, decision=s.decision or s.decision_reason), None
    if s.phase == FAILED:
        return Reason.of(CAUSE_FAILED, attempt=s.attempt, max=s.max_attempts, kind=s.error_kind or "-"), None
    if s.phase == WAITING_READY:
        return Reason.of(CAUSE_WAITING_READY, flags=", ".join(s.flags) or "-", since=since), q + r
    if s.phase == WAITING_OVERLAP:
        return Reason.of(CAUSE_WAITING_OVERLAP, since=since), q + r
    if s.phase == AWAITING_APPROVAL:
        return Reason.of(CAUSE_AWAITING_APPROVAL), None
    if s.phase == WAITING_POOL:
        # Each round of `limit` runs ahead holds the pool for about one run time.
        rounds = math.ceil((s.ahead + 1) / s.limit) if s.limit else 0
        cause = Reason.of(
            CAUSE_WAITING_POOL, pool=s.pool, in_use=s.in_use, limit="∞" if s.limit is None else s.limit, ahead=s.ahead
        )
        return cause, rounds * r + r
    if s.phase == WAITING_RATE:
        until = s.until or now
        return Reason.of(CAUSE_WAITING_RATE, pool=s.pool, until=until.astimezone(zone)), max(until - now, _ZERO) + r
    if s.phase == RETRYING:
        next_try = s.next_try or now
        cause = Reason.of(
            CAUSE_RETRYING,
            attempt=s.attempt,
            max=s.max_attempts,
            kind=s.error_kind or "-",
            next=next_try.astimezone(zone),
        )
        return cause, max(next_try - now, _ZERO) + q + r
    if s.phase == RUNNING:
        running = max(now - (s.since or now), _ZERO)
        seconds, usual = int(running.total_seconds()), int(r.total_seconds())
        if running <= r:
            return Reason.of(CAUSE_RUNNING, seconds=seconds, usual=usual), r - running
        # Past its usual time a run is not "about to finish": the longer it has overrun, the longer
        # it is likely to go on, so expect it to run as long again (never zero, as r - running was).
        return Reason.of(CAUSE_OVERRUN, seconds=seconds, usual=usual), running
    if s.phase == QUEUED:
        start = s.run_after or now
        if start <= now and s.queue:
            idle = now - s.consumed_at if s.consumed_at is not None else None
            if idle is None and now - start >= QUEUE_STALL:
                return Reason.of(CAUSE_QUEUE_NO_WORKER, queue=s.queue), None
            if idle is not None and idle >= QUEUE_STALL and now - start >= QUEUE_STALL:
                return Reason.of(CAUSE_QUEUE_STALLED, queue=s.queue, minutes=_minutes(idle)), None
        waited = max(now - start, _ZERO)
        return Reason.of(CAUSE_QUEUED, at=start.astimezone(zone)), max(start - now, _ZERO) + max(q - waited, _ZERO) + r
    # NOT_CLAIMED (and anything unknown): at best it starts now. A stalled scheduler takes nothing:
    # the slot will not run by itself, and neither will one no tick has taken for QUEUE_STALL.
    if s.scheduler_down_since is not None:
        return Reason.of(CAUSE_SCHEDULER_DOWN, since=s.scheduler_down_since.astimezone(zone)), None
    if now - (s.since or slot) >= QUEUE_STALL:
        return Reason.of(CAUSE_NOT_CLAIMED, since=since), None
    return Reason.of(CAUSE_NOT_CLAIMED, since=since), q + r


_ZERO = timedelta(0)


def _minutes(delta: timedelta) -> int:
    return max(1, round(delta.total_seconds() / 60))


def objective_errors(
    *,
    kind: str,
    offset_seconds: int | None,
    wall: time | None,
    scheduled: bool,
    start_before_seconds: int | None = None,
    lead_seconds: int | None = None,
) -> dict[str, Any]:
    """Field -> Reasons for an objective that cannot be used; empty when none is set or all is well.
    A latest start or lead time needs an objective, and under an offset objective must be shorter than
    the offset (else every slot would be at risk from its start)."""
    errors: dict[str, list[Reason]] = {}
    extras = {"objective_start_before_seconds": start_before_seconds, "objective_lead_seconds": lead_seconds}
    if not kind:
        for name, value in extras.items():
            if value:
                errors.setdefault(name, []).append(Reason.of(NEEDS_OBJECTIVE))
        return errors
    if kind == OFFSET and offset_seconds:
        for name, value in extras.items():
            if value and value >= offset_seconds:
                errors.setdefault(name, []).append(Reason.of(WITHIN_OFFSET, seconds=offset_seconds))
    if not scheduled:
        errors.setdefault("objective", []).append(Reason.of(NEEDS_SCHEDULE))
    if kind == OFFSET and not offset_seconds:
        errors.setdefault("objective_offset_seconds", []).append(Reason.of(OFFSET_NEEDED))
    if kind == WALL and wall is None:
        errors.setdefault("objective_time", []).append(Reason.of(WALL_NEEDED))
    return errors


@dataclass(frozen=True)
class Day:
    """One local day of a rule's history: how many slots met and missed their objective."""

    day: date
    met: int = 0
    missed: int = 0

    @property
    def outcome(self) -> str:
        """ "missed" if any slot that day missed, "met" if all met, "" for a day with none."""
        return "missed" if self.missed else "met" if self.met else ""


def history_days(outcomes: Sequence[tuple[datetime, str]], *, timezone: str, today: date, days: int = 30) -> list[Day]:
    """The last `days` local days up to `today`, oldest first, from (slot, status) of closed slots:
    met counts met, breached counts missed; other statuses are not counted."""
    zone = ZoneInfo(timezone)
    counts: dict[date, list[int]] = {}
    for slot, status in outcomes:
        if status not in (MET, BREACHED):
            continue
        c = counts.setdefault(slot.astimezone(zone).date(), [0, 0])
        c[0 if status == MET else 1] += 1
    first = today - timedelta(days=days - 1)
    return [Day(d, *counts.get(d, (0, 0))) for d in (first + timedelta(days=i) for i in range(days))]
