"""Schedule math for trigger rules: which instants (slots) a rule fires at.

Pure: no Django, no I/O, no clock. Every instant in and out is aware; every slot
returned is UTC. Cron is evaluated on the wall clock of the rule's IANA zone and
converted to UTC at once, with one documented behaviour for DST gaps and repeats
(see docs/schedule.md). The host's timezone never matters.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cache
from itertools import islice
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError

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
TZ_EXAMPLE = 'an IANA zone name such as "Europe/Berlin"'
# Longest interval accepted: slot arithmetic past year 9999 overflows datetime.
MAX_INTERVAL_SECONDS = 10 * 366 * 24 * 3600

Slot = tuple[datetime, str]  # (UTC instant, note explaining any DST handling)


class ScheduleError(ValueError):
    """An invalid schedule, naming the offending field; str() is "field: message"."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


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
        raise ScheduleError("timezone", f"is required: give {TZ_EXAMPLE}")
    bad = name in NON_IANA_KEYS or name.startswith(("posix/", "right/"))
    if bad or name not in _iana_names():
        hint = next((n for n in _iana_names() if n.lower() == name.lower()), None)
        extra = f'; did you mean "{hint}"?' if hint and not bad else ""
        raise ScheduleError("timezone", f"{_quoted(name)} is not a known zone: use {TZ_EXAMPLE}{extra}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError("timezone", f"{_quoted(name)} cannot be loaded ({exc})") from exc


def _quoted(text: str) -> str:
    """User input for an error message: quoted, and cut, so a 6 KB input gives a short message."""
    text = " ".join(str(text).split())
    return f'"{text[:MAX_QUOTED]}…"' if len(text) > MAX_QUOTED else f'"{text}"'


def validate_cron(expr: str) -> None:
    """Check a 5-field cron; the ScheduleError("cron", ...) names the bad field."""
    if not isinstance(expr, str) or not expr.strip():
        raise ScheduleError("cron", 'is required, e.g. "0 9 * * *"')
    parts = expr.split()
    if parts[0].startswith("@"):
        macro = CRON_MACROS.get(parts[0].lower())
        alt = f'; write "{macro}" instead' if macro else ""
        raise ScheduleError("cron", f"{_quoted(parts[0])} is not supported{alt}")
    if len(parts) != len(CRON_FIELDS):
        msg = (
            f"{_quoted(expr)} has {len(parts)} fields; only 5-field cron is accepted "
            "(minute hour day-of-month month day-of-week)"
        )
        if len(parts) in (6, 7):
            msg += "; for sub-minute schedules use an interval rule"
        raise ScheduleError("cron", msg)
    try:
        it = CronSim(expr, datetime(2000, 1, 1))  # noqa: DTZ001 - naive wall clock on purpose
        next(it)
    except CronSimError as exc:
        raise ScheduleError("cron", _explain(parts, str(exc))) from exc
    except ValueError:  # cronsim's int() of an absurdly long number
        raise ScheduleError("cron", f"{_quoted(expr)} is invalid (a field is not a cron value)") from None
    except StopIteration:
        raise ScheduleError("cron", f"{_quoted(expr)} never fires") from None


def _explain(parts: list[str], lib_msg: str) -> str:
    # cronsim says "Bad <field>"; quote the value and the allowed range too.
    field = next((f for f in CRON_FIELDS if lib_msg.lower() == f"bad {f}"), None)
    if field is None:
        return f"{_quoted(' '.join(parts))} is invalid ({lib_msg})"
    value = parts[CRON_FIELDS.index(field)]
    if field == "day-of-month":
        # cronsim also rejects days that exist in no selected month (30 Feb).
        try:
            CronSim(" ".join([*parts[:3], "*", parts[4]]), datetime(2000, 1, 1))  # noqa: DTZ001
        except CronSimError:
            pass
        else:
            return f"day-of-month {_quoted(value)} never occurs in month {_quoted(parts[3])}"
    return f"bad {field} field {_quoted(value)} (allowed: {CRON_RANGES[field]}) [{lib_msg}]"


def validate_spec(spec: ScheduleSpec) -> None:
    """Check a whole spec; ScheduleError carries the name of the first bad field."""
    if spec.kind not in KINDS:
        raise ScheduleError("kind", f"{_quoted(spec.kind)} is not one of {', '.join(KINDS)}")
    validate_timezone(spec.timezone)
    if spec.dst_gap not in DST_GAP_POLICIES:
        allowed = ", ".join(DST_GAP_POLICIES)
        raise ScheduleError("dst_gap", f"{_quoted(spec.dst_gap)} is not one of {allowed}")
    if spec.dst_repeat not in DST_REPEAT_POLICIES:
        allowed = ", ".join(DST_REPEAT_POLICIES)
        raise ScheduleError("dst_repeat", f"{_quoted(spec.dst_repeat)} is not one of {allowed}")
    if spec.kind == "cron":
        validate_cron(spec.cron)
    elif spec.kind == "interval":
        n = spec.interval_seconds
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ScheduleError("interval_seconds", f"must be a whole number >= 1, not {n!r}")
        if n > MAX_INTERVAL_SECONDS:
            raise ScheduleError("interval_seconds", f"must be at most {MAX_INTERVAL_SECONDS} (ten years), not {n}")
    elif not isinstance(spec.run_at, datetime) or _is_naive(spec.run_at):
        raise ScheduleError("run_at", "must be an aware datetime (with a timezone)")
    else:
        try:
            spec.run_at.astimezone(UTC)
        except OverflowError:
            raise ScheduleError("run_at", "is out of range: give an instant before 9999-12-31 UTC") from None


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


def preview(spec: ScheduleSpec, after: datetime, count: int) -> list[dict]:
    """The next `count` slots as {"utc", "local", "note"}; note explains DST."""
    _require_aware(after=after)
    zone = validate_timezone(spec.timezone)
    items = islice(_slots(spec, after, _far(after)), max(count, 0))
    return [{"utc": u, "local": u.astimezone(zone), "note": note} for u, note in items]


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
            yield run_at, ""
    elif spec.kind == "interval":
        step = timedelta(seconds=spec.interval_seconds)  # type: ignore[arg-type]
        # Epoch-aligned in UTC, so the zone and DST cannot move an interval slot.
        slot = EPOCH + step * ((after - EPOCH) // step + 1)
        while slot <= stop:
            yield slot, ""
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
    walls = CronSim(spec.cron, start)
    # Hour "*" (every hour) means elapsed time: run in both occurrences of a
    # repeated hour, and nothing for wall times that never happened.
    hourly = walls.hours == set(range(24))
    # A heap: under "both"/"last" a repeated hour's instants come out of order.
    pending: list[datetime] = []
    why: dict[datetime, list[tuple[str, datetime]]] = {}  # instant -> [(tag, wall)]
    while True:
        try:
            wall = next(walls)
        except StopIteration:
            floor = None
        else:
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


def _note(reasons: list[tuple[str, datetime]], local: datetime) -> str:
    """Explain a slot for operators; several gap wall times may share one instant."""
    gaps = [f"{wall:%H:%M}" for tag, wall in reasons if tag == "gap"]
    if gaps:
        verb = "does" if len(gaps) == 1 else "do"
        return f"DST gap: {', '.join(gaps)} {verb} not exist, shifted to {local:%H:%M}"
    tag, wall = reasons[0]
    return f"DST repeat: {tag} of two {wall:%H:%M}" if tag else ""


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
