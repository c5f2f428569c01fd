"""Schedule math for trigger rules: which instants (slots) a rule fires at.

Pure: no Django, no I/O, no clock. Every instant in and out is aware; every slot
returned is UTC. Cron is evaluated on the wall clock of the rule's IANA zone and
converted to UTC at once, with one documented behaviour for DST gaps and repeats
(see docs/schedule.md). The host's timezone never matters.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cache
from itertools import islice
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError

from tasks.rules.reasons import Reason, code

KINDS = ("cron", "interval", "once")
DST_GAP_POLICIES = ("shift", "skip")
DST_REPEAT_POLICIES = ("first", "last", "both")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# No slot after this: a day of margin below datetime.max, for offsets of any zone.
CALENDAR_END = datetime(9999, 12, 30, tzinfo=UTC)
# User input quoted back in an error message is cut to this many characters.
MAX_QUOTED = 60
# How far next_slot/preview look before answering "never" (a cron whose only
# wall times fall into DST gaps under "skip" would otherwise search forever).
LOOKAHEAD = timedelta(days=366 * 50)
CRON_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
CRON_RANGES = {
    "minute": "0-59",
    "hour": "0-23",
    "day-of-month": "1-31, L or LW",
    "month": "1-12 or JAN-DEC",
    "day-of-week": "0-7 or SUN-SAT (0 and 7 are Sunday), with optional # or L",
}
CRON_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Present in some zoneinfo directories but not IANA zones: they mean "whatever
# the host says", which is exactly what a rule must never depend on.
NON_IANA_KEYS = frozenset({"localtime", "Factory", "posixrules"})
# Longest interval accepted: slot arithmetic past year 9999 overflows datetime.
MAX_INTERVAL_SECONDS = 10 * 366 * 24 * 3600

# What is wrong with a schedule (tasks/sentences.py words each one).
TIMEZONE_REQUIRED = code("schedule.timezone_required")
TIMEZONE_UNKNOWN = code("schedule.timezone_unknown")  # name
TIMEZONE_UNKNOWN_HINT = code("schedule.timezone_unknown_hint")  # name, hint
TIMEZONE_UNLOADABLE = code("schedule.timezone_unloadable")  # name, error
CRON_REQUIRED = code("schedule.cron_required")
CRON_MACRO = code("schedule.cron_macro")  # macro
CRON_MACRO_ALTERNATIVE = code("schedule.cron_macro_alternative")  # macro, cron
CRON_FIELD_COUNT = code("schedule.cron_field_count")  # expr, n
CRON_FIELD_COUNT_SECONDS = code("schedule.cron_field_count_seconds")  # expr, n
CRON_NOT_A_VALUE = code("schedule.cron_not_a_value")  # expr
CRON_NEVER_FIRES = code("schedule.cron_never_fires")  # expr
CRON_INVALID = code("schedule.cron_invalid")  # expr, error (cronsim's own words)
CRON_DAY_NEVER = code("schedule.cron_day_never")  # value, month
CRON_BAD_FIELD = code("schedule.cron_bad_field")  # field, value, allowed, error
NOT_ONE_OF = code("schedule.not_one_of")  # value, allowed
INTERVAL_TOO_SMALL = code("schedule.interval_too_small")  # value
INTERVAL_TOO_LARGE = code("schedule.interval_too_large")  # max, value
RUN_AT_NAIVE = code("schedule.run_at_naive")
RUN_AT_OUT_OF_RANGE = code("schedule.run_at_out_of_range")
# What DST did to a slot (the preview's note).
DST_GAP_SHIFTED = code("schedule.dst_gap_shifted")  # wall, local
DST_GAPS_SHIFTED = code("schedule.dst_gaps_shifted")  # walls, local
DST_GAP_SKIPPED = code("schedule.dst_gap_skipped")  # wall
DST_REPEAT_FIRST = code("schedule.dst_repeat_first")  # wall
DST_REPEAT_SECOND = code("schedule.dst_repeat_second")  # wall

Slot = tuple[datetime, Reason | None]  # (UTC instant, what DST did to it; None: nothing)


class ScheduleError(ValueError):
    """An invalid schedule, naming the offending field and, as a Reason, what is wrong with it."""

    def __init__(self, field: str, name: str, /, **params: Any) -> None:
        self.field = field
        self.reason = Reason.of(name, **params)
        super().__init__(f"{field}: {self.reason}")


@dataclass(frozen=True)
class ScheduleSpec:
    """When a rule fires. Plain data; validate_spec() says whether it is usable."""

    kind: str
    timezone: str
    cron: str = ""
    interval_seconds: int | None = None
    run_at: datetime | None = None
    dst_gap: str = "shift"
    dst_repeat: str = "first"


@cache
def _iana_names() -> frozenset[str]:
    return frozenset(available_timezones())


def validate_timezone(name: str) -> ZoneInfo:
    """Return the ZoneInfo for an IANA name; never falls back to the host zone."""
    if not isinstance(name, str) or not name.strip():
        raise ScheduleError("timezone", TIMEZONE_REQUIRED)
    bad = name in NON_IANA_KEYS or name.startswith(("posix/", "right/"))
    if bad or name not in _iana_names():
        hint = next((n for n in _iana_names() if n.lower() == name.lower()), None)
        if hint and not bad:
            raise ScheduleError("timezone", TIMEZONE_UNKNOWN_HINT, name=_quoted(name), hint=hint)
        raise ScheduleError("timezone", TIMEZONE_UNKNOWN, name=_quoted(name))
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError("timezone", TIMEZONE_UNLOADABLE, name=_quoted(name), error=str(exc)) from exc


def _quoted(text: str) -> str:
    """User input for an error message: quoted, and cut, so a 6 KB input gives a short message."""
    text = " ".join(str(text).split())
    return f'"{text[:MAX_QUOTED]}…"' if len(text) > MAX_QUOTED else f'"{text}"'


def validate_cron(expr: str) -> None:
    """Check a 5-field cron; the ScheduleError("cron", ...) names the bad field."""
    if not isinstance(expr, str) or not expr.strip():
        raise ScheduleError("cron", CRON_REQUIRED)
    parts = expr.split()
    if parts[0].startswith("@"):
        macro = CRON_MACROS.get(parts[0].lower())
        if macro:
            raise ScheduleError("cron", CRON_MACRO_ALTERNATIVE, macro=_quoted(parts[0]), cron=macro)
        raise ScheduleError("cron", CRON_MACRO, macro=_quoted(parts[0]))
    if len(parts) != len(CRON_FIELDS):
        which = CRON_FIELD_COUNT_SECONDS if len(parts) in (6, 7) else CRON_FIELD_COUNT
        raise ScheduleError("cron", which, expr=_quoted(expr), n=len(parts))
    try:
        it = CronSim(expr, datetime(2000, 1, 1))  # noqa: DTZ001 - naive wall clock on purpose
        next(it)
    except CronSimError as exc:
        name, params = _explain(parts, str(exc))
        raise ScheduleError("cron", name, **params) from exc
    except ValueError:  # cronsim's int() of an absurdly long number
        raise ScheduleError("cron", CRON_NOT_A_VALUE, expr=_quoted(expr)) from None
    except StopIteration:
        raise ScheduleError("cron", CRON_NEVER_FIRES, expr=_quoted(expr)) from None


def _explain(parts: list[str], lib_msg: str) -> tuple[str, dict[str, Any]]:
    """ScheduleError's code and parameters for cronsim's complaint."""
    # cronsim says "Bad <field>"; quote the value and the allowed range too.
    field = next((f for f in CRON_FIELDS if lib_msg.lower() == f"bad {f}"), None)
    if field is None:
        return CRON_INVALID, {"expr": _quoted(" ".join(parts)), "error": lib_msg}
    value = parts[CRON_FIELDS.index(field)]
    if field == "day-of-month":
        # cronsim also rejects days that exist in no selected month (30 Feb).
        try:
            CronSim(" ".join([*parts[:3], "*", parts[4]]), datetime(2000, 1, 1))  # noqa: DTZ001
        except CronSimError:
            pass
        else:
            return CRON_DAY_NEVER, {"value": _quoted(value), "month": _quoted(parts[3])}
    return CRON_BAD_FIELD, {"field": field, "value": _quoted(value), "allowed": CRON_RANGES[field], "error": lib_msg}


def validate_spec(spec: ScheduleSpec) -> None:
    """Check a whole spec; ScheduleError carries the name of the first bad field."""
    if spec.kind not in KINDS:
        raise ScheduleError("kind", NOT_ONE_OF, value=_quoted(spec.kind), allowed=", ".join(KINDS))
    validate_timezone(spec.timezone)
    if spec.dst_gap not in DST_GAP_POLICIES:
        raise ScheduleError("dst_gap", NOT_ONE_OF, value=_quoted(spec.dst_gap), allowed=", ".join(DST_GAP_POLICIES))
    if spec.dst_repeat not in DST_REPEAT_POLICIES:
        allowed = ", ".join(DST_REPEAT_POLICIES)
        raise ScheduleError("dst_repeat", NOT_ONE_OF, value=_quoted(spec.dst_repeat), allowed=allowed)
    if spec.kind == "cron":
        validate_cron(spec.cron)
    elif spec.kind == "interval":
        n = spec.interval_seconds
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ScheduleError("interval_seconds", INTERVAL_TOO_SMALL, value=repr(n))
        if n > MAX_INTERVAL_SECONDS:
            raise ScheduleError("interval_seconds", INTERVAL_TOO_LARGE, max=MAX_INTERVAL_SECONDS, value=n)
    elif not isinstance(spec.run_at, datetime) or _is_naive(spec.run_at):
        raise ScheduleError("run_at", RUN_AT_NAIVE)
    else:
        try:
            spec.run_at.astimezone(UTC)
        except OverflowError:
            raise ScheduleError("run_at", RUN_AT_OUT_OF_RANGE) from None


def next_slot(spec: ScheduleSpec, after: datetime) -> datetime | None:
    """First slot strictly after `after`, in UTC.

    None means there is none: a one-time rule already past, or a cron with no
    slot within LOOKAHEAD (e.g. only non-existent wall times under "skip").
    """
    _require_aware(after=after)
    for slot, _note in _slots(spec, after, _far(after)):
        return slot
    return None


def slots_between(spec: ScheduleSpec, after: datetime, until: datetime, limit: int | None = None) -> list[datetime]:
    """Slots with after < slot <= until, ascending, UTC, at most the first `limit`."""
    _require_aware(after=after, until=until)
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")
    if until <= after:
        return []
    return [slot for slot, _note in islice(_slots(spec, after, until), limit)]


def local_slot(spec: ScheduleSpec, slot: datetime) -> datetime:
    """The slot on the rule zone's wall clock, aware; fold marks a repeated hour."""
    _require_aware(slot=slot)
    return slot.astimezone(validate_timezone(spec.timezone))


def slot_label(spec: ScheduleSpec, slot: datetime) -> str:
    """ISO 8601 local time with offset; a repeated hour's two slots differ."""
    return local_slot(spec, slot).isoformat()


def business_date(spec: ScheduleSpec, slot: datetime) -> date:
    """The slot's date on the rule zone's calendar."""
    return local_slot(spec, slot).date()


def preview(spec: ScheduleSpec, after: datetime, count: int) -> list[dict[str, Any]]:
    """The next `count` slots as {"utc", "local", "note"}; note is a Reason saying what DST did (or None)."""
    _require_aware(after=after)
    zone = validate_timezone(spec.timezone)
    items = islice(_slots(spec, after, _far(after)), max(count, 0))
    return [{"utc": u, "local": u.astimezone(zone), "note": note} for u, note in items]


def slots_with_notes(spec: ScheduleSpec, after: datetime, until: datetime, limit: int) -> list[Slot]:
    """(slot, what DST did to it or None) with after < slot <= until, at most the first `limit`."""
    _require_aware(after=after, until=until)
    return list(islice(_slots(spec, after, until), max(limit, 0)))


def _is_naive(dt: datetime) -> bool:
    return dt.tzinfo is None or dt.utcoffset() is None


def _require_aware(**values: datetime) -> None:
    for name, value in values.items():
        if not isinstance(value, datetime) or _is_naive(value):
            raise ValueError(f"{name} must be an aware datetime, got {value!r}")


def _far(after: datetime) -> datetime:
    try:
        return after + LOOKAHEAD
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC)


def _slots(spec: ScheduleSpec, after: datetime, stop: datetime) -> Iterator[Slot]:
    """(slot, note) with after < slot <= stop, strictly ascending, UTC."""
    validate_spec(spec)  # eagerly, not on the generator's first step
    return _until_the_calendar_ends(_generate(spec, after.astimezone(UTC), min(stop.astimezone(UTC), CALENDAR_END)))


def _until_the_calendar_ends(slots: Iterator[Slot]) -> Iterator[Slot]:
    """A schedule ends where datetime does (year 9999): stepping past it is the end, not an error."""
    try:
        yield from slots
    except OverflowError:
        return


def _generate(spec: ScheduleSpec, after: datetime, stop: datetime) -> Iterator[Slot]:
    if spec.kind == "once":
        run_at = spec.run_at.astimezone(UTC)  # type: ignore[union-attr]
        if after < run_at <= stop:
            yield run_at, None
    elif spec.kind == "interval":
        step = timedelta(seconds=spec.interval_seconds)  # type: ignore[arg-type]
        # Epoch-aligned in UTC, so the zone and DST cannot move an interval slot.
        slot = EPOCH + step * ((after - EPOCH) // step + 1)
        while slot <= stop:
            yield slot, None
            slot += step
    else:
        yield from _cron_slots(spec, after, stop)


def _cron_slots(spec: ScheduleSpec, after: datetime, stop: datetime) -> Iterator[Slot]:
    zone = ZoneInfo(spec.timezone)
    # Step the cron over NAIVE wall-clock times of the rule's zone, then map each
    # wall time to UTC ourselves: that is where DST gaps and repeats are decided.
    # Start early enough that the second occurrence of a repeated wall time that
    # lies after `after` is still seen: use the smaller of today's and tomorrow's
    # offset (the clock may fall back up to 23 hours, Kwajalein 1969).
    offset = min(_offset(zone, after), _offset(zone, after + timedelta(days=1)))
    start = (after + offset).replace(tzinfo=None) - timedelta(seconds=1)
    sim = CronSim(spec.cron, start)
    # Hour "*" (every hour) means elapsed time: run in both occurrences of a
    # repeated hour, and nothing for wall times that never happened.
    hourly = sim.hours == set(range(24))
    walls = _walls(spec.cron, sim)
    # A heap: under "both"/"last" a repeated hour's instants come out of order.
    pending: list[datetime] = []
    why: dict[datetime, list[tuple[str, datetime]]] = {}  # instant -> [(tag, wall)]
    while True:
        try:
            wall = next(walls)
        except StopIteration:
            floor = None
        else:
            if not pending:
                # Most wall times mean one instant; with nothing held back it is final at once.
                off = wall.replace(tzinfo=zone).utcoffset()
                if off == wall.replace(tzinfo=zone, fold=1).utcoffset():
                    utc = (wall - off).replace(tzinfo=UTC)  # type: ignore[operator]
                    if utc > stop:
                        return
                    if utc > after:
                        yield utc, None
                    continue
            floor, candidates = _map_wall(wall, zone, spec, hourly)
            for utc, tag in candidates:
                if after < utc <= stop:
                    if utc not in why:
                        heapq.heappush(pending, utc)
                    why.setdefault(utc, []).append((tag, wall))
        # floor never decreases and no later wall time maps below it, so every
        # pending instant before it is final.
        while pending and (floor is None or floor > stop or pending[0] < floor):
            utc = heapq.heappop(pending)
            yield utc, _note(why.pop(utc), utc.astimezone(zone))
        if floor is None or floor > stop:
            return


def _walls(expr: str, sim: CronSim) -> Iterator[datetime]:
    """The cron's naive wall times from `sim` on, ascending, as cronsim gives them. cronsim finds
    each matching day (month, day of month, day of week and their specials); within a day the
    times are every hour x minute of the expression, which no special touches. Listing them
    directly steps a per-minute cron ten times faster than asking cronsim for each."""
    times = [(h, m) for h in sorted(sim.hours) for m in sorted(sim.minutes)]
    while True:
        try:
            first = next(sim)
        except StopIteration:
            return
        for h, m in times[bisect_left(times, (first.hour, first.minute)) :]:
            yield first.replace(hour=h, minute=m)
        sim = CronSim(expr, first.replace(hour=23, minute=59))  # the next matching day's first time


def _offset(zone: ZoneInfo, instant: datetime) -> timedelta:
    return instant.astimezone(zone).utcoffset() or timedelta(0)


def _map_wall(
    wall: datetime, zone: ZoneInfo, spec: ScheduleSpec, hourly: bool
) -> tuple[datetime, list[tuple[datetime, str]]]:
    """Map one naive wall time to (earliest instant it can mean, [(slot, tag)])."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) != wall:
        # Spring forward: the wall time does not exist; fold=0/1 straddle the jump.
        end = _gap_end(zone, min(first, second), max(first, second))
        if hourly or spec.dst_gap == "skip":
            return end, []
        return end, [(end, "gap")]
    if first != second:
        # Fall back: the wall time happens twice; fold=0 is the earlier one.
        policy = "both" if hourly else spec.dst_repeat
        out = []
        if policy in ("first", "both"):
            out.append((first, "first"))
        if policy in ("last", "both"):
            out.append((second, "second"))
        return first, out
    return first, [(first, "")]


def _note(reasons: list[tuple[str, datetime]], local: datetime) -> Reason | None:
    """What DST did to a slot; several gap wall times may share one instant."""
    gaps = [f"{wall:%H:%M}" for tag, wall in reasons if tag == "gap"]
    if len(gaps) == 1:
        return Reason.of(DST_GAP_SHIFTED, wall=gaps[0], local=f"{local:%H:%M}")
    if gaps:
        return Reason.of(DST_GAPS_SHIFTED, walls=", ".join(gaps), local=f"{local:%H:%M}")
    tag, wall = reasons[0]
    return repeat_note(tag, wall)


def repeat_note(tag: str, wall: datetime) -> Reason | None:
    """Which pass of a repeated (fall-back) wall time a slot is; None outside a repeat."""
    if not tag:
        return None
    return Reason.of(DST_REPEAT_FIRST if tag == "first" else DST_REPEAT_SECOND, wall=f"{wall:%H:%M}")


def _gap_end(zone: ZoneInfo, lo: datetime, hi: datetime) -> datetime:
    """The first instant after a gap, bisected from `lo` (before) and `hi` (after)."""
    after_offset = _offset(zone, hi)
    lo_s, hi_s = int(lo.timestamp()), int(hi.timestamp())
    while hi_s - lo_s > 1:
        mid = (lo_s + hi_s) // 2
        if _offset(zone, datetime.fromtimestamp(mid, UTC)) == after_offset:
            hi_s = mid
        else:
            lo_s = mid
    return datetime.fromtimestamp(hi_s, UTC)
