"""A plan of a rule change, like `terraform plan`: what the edited rule would have done on the days
that already happened, and what it will do, beside the rule as it is. Pure: no Django, no clock.

The replay asks the tick's own questions with the tick's own code: which slots (schedule), when a
tick first saw each (the recorded outages), what catch-up makes of late ones (catchup.plan_due_slots)
and what the guards say (evaluation.evaluate_slot, with the readiness flags as they were recorded).
Nothing here re-implements windows, calendars, deadlines, catch-up or DST. What the records cannot
tell (a flag cleared since, time before the rule's records begin, a gap no tick is recorded in) is
answered UNKNOWN with the reason, never guessed.

tasks/triggers/plan.py reads the records into a History (a fixed number of queries) and builds
the two RuleSides; the admin, the API and `harness rules plan` word the result with
tasks/sentences.py.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import cached_property, lru_cache

from tasks.rules import catchup, evaluation, schedule
from tasks.rules.reasons import Reason, code

DEFAULT_DAYS = 14
# A slot's outcome in the replay, on the same words as the records: a run (on time or caught up),
# a decision reason (runs.models.Decision.Reason), a failed run, a slot still held, or one of these.
RUN = "run"
CATCHUP = "catchup"
FAIL = "fail"
WAITING = "waiting"
PAUSED = "paused"
PENDING = "pending"  # after the last tick: nothing decided yet
UNKNOWN = "unknown"  # the records cannot say
NONE = ""  # not a slot of this side of the plan
_CATCHUP_DECISIONS = {catchup.MISSED: "missed", catchup.SUPERSEDED: "superseded", catchup.CAPPED: "catchup_capped"}
# Recorded outcomes that prove the tick first saw the slot late, at the record's instant (an outage).
_LATE_PROOF = frozenset({CATCHUP, "missed", "superseded", "catchup_capped"})

# Why a replayed slot is UNKNOWN.
UNKNOWN_BEFORE_RECORDS = code("plan.unknown_before_records")  # since
UNKNOWN_BEFORE_SCHEDULE = code("plan.unknown_before_schedule")  # since: the rule's schedule was set then
UNKNOWN_TICK = code("plan.unknown_tick")  # after, before
UNKNOWN_FLAG = code("plan.unknown_flag")  # flags
# Consequences an operator must see before saving (dangerous ones stop `rules plan` without --allow).
BURST = code("plan.burst")  # n, first, last
# Catch-up runs at once that make a burst: one or two late slots are a catch-up, not a flood
# an operator must approve on the command line (dangerous from this many on).
BURST_AT = 3
KEY_SHAPE = code("plan.key_shape")  # old, new
DAY_AGAIN = code("plan.day_again")  # day, key
IDENTITY = code("plan.identity")  # old, new
AGENT = code("plan.agent")  # old, new
# Remarks on the plan as a whole.
NO_CHANGE = code("plan.no_change")
NOT_SCHEDULED = code("plan.not_scheduled")  # kind
OVERLAP_NOT_REPLAYED = code("plan.overlap_not_replayed")
TRUNCATED = code("plan.truncated")  # n
SAME_FUTURE = code("plan.same_future")  # days
FIRST_DIFFERENCE = code("plan.first_difference")  # day
PAST_DIFFERS = code("plan.past_differs")  # n, total
PAST_SAME = code("plan.past_same")  # total

# An outcome that is not a decision reason, in words (a decision reason is worded by the desk's label).
OUTCOME_RUN = code("plan.outcome_run")
OUTCOME_CATCHUP = code("plan.outcome_catchup")
OUTCOME_FAIL = code("plan.outcome_fail")
OUTCOME_WAITING = code("plan.outcome_waiting")
OUTCOME_PENDING = code("plan.outcome_pending")
OUTCOME_UNKNOWN = code("plan.outcome_unknown")
OUTCOME_NONE = code("plan.outcome_none")
OUTCOME_WORDS = {
    RUN: OUTCOME_RUN,
    CATCHUP: OUTCOME_CATCHUP,
    FAIL: OUTCOME_FAIL,
    WAITING: OUTCOME_WAITING,
    PENDING: OUTCOME_PENDING,
    UNKNOWN: OUTCOME_UNKNOWN,
    NONE: OUTCOME_NONE,
}

NO_FACTS = evaluation.Facts()
# Bounds, so a plan of a per-second rule stays a page: slots replayed and fires listed per side.
MAX_SLOTS = 50_000


@dataclass(frozen=True)
class RuleSide:
    """One side of the plan (the rule as it is, or as edited), as plain data and two renderers."""

    spec: schedule.ScheduleSpec | None  # None: an event or heartbeat rule (no slots of its own)
    guards: evaluation.Guards
    catchup: str = "none"
    catchup_max_delay: timedelta = timedelta(minutes=5)
    catchup_max_count: int | None = None
    kind: str = "cron"
    flag_scope: Callable[[datetime], str] = field(default=lambda slot: "", compare=False)
    biz_key: Callable[[datetime], str] = field(default=lambda slot: "", compare=False)


@dataclass(frozen=True)
class Recorded:
    """What the harness recorded for one slot of the rule: its outcome (RUN, CATCHUP, a decision
    reason, WAITING), when it was recorded (the replay only asks whether that was within the grace:
    a decision recorded on time may give its slot), and for a run its id, state and business key."""

    outcome: str
    at: datetime
    run_id: int | None = None
    decision_id: int | None = None
    state: str = ""
    biz_key: str = ""
    missing: tuple[str, ...] = ()  # a not-ready decision's missing flags


@dataclass(frozen=True)
class History:
    """The recorded facts a replay stands on, read by tasks/triggers/plan.py."""

    since: datetime  # the records begin here (the window start, or when the schedule was set)
    last_tick: datetime | None  # the scheduler's last tick: later slots are not decided yet
    records: dict[datetime, Recorded] = field(default_factory=dict)
    pauses: tuple[tuple[datetime, datetime | None], ...] = ()  # (switched off, switched on or None)
    flags: dict[tuple[str, str], datetime] = field(default_factory=dict)  # (name, scope) -> set_at, set now
    grace: timedelta = timedelta(seconds=60)
    # The scheduler's own history (runs/engine/outages.py): spans no tick ran in for longer than the grace,
    # (last tick before, first tick after), complete from `ticks_since` on (None: no tick history).
    outages: tuple[tuple[datetime, datetime], ...] = ()
    ticks_since: datetime | None = None
    # The schedule was set (edited) at `since`: earlier records belong to another schedule.
    schedule_set: bool = False

    @cached_property
    def decided_until(self) -> datetime | None:
        """How far a tick is known to have decided: its row's last tick, or the newest recorded slot
        when that is later. A tick commits its slots' runs before it records itself, and a plan read
        between the two must not call the newest slot undecided."""
        newest = max(self.records, default=None)
        if newest is not None and (self.last_tick is None or newest > self.last_tick):
            return newest
        return self.last_tick


@dataclass(frozen=True)
class Replayed:
    """One slot of the past: what the edited rule would have done, what the rule as it is recorded."""

    slot: datetime
    new: str  # the edited rule's outcome (NONE: not one of its slots)
    recorded: Recorded | None  # what was recorded (None: nothing, or not a slot of the rule as it is)
    old_slot: bool  # a slot of the rule as it is
    why: Reason | None = None  # for UNKNOWN, and the guard's words for a decision
    at: datetime | None = None  # when the edited rule would have started it (runs)
    # What the rule as it is did with a slot of its own that has no record: PENDING after the last
    # tick (nothing decided yet, on either side), else UNKNOWN.
    unrecorded: str = UNKNOWN
    # False before the records of the rule as it is begin (before its schedule was set): neither
    # side can be told, whatever another schedule recorded then, so the two are not compared.
    compared: bool = True

    @property
    def current(self) -> str:
        if not self.compared:
            return UNKNOWN
        if not self.old_slot:
            return NONE
        return self.recorded.outcome if self.recorded else self.unrecorded

    @property
    def differs(self) -> bool:
        return self.compared and self.new != self.current


@dataclass(frozen=True)
class FutureFire:
    """A fire ahead. What the guards do to it is worked out when asked (a page lists a few hundred of
    twenty thousand), and not at all where both rules fire with the same guards."""

    utc: datetime
    local: datetime
    note: Reason | None  # what DST did to it
    old_guards: evaluation.Guards | None  # the rule as it is fires then under these (None: no fire)
    new_guards: evaluation.Guards | None

    @cached_property
    def old(self) -> Reason | None:
        """What the guards do to it under the rule as it is (None: not its fire)."""
        return evaluation.describe_slot(self.old_guards, self.utc) if self.old_guards is not None else None

    @cached_property
    def new(self) -> Reason | None:
        if self.new_guards is self.old_guards:
            return self.old
        return evaluation.describe_slot(self.new_guards, self.utc) if self.new_guards is not None else None

    @cached_property
    def old_outcome(self) -> str:
        """The outcome under the rule as it is, in the past half's words (RUN, a decision reason, NONE)."""
        return fire_outcome(self.old_guards, self.utc)

    @cached_property
    def new_outcome(self) -> str:
        if self.new_guards is self.old_guards:
            return self.old_outcome
        return fire_outcome(self.new_guards, self.utc)

    @property
    def differs(self) -> bool:
        """Whether the fire goes otherwise: its outcome, as the past half compares it, not its words
        (narrowed hours say other hours for a fire that is skipped either way)."""
        if (self.old_guards is None) != (self.new_guards is None):
            return True
        return self.old_guards is not self.new_guards and self.old_outcome != self.new_outcome


def fire_outcome(guards: evaluation.Guards | None, utc: datetime) -> str:
    """What the static guards make of a fire ahead, as an outcome of the replay: RUN (on time,
    deferred, or if ready), a decision reason, or NONE (not a fire)."""
    if guards is None:
        return NONE
    return _outcome(evaluation.evaluate_slot(guards, utc, now=utc, facts=NO_FACTS))[0]


@dataclass(frozen=True)
class Consequence:
    said: Reason
    dangerous: bool


@dataclass(frozen=True)
class Plan:
    changes: list[tuple[str, object, object]]  # (field, as it is, as edited)
    past: list[Replayed]
    future: list[FutureFire]
    first_difference: date | None  # the first local day the future fires differ
    consequences: list[Consequence]
    remarks: list[Reason]
    days: int

    @property
    def dangerous(self) -> bool:
        return any(c.dangerous for c in self.consequences)

    @property
    def past_differences(self) -> list[Replayed]:
        return [r for r in self.past if r.differs]


def replay(
    side: RuleSide,
    history: History,
    *,
    until: datetime,
    since: datetime,
    slots: list[datetime] | None = None,
    old_slots: set[datetime] | frozenset[datetime] = frozenset(),
) -> dict[datetime, Replayed]:
    """What `side` would have decided for each of its slots in (since, until], from the records.

    The `since` of the window may be earlier than the records (`history.since`): those slots are
    UNKNOWN. Slots are read as the tick reads them; each is seen first at its own instant, or, in a
    recorded outage, by the tick that ended it (all of an outage's slots are planned together, as
    that tick planned them). `slots`: the side's slots in the window, if known; `old_slots`: the
    slots of the rule as it is (their rows say so).
    """
    if side.spec is None:
        return {}
    if slots is None:
        slots = schedule.slots_between(side.spec, since, until, limit=MAX_SLOTS)
    outages = _outages(history)
    starts = [start for start, _end, _on_time in outages]
    ends = {end for _start, end, _on_time in outages} | {end for _start, end in history.outages}
    ticked = [start for start, _end in history.outages]
    proven = sorted(history.records)
    records, last_tick = history.records, history.decided_until
    out: dict[datetime, Replayed] = {}
    by_tick: dict[datetime, list[datetime]] = {}
    before = Reason.of(UNKNOWN_BEFORE_SCHEDULE if history.schedule_set else UNKNOWN_BEFORE_RECORDS, since=history.since)
    for slot in slots:
        rec = records.get(slot)
        old = slot in old_slots
        if slot <= history.since:
            out[slot] = Replayed(slot, UNKNOWN, rec, old, before, compared=False)
        elif history.pauses and _paused(history, slot):
            # A slot skipped while off is recorded "paused" when the rule is switched back on.
            out[slot] = Replayed(slot, PAUSED, rec, old, unrecorded=PAUSED)
        elif last_tick is None or slot > last_tick:
            # Nothing decided yet on either side: the tick that comes next decides (catch-up).
            out[slot] = Replayed(slot, PENDING, rec, old, unrecorded=PENDING)
        else:
            seen: datetime | None
            if history.ticks_since is not None and slot > history.ticks_since:
                # The scheduler's own history says when a tick first saw the slot.
                seen, gap = _seen_by_ticks(slot, history.outages, ticked), None
            else:
                seen, gap = _seen_at(slot, outages, starts) if outages else (slot, None)
                if seen == slot and rec is None:
                    # Before the tick history only the rule's own records prove a tick: a slot of
                    # the edited rule alone (a retime) may have fallen in an outage no record shows.
                    gap = _unproven(slot, proven, history)
                    seen = None
            if seen is None:
                assert gap is not None
                out[slot] = Replayed(slot, UNKNOWN, rec, old, Reason.of(UNKNOWN_TICK, after=gap[0], before=gap[1]))
            elif seen == slot and slot not in ends:
                # Seen at its own instant and by no tick ending an outage: on time, nothing for
                # catch-up to decide.
                outcome, why, at = _guarded(side, history, slot, seen=slot, recorded=rec)
                out[slot] = Replayed(slot, outcome, rec, old, why, at)
            else:
                by_tick.setdefault(seen, []).append(slot)
    for seen, group in by_tick.items():
        plans = catchup.plan_due_slots(
            group,
            now=seen,
            catchup=side.catchup,
            max_delay=side.catchup_max_delay,
            grace=history.grace,
            complete=True,
            max_count=side.catchup_max_count,
        )
        for p in plans:
            rec = records.get(p.slot)
            old = p.slot in old_slots
            if p.action in _CATCHUP_DECISIONS:
                out[p.slot] = Replayed(p.slot, _CATCHUP_DECISIONS[p.action], rec, old)
            else:
                outcome, why, at = _guarded(side, history, p.slot, seen=seen, recorded=rec)
                if outcome == RUN and p.action == catchup.CATCHUP:
                    outcome = CATCHUP
                out[p.slot] = Replayed(p.slot, outcome, rec, old, why, at)
    return out


def _guarded(
    side: RuleSide, history: History, slot: datetime, *, seen: datetime, recorded: Recorded | None
) -> tuple[str, Reason | None, datetime | None]:
    """The guards' verdict on a slot first seen at `seen`; a readiness wait is followed to the
    check that saw the flags set, or to the deadline. (outcome, why, start)."""
    g = side.guards
    if not g.depends_on:
        return _outcome(evaluation.evaluate_slot(g, slot, now=seen, facts=NO_FACTS))
    scope = side.flag_scope(slot)
    set_at = [history.flags.get((name, scope)) for name in g.depends_on]
    # A flag not set now may have been set then and cleared since (clearing keeps no row): only a
    # not-ready record of this very slot and scope says it was missing then.
    recorded_missing = recorded is not None and recorded.outcome in ("not_ready", "not_ready_expired", WAITING)
    unknown = [n for n, at in zip(g.depends_on, set_at, strict=True) if at is None]

    def missing(at: datetime) -> tuple[str, ...]:
        return tuple(n for n, s in zip(g.depends_on, set_at, strict=True) if s is None or s > at)

    verdict = evaluation.evaluate_slot(g, slot, now=seen, facts=evaluation.Facts(missing=missing(seen)))
    if verdict.action == evaluation.HOLD and verdict.reason == evaluation.NOT_READY:
        if unknown and not recorded_missing:
            return UNKNOWN, Reason.of(UNKNOWN_FLAG, flags=", ".join(unknown)), None
        deadline = verdict.deadline
        assert deadline is not None
        ready = max(s for s in set_at if s is not None) if not unknown else None
        check = deadline
        if ready is not None and ready < deadline:
            # The holds are re-checked every `recheck` from the first look, up to the deadline.
            steps = math.ceil(max((ready - seen) / g.recheck, 0))
            check = min(seen + g.recheck * steps, deadline)
        if history.decided_until is None or check > history.decided_until:
            return WAITING, None, None
        verdict = evaluation.evaluate_slot(g, slot, now=check, facts=evaluation.Facts(missing=missing(check)))
    if verdict.reason in ("not_ready", "not_ready_expired") and unknown and not recorded_missing:
        return UNKNOWN, Reason.of(UNKNOWN_FLAG, flags=", ".join(unknown)), None
    return _outcome(verdict)


def _outcome(verdict: evaluation.Verdict) -> tuple[str, Reason | None, datetime | None]:
    if verdict.action in (evaluation.RUN, evaluation.HOLD):  # a HOLD here is an overlap buffer: no active runs
        return RUN, None, verdict.run_after
    if verdict.action == evaluation.FAIL:
        return FAIL, None, None
    return verdict.reason, None, None


def _outages(history: History) -> list[tuple[datetime, datetime, datetime]]:
    """Spans no tick ran in, proven by slots first seen late: (earliest late slot, the tick that saw
    them, the last slot seen on time before them), by start."""
    ends: dict[datetime, datetime] = {}
    for slot, rec in history.records.items():
        if rec.outcome in _LATE_PROOF and rec.at - slot > history.grace:
            ends[rec.at] = min(slot, ends.get(rec.at, slot))
    on_time = sorted(s for s, r in history.records.items() if r.at - s <= history.grace)
    out = []
    for start, end in sorted((start, end) for end, start in ends.items()):
        k = bisect_left(on_time, start)
        out.append((start, end, on_time[k - 1] if k else history.since))
    return out


def _seen_at(
    slot: datetime, outages: list[tuple[datetime, datetime, datetime]], starts: list[datetime]
) -> tuple[datetime | None, tuple[datetime, datetime] | None]:
    """When a tick first saw the slot: its own instant, or the end of the outage it fell in. (None,
    (after, before)) when no tick is recorded between the last slot seen on time and an outage."""
    i = bisect_right(starts, slot)
    if i and slot < outages[i - 1][1]:
        return outages[i - 1][1], None
    if i < len(outages):
        start, _end, last_on_time = outages[i]
        # Between the last on-time record before the outage and its first late slot the outage may
        # already have begun: the records cannot say when.
        if slot > last_on_time:
            return None, (last_on_time, start)
    return slot, None


def _unproven(slot: datetime, proven: list[datetime], history: History) -> tuple[datetime, datetime]:
    """The recorded slots either side of a slot no record proves a tick saw: (after, before)."""
    k = bisect_left(proven, slot)
    after = proven[k - 1] if k else history.since
    before = proven[k] if k < len(proven) else (history.decided_until or slot)
    return after, before


def _seen_by_ticks(slot: datetime, outages: tuple[tuple[datetime, datetime], ...], starts: list[datetime]) -> datetime:
    """When a tick first saw the slot, from the recorded outages (by start): the first tick after
    the outage it fell in, or its own instant."""
    i = bisect_left(starts, slot)  # outages that began before the slot
    if i and slot <= outages[i - 1][1]:
        return outages[i - 1][1]
    return slot


def _paused(history: History, slot: datetime) -> bool:
    # A resumed rule records its skipped slots as "paused": those in (switched off, switched on].
    return any(off < slot and (on is None or slot <= on) for off, on in history.pauses)


def past(old: RuleSide, new: RuleSide, history: History, *, now: datetime, days: int) -> list[Replayed]:
    """The last `days` days, slot by slot over both rules' slots: the edited rule's replayed outcome
    beside what was recorded for the rule as it is."""
    since = now - timedelta(days=days)
    old_slots = set(_span(old.spec, now, days)[0]) if old.spec else set()
    new_slots = _span(new.spec, now, days)[0] if new.spec else []
    rows = replay(new, history, until=now, since=since, slots=new_slots, old_slots=old_slots)
    last_tick = history.decided_until
    for slot in old_slots.difference(rows):
        if history.pauses and _paused(history, slot):
            unrecorded = PAUSED
        else:
            unrecorded = PENDING if last_tick is None or slot > last_tick else UNKNOWN
        rows[slot] = Replayed(
            slot, NONE, history.records.get(slot), True, unrecorded=unrecorded, compared=slot > history.since
        )
    return [rows[slot] for slot in sorted(rows)]


def future(old: RuleSide, new: RuleSide, *, now: datetime, days: int) -> tuple[list[FutureFire], date | None]:
    """The next `days` days of fires of both, side by side, and the first local day (in the edited
    rule's zone) on which they differ (None: the same fires with the same guards)."""
    old_fires = _fires(old, now, days)
    new_fires = _fires(new, now, days)
    spec = new.spec or old.spec
    zone = schedule.validate_timezone(spec.timezone) if spec is not None else None
    # The same guards on both sides are one object, so a fire of both is told the same at once.
    new_guards = old.guards if old.guards == new.guards else new.guards
    rows = []
    first: date | None = None
    for utc in sorted(old_fires.keys() | new_fires.keys()):
        o, n = old_fires.get(utc), new_fires.get(utc)
        local = utc.astimezone(zone) if zone else utc
        note = n if n is not None else o
        row = FutureFire(
            utc, local, note, old.guards if utc in old_fires else None, new_guards if utc in new_fires else None
        )
        if first is None and row.differs:
            first = local.date()
        rows.append(row)
    return rows, first


def _fires(side: RuleSide, now: datetime, days: int) -> dict[datetime, Reason | None]:
    """The side's fires in (now, now + days] and what DST did to each."""
    if side.spec is None:
        return {}
    return dict(_span(side.spec, now, days)[1])


# Both sides of a plan usually share their schedule: it is stepped once, over the past and the
# future together (the two ends of one window), and split at now.
@lru_cache(maxsize=4)
def _span(spec: schedule.ScheduleSpec, now: datetime, days: int) -> tuple[list[datetime], list[schedule.Slot]]:
    """The slots in (now - days, now] (at most MAX_SLOTS) and the fires with their DST notes in
    (now, now + days] (at most MAX_SLOTS)."""
    window = timedelta(days=days)
    rows = schedule.slots_with_notes(spec, now - window, now + window, 2 * MAX_SLOTS)
    k = bisect_right(rows, now, key=lambda row: row[0])
    ahead = rows[k : k + MAX_SLOTS]
    if len(rows) == 2 * MAX_SLOTS and len(ahead) < MAX_SLOTS:  # the window was cut before its end
        ahead = schedule.slots_with_notes(spec, now, now + window, MAX_SLOTS)
    return [slot for slot, _note in rows[: min(k, MAX_SLOTS)]], ahead


def due_slots(spec: schedule.ScheduleSpec, first: datetime, now: datetime, *, days: int) -> list[datetime]:
    """The slots from `first` (a slot) to `now`; read from the past's slots when they cover them."""
    if first > now - timedelta(days=days):
        return [s for s in _span(spec, now, days)[0] if s >= first]
    return [first, *schedule.slots_between(spec, first, now, limit=MAX_SLOTS)]


def burst(side: RuleSide, *, due: list[datetime], now: datetime, grace: timedelta) -> list[datetime]:
    """The slots the next tick would run at once (catch-up), of the slots due and not yet handled."""
    if not due:
        return []
    plans = catchup.plan_due_slots(
        due,
        now=now,
        catchup=side.catchup,
        max_delay=side.catchup_max_delay,
        grace=grace,
        complete=True,
        max_count=side.catchup_max_count,
    )
    return [p.slot for p in plans if p.action in (catchup.RUN, catchup.CATCHUP)]


def burst_consequence(fresh: list[datetime]) -> Consequence | None:
    """The catch-up an edit would newly start at once (`fresh`, by slot): said whenever there is
    one, dangerous only from BURST_AT runs on (None: nothing new would run)."""
    if not fresh:
        return None
    said = Reason.of(BURST, n=len(fresh), first=fresh[0], last=fresh[-1])
    return Consequence(said, len(fresh) >= BURST_AT)


def key_consequences(
    old: RuleSide,
    new: RuleSide,
    *,
    slots: list[datetime],
    old_slots: list[datetime],
    ran: dict[date, set[str]],
    day_of: Callable[[datetime], date],
) -> list[Consequence]:
    """Dedupe keys whose shape changes: the edited rule's next `slots` keyed otherwise than the rule
    as it is keys them, or a business day that already ran (`ran`: day -> keys run) given a key that
    neither ran nor is due under the rule as it is (its `old_slots`), so the same day would run twice."""
    out: list[Consequence] = []
    for slot in slots:
        before, after = old.biz_key(slot), new.biz_key(slot)
        if before != after:
            out.append(Consequence(Reason.of(KEY_SHAPE, old=before, new=after), True))
            break
    due_anyway = {old.biz_key(s) for s in old_slots}
    for slot in slots:
        day = day_of(slot)
        key = new.biz_key(slot)
        if ran.get(day) and key not in ran[day] and key not in due_anyway:
            out.append(Consequence(Reason.of(DAY_AGAIN, day=day.isoformat(), key=key), True))
            break
    return out


def changes(old: dict[str, object], new: dict[str, object]) -> list[tuple[str, object, object]]:
    """The field-by-field diff of two rules' exported values, in the order of `new`."""
    return [(name, old.get(name), value) for name, value in new.items() if old.get(name) != value]
