"""A rule's schedule ahead: its next fires, what DST and the guards do to each, and what a
wall-clock time typed for a rule (a one-time rule's run-at) means.

The one preview behind the rule page, the API and `harness preview`. Pure: no Django, no clock;
every remark is a Reason, worded by tasks/sentences.py.

A wall time The time is read on the wall clock of the rule's IANA zone, with the
rule's DST policies applied exactly as cron slots apply them (tasks/rules/schedule.py,
docs/schedule.md): a time inside a spring-forward gap moves to the first instant after the gap
under "shift" and means no instant at all under "skip"; a time in a repeated (fall-back) hour is
its first occurrence, or its second under "last". A one-time rule runs once, so "both" is the first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import TYPE_CHECKING

from tasks.rules import evaluation, schedule, spread
from tasks.rules.guards import rule_guards
from tasks.rules.reasons import Reason, code

if TYPE_CHECKING:  # for the signature only: the pure layer never imports the ORM at run time
    from tasks.models import TriggerRule

GAP = "gap"
REPEAT = "repeat"
HEARTBEAT, EVENT = "heartbeat", "event"  # the TriggerRule kinds without a schedule of their own
# How many fires "next run" looks through for one the guards let run (a week of a 10-minute cron).
NEXT_RUN_LOOKAHEAD = 1008
MAX_NEXT_RUN_DAYS = 400  # and at most this far: past it, a next run is "unknown"
# How far ahead the preview looks for the zone's offset changes, and how many it names.
DST_LOOKAHEAD_DAYS = 366
DST_CHANGES_SHOWN = 2

EVERY_N_SECONDS = code("preview.every_n_seconds")  # n
ONCE_AT = code("preview.once_at")  # local, utc
ONCE_PAST = code("preview.once_past")  # local, utc
HEARTBEAT_DEADLINE = code("preview.heartbeat_deadline")
ON_HEARTBEAT = code("preview.on_heartbeat")
ON_EVENTS = code("preview.on_events")
CLOCKS_FORWARD_SHIFT = code("preview.clocks_forward_shift")  # when, old, new
CLOCKS_FORWARD_SKIP = code("preview.clocks_forward_skip")  # when, old, new
CLOCKS_BACK = code("preview.clocks_back")  # when, old, new, repeat
NO_DST_CHANGE = code("preview.no_dst_change")  # zone
# A preview may start on a chosen date (a past or coming Spring Festival), within these years.
FROM_YEARS = (1900, 9998)
FROM_NOT_A_DATE = code("preview.from_not_a_date")
FROM_OUT_OF_RANGE = code("preview.from_out_of_range")  # first, last
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)


@dataclass(frozen=True)
class Fire:
    utc: datetime
    local: datetime
    note: Reason | None = None  # what DST did to it
    guards: Reason | None = None  # what the pause, windows and calendar do to it (None: not asked)
    start: Reason | None = None  # when its run starts, for a spread rule (None: at the slot)


@dataclass(frozen=True)
class Preview:
    fires: list[Fire]
    dst_changes: list[Reason]
    # Words for the schedule: a Reason for interval and one-time rules; None for cron, which the
    # edge words with cron-descriptor (a library with its own translations).
    description: Reason | None


class StartError(ValueError):
    """A preview's start date that cannot be used; `reason` says why."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason.code)
        self.reason = reason


def preview_start(text: str, *, timezone: str) -> datetime:
    """Where a preview from the date `text` (YYYY-MM-DD, on the rule zone's calendar) starts: just
    before the day's first instant, so a fire at midnight is listed. StartError says what is wrong;
    ScheduleError names a bad zone."""
    zone = schedule.validate_timezone(timezone)
    text = text.strip()
    try:
        if not _ISO_DATE.fullmatch(text):
            raise ValueError(text)
        day = date.fromisoformat(text)
    except ValueError:
        raise StartError(Reason.of(FROM_NOT_A_DATE)) from None
    first, last = FROM_YEARS
    if not first <= day.year <= last:
        raise StartError(Reason.of(FROM_OUT_OF_RANGE, first=first, last=last))
    # Midnight on the zone's clock; where a DST change skips it, the instant the day begins.
    return datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC) - timedelta(microseconds=1)


def schedule_preview(
    spec: schedule.ScheduleSpec,
    *,
    at: datetime,
    count: int,
    guards: evaluation.Guards | None = None,
    paused: bool = False,
    spread_of: tuple[str, spread.Spread] | None = None,
    now: datetime | None = None,
) -> Preview:
    """The next `count` fires after `at`. With `guards`, each fire says what they do to it (or, for
    a `paused` rule, that it will not run); with `spread_of` (the rule's name and spread), when its
    run starts. `now` (default `at`) says whether a one-time rule's run is past, for a preview that
    starts on another day. ScheduleError names the field of an unusable spec."""
    rows = schedule.preview(spec, at, count + 1)  # one more: a spread start is bounded by the next slot
    fires = [
        Fire(
            row["utc"],
            row["local"],
            row["note"],
            _fire_guards(guards, row["utc"], paused),
            _fire_start(spread_of, row["utc"], following["utc"] if following else None, row["local"].tzinfo),
        )
        for row, following in zip(rows[:count], [*rows[1:], None], strict=False)
    ]
    return Preview(fires, dst_changes(spec, at), _description(spec, at if now is None else now))


def _fire_start(
    spread_of: tuple[str, spread.Spread] | None, slot: datetime, following: datetime | None, zone: tzinfo | None
) -> Reason | None:
    """A spread rule's start for one fire: the hash's instant, or the range when a random part is added."""
    if spread_of is None or not spread_of[1]:
        return None
    name, chosen = spread_of
    width = timedelta(seconds=chosen.seconds)
    said = spread.words(chosen)
    if chosen.random:
        last = slot + (min(width, following - slot) if following else width)
        return Reason.of(spread.STARTS_BETWEEN, first=slot.astimezone(zone), last=last.astimezone(zone), spread=said)
    start = spread.start(name, slot, width, next_slot=following).astimezone(zone)
    return Reason.of(spread.STARTS, start=start, spread=said)


def rule_preview(rule: TriggerRule, *, at: datetime, count: int, now: datetime | None = None) -> Preview:
    """A saved rule's preview from `at`, guards applied. A heartbeat rule fires once, at its
    deadline, if no ping comes first; an event rule has no fires."""
    spec = rule.schedule_spec()
    guards, paused = rule_guards(rule), not rule.enabled
    if rule.kind == HEARTBEAT:
        fire = rule.next_fire_at
        zone = schedule.validate_timezone(rule.timezone)
        fires = (
            [Fire(fire, fire.astimezone(zone), Reason.of(HEARTBEAT_DEADLINE), _fire_guards(guards, fire, paused))]
            if fire
            else []
        )
        return Preview(fires, dst_changes(spec, at), Reason.of(ON_HEARTBEAT))
    if rule.kind == EVENT:
        return unscheduled(EVENT)
    spread_of = (rule.name, rule.start_spread()) if rule.kind in ("cron", "interval") else None
    return schedule_preview(spec, at=at, count=count, guards=guards, paused=paused, spread_of=spread_of, now=now)


def next_run(
    spec: schedule.ScheduleSpec, guards: evaluation.Guards, *, first: datetime, lookahead: int = NEXT_RUN_LOOKAHEAD
) -> datetime | None:
    """The first fire at or after `first` that the static guards (excluded dates, weekdays, the
    business calendar, hours) let run: the fire the preview marks as running, not a holiday's cron
    fire. Readiness flags and overlap are not known ahead, so they do not count. None: no fire
    among the next `lookahead` runs (say "unknown", not the cron's answer)."""
    after = first - timedelta(microseconds=1)
    for slot in schedule.slots_between(spec, after, after + timedelta(days=MAX_NEXT_RUN_DAYS), limit=lookahead):
        if evaluation.evaluate_slot(guards, slot, now=slot, facts=evaluation.Facts()).action != evaluation.DECIDE:
            return slot
    return None


def guarded(guards: evaluation.Guards) -> bool:
    """Whether a guard may decide a fire away (so the next fire may not be the next run)."""
    return bool(guards.excluded_dates or guards.weekdays is not None or guards.calendar is not None) or (
        guards.hours_start is not None and guards.outside_hours != "run"
    )


def rule_next_run(rule: TriggerRule) -> datetime | None:
    """A saved, enabled rule's next run (next_run from its next fire); its next fire when no guard
    can skip one, and for heartbeat and event rules. None: paused, nothing due, or no run ahead."""
    if not rule.enabled or rule.next_fire_at is None:
        return None
    guards = rule_guards(rule)
    if rule.kind in (HEARTBEAT, EVENT) or not guarded(guards):
        fire: datetime = rule.next_fire_at
        return fire
    return next_run(rule.schedule_spec(), guards, first=rule.next_fire_at)


def unscheduled(kind: str) -> Preview:
    """The preview of a heartbeat or event rule before it is saved: what fires it, no fires yet."""
    return Preview([], [], Reason.of(ON_HEARTBEAT if kind == HEARTBEAT else ON_EVENTS))


def _fire_guards(guards: evaluation.Guards | None, slot: datetime, paused: bool) -> Reason | None:
    if guards is None:
        return None
    if paused:
        return Reason.of(evaluation.SLOT_PAUSED)
    return evaluation.describe_slot(guards, slot)


def _description(spec: schedule.ScheduleSpec, at: datetime) -> Reason | None:
    if spec.kind == "interval":
        return Reason.of(EVERY_N_SECONDS, n=spec.interval_seconds)
    if spec.kind == "once" and spec.run_at is not None:
        run_at = spec.run_at.astimezone(UTC)  # validated: aware and in range
        local = run_at.astimezone(schedule.validate_timezone(spec.timezone))
        return Reason.of(ONCE_PAST if run_at <= at else ONCE_AT, local=local, utc=run_at)
    return None


def dst_changes(spec: schedule.ScheduleSpec, at: datetime) -> list[Reason]:
    """The zone's next offset changes within a year, and what the rule's DST policies do then."""
    zone = schedule.validate_timezone(spec.timezone)
    notes: list[Reason] = []
    day = at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    offset = day.astimezone(zone).utcoffset() or timedelta(0)
    for _day in range(DST_LOOKAHEAD_DAYS):
        nxt = day + timedelta(days=1)
        if nxt.astimezone(zone).utcoffset() != offset:
            # Bisect to the hour of the change.
            lo, hi = day, nxt
            while hi - lo > timedelta(hours=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(zone).utcoffset() == offset:
                    lo = mid
                else:
                    hi = mid
            new = nxt.astimezone(zone).utcoffset() or timedelta(0)
            values = {"when": hi.astimezone(zone).strftime("%Y-%m-%d"), "old": _fmt(offset), "new": _fmt(new)}
            if new > offset:
                forward = CLOCKS_FORWARD_SKIP if spec.dst_gap == "skip" else CLOCKS_FORWARD_SHIFT
                notes.append(Reason.of(forward, **values))
            else:
                notes.append(Reason.of(CLOCKS_BACK, **values, repeat=spec.dst_repeat))
            offset = new
            if len(notes) == DST_CHANGES_SHOWN:
                break
        day = nxt
    return notes or [Reason.of(NO_DST_CHANGE, zone=spec.timezone)]


def _fmt(offset: timedelta) -> str:
    minutes = int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


@dataclass(frozen=True)
class WallInstant:
    """What a naive wall time means in a zone. `utc` is None when it falls in a gap under "skip"."""

    wall: datetime
    timezone: str
    utc: datetime | None
    dst: str = ""  # "", GAP or REPEAT
    note: Reason | None = None

    @property
    def local(self) -> datetime | None:
        return None if self.utc is None else self.utc.astimezone(schedule.validate_timezone(self.timezone))


def wall_instant(wall: datetime, *, timezone: str, dst_gap: str = "shift", dst_repeat: str = "first") -> WallInstant:
    """Read `wall` (naive) on `timezone`'s clock. ScheduleError names the field at fault: the zone,
    a DST policy, or run_at when the instant is outside what a datetime can hold."""
    if not isinstance(wall, datetime) or wall.tzinfo is not None:
        raise ValueError(f"wall must be a naive datetime, got {wall!r}")
    zone = schedule.validate_timezone(timezone)
    placeholder = datetime(2000, 1, 1, tzinfo=UTC)  # the spec only carries the zone and the policies
    schedule.validate_spec(
        schedule.ScheduleSpec(
            kind="once", timezone=timezone, run_at=placeholder, dst_gap=dst_gap, dst_repeat=dst_repeat
        )
    )
    once = "first" if dst_repeat == "both" else dst_repeat
    spec = schedule.ScheduleSpec(kind="once", timezone=timezone, run_at=placeholder, dst_gap=dst_gap, dst_repeat=once)
    try:
        # The one place wall times become instants (cron slots go through it too), so a one-time
        # rule and a cron rule agree on every gap and repeat.
        _floor, candidates = schedule._map_wall(wall, zone, spec, False)
    except (OverflowError, ValueError):
        raise ScheduleRangeError() from None
    if not candidates:  # in a gap, under "skip"
        return WallInstant(wall, timezone, None, GAP, Reason.of(schedule.DST_GAP_SKIPPED, wall=f"{wall:%H:%M}"))
    utc, tag = candidates[0]
    if tag == "gap":
        note = Reason.of(schedule.DST_GAP_SHIFTED, wall=f"{wall:%H:%M}", local=f"{utc.astimezone(zone):%H:%M}")
        return WallInstant(wall, timezone, utc, GAP, note)
    if tag:
        return WallInstant(wall, timezone, utc, REPEAT, schedule.repeat_note(tag, wall))
    return WallInstant(wall, timezone, utc)


class ScheduleRangeError(schedule.ScheduleError):
    """The wall time is a valid datetime, but its instant is before year 1 or after 9999 UTC."""

    def __init__(self) -> None:
        super().__init__("run_at", schedule.RUN_AT_OUT_OF_RANGE)
