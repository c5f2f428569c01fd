"""Should a due slot run now? Pure: frozen dataclasses in, a verdict out. No ORM, no I/O, no clock.

The guards are checked in a fixed order, and the first that says no decides (docs/evaluation.md):

    calendar (excluded date, weekday, business days) → business hours → start window → readiness → overlap

Every verdict is one of: RUN (a run, possibly deferred to `run_after`), HOLD (not yet: re-check at
`recheck_at`), DECIDE (a recorded decision with its reason) or FAIL (a failed run, for the readiness
"fail" policy). Together with the catch-up plan this keeps invariant 3: every slot ends in exactly
one run or one decision; a HOLD is only ever a temporary state of a slot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from tasks.rules import business_days, no_notice
from tasks.rules.reasons import Reason, code

RUN = "run"
HOLD = "hold"
DECIDE = "decide"
FAIL = "fail"

# Decision and hold reasons (the values of runs.models.Decision.Reason / SlotHold.Reason).
CALENDAR = "calendar"
OUTSIDE_WINDOW = "outside_window"
NOT_READY = "not_ready"
NOT_READY_EXPIRED = "not_ready_expired"
OVERLAP = "overlap"

WEEKDAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
# A decision's details["why"], stored with it (so these words are data, kept as they are).
WHY_EXCLUDED_DATE = "excluded date"
WHY_WEEKDAY = "weekday not allowed"
WHY_NOT_BUSINESS_DAY = "not a business day"
WHY_OUTSIDE_HOURS = "outside business hours"
WHY_NO_OPENING = "no business-hours opening"
WHY_START_WINDOW = "start window passed"
# What the static guards do to a slot ahead (describe_slot), for previews.
SLOT_RUNS = code("guards.runs")
SLOT_RUNS_IF_READY = code("guards.runs_if_ready")  # flags
SLOT_DEFERRED = code("guards.deferred")  # local
SLOT_EXCLUDED_DATE = code("guards.excluded_date")  # date
SLOT_WEEKDAY = code("guards.weekday")  # weekday
SLOT_OUTSIDE_HOURS = code("guards.outside_hours")  # hours
SLOT_NO_OPENING = code("guards.no_opening")  # hours
SLOT_START_WINDOW = code("guards.start_window")
SLOT_PAUSED = code("guards.paused")
# What a business calendar says of a slot's date (details: date, calendar, name).
SLOT_HOLIDAY = code("guards.holiday")  # date, name, calendar
SLOT_WEEKEND = code("guards.weekend")  # date, calendar
SLOT_CLOSED = code("guards.closed")  # date, name, calendar
SLOT_NO_DATA_CLOSED = code("guards.no_data_closed")  # date, calendar
SLOT_MAKEUP = code("guards.makeup")  # date, name (a Reason: what the run itself does)
SLOT_OPENED = code("guards.opened")  # date, name
SLOT_NO_DATA_OPEN = code("guards.no_data_open")  # date, calendar
# A year without its notice (tasks/rules/no_notice.py): a holiday the law fixes, or an uncertain day.
SLOT_LAW_HOLIDAY = code("guards.law_holiday")  # date, name, calendar
SLOT_MAY_BE_OFF = code("guards.may_be_off")  # runs (a Reason: what the policy does), date, name, calendar
SLOT_MAY_BE_MAKEUP = code("guards.may_be_makeup")  # runs, date, name, calendar
SLOT_UNCERTAIN_RUN = code("guards.uncertain_run")  # runs: the run-policy runs it
SLOT_UNCERTAIN_SKIP = code("guards.uncertain_skip")  # the skip policy: no run
SLOT_UNCERTAIN_HOLD = code("guards.uncertain_hold")  # runs: the hold policy waits for approval
_DAY_NO_RUN = {
    business_days.HOLIDAY: SLOT_HOLIDAY,
    business_days.WEEKEND: SLOT_WEEKEND,
    business_days.CLOSED: SLOT_CLOSED,
}
_SLOT_NO_RUN = {
    WHY_EXCLUDED_DATE: SLOT_EXCLUDED_DATE,
    WHY_WEEKDAY: SLOT_WEEKDAY,
    WHY_OUTSIDE_HOURS: SLOT_OUTSIDE_HOURS,
    WHY_NO_OPENING: SLOT_NO_OPENING,
    WHY_START_WINDOW: SLOT_START_WINDOW,
}

# Without a local deadline a waiting slot gives up after this long, so no hold lives forever.
DEFAULT_READY_WAIT = timedelta(days=1)
# A buffered slot (overlap "buffer") is re-checked on every tick after this long.
OVERLAP_RECHECK = timedelta(seconds=1)
# How far ahead a business-hours deferral looks for an opening before giving up.
MAX_DEFER_DAYS = 31


BAD_WEEKDAYS = code("guards.bad_weekdays")  # part
DATES_NOT_A_LIST = code("guards.dates_not_a_list")
BAD_DATE = code("guards.bad_date")  # item


class GuardError(ValueError):
    """A guard setting that cannot be understood; its Reason says what and how to write it."""

    def __init__(self, name: str, /, **params: Any) -> None:
        self.reason = Reason.of(name, **params)
        super().__init__(str(self.reason))


@dataclass(frozen=True)
class Guards:
    """A rule's "should it run" settings, as plain data."""

    timezone: str = "UTC"
    start_window: timedelta | None = None
    hours_start: time | None = None
    hours_end: time | None = None
    outside_hours: str = "defer"  # defer | skip | run
    weekdays: frozenset[int] | None = None  # Monday is 0; None: every day
    excluded_dates: frozenset[date] = frozenset()
    calendar: business_days.BusinessCalendar | None = None  # runs on its business days only
    depends_on: tuple[str, ...] = ()
    not_ready_policy: str = "wait"  # wait | skip | fail
    recheck: timedelta = timedelta(minutes=5)
    ready_deadline: time | None = None  # local time of day
    overlap: str = "allow"  # allow | skip | buffer


@dataclass(frozen=True)
class Facts:
    """What the service looked up for this slot at `now`."""

    missing: tuple[str, ...] = ()  # readiness flags not set for the slot's scope
    active_runs: int = 0  # runs of this rule not finished yet
    buffered: bool = False  # another slot of this rule is already buffered (overlap "buffer")
    held_as: str | None = None  # this slot's own hold reason, when re-checking a held slot


@dataclass(frozen=True)
class Verdict:
    action: str
    reason: str = ""
    run_after: datetime | None = None
    recheck_at: datetime | None = None
    deadline: datetime | None = None
    details: dict[str, Any] = field(default_factory=dict)


def evaluate_slot(
    g: Guards, slot: datetime, *, now: datetime, facts: Facts, spread: timedelta = timedelta(0)
) -> Verdict:
    """Decide what to do with one due slot at `now`. Never None: always one verdict.

    Every guard decides at the nominal slot (or the opening it is deferred to); `spread` (the
    slot's offset, tasks.rules.spread) only moves a RUN's start after that, never past the
    start window."""
    zone = ZoneInfo(g.timezone)
    local = slot.astimezone(zone)
    day = local.date()
    calendar_note: dict[str, Any] = {}

    if day in g.excluded_dates:
        return Verdict(DECIDE, CALENDAR, details={"why": WHY_EXCLUDED_DATE, "date": day.isoformat()})
    if g.weekdays is not None and local.weekday() not in g.weekdays:
        return Verdict(DECIDE, CALENDAR, details={"why": WHY_WEEKDAY, "weekday": WEEKDAY_NAMES[local.weekday()]})
    if g.calendar is not None:
        business = g.calendar.day(day)
        if not business.business:
            return Verdict(DECIDE, CALENDAR, details={"why": WHY_NOT_BUSINESS_DAY, **day_details(g.calendar, business)})
        if not business.covered:
            # Recorded on the run: explain says later that the calendar had no data for its day.
            calendar_note = {"calendar": day_details(g.calendar, business)}

    base = slot  # the nominal start the spread is added to: the slot, or the opening it is deferred to
    start = max(slot, now)
    details: dict[str, Any] = {**calendar_note}
    if not in_hours(g, local):
        if g.outside_hours == "skip":
            return Verdict(DECIDE, OUTSIDE_WINDOW, details={"why": WHY_OUTSIDE_HOURS, **_hours(g)})
        if g.outside_hours == "defer":
            opening = next_opening(g, local)
            if opening is None:
                return Verdict(DECIDE, OUTSIDE_WINDOW, details={"why": WHY_NO_OPENING, **_hours(g)})
            base, start = opening, max(opening, now)
            details["deferred_to"] = opening.isoformat()

    if g.start_window is not None and start > slot + g.start_window:
        return Verdict(
            DECIDE,
            OUTSIDE_WINDOW,
            details={
                "why": WHY_START_WINDOW,
                "latest_start": (slot + g.start_window).isoformat(),
                "earliest_start": start.isoformat(),
            },
        )

    if g.depends_on and facts.missing:
        missing = {"missing": list(facts.missing)}
        if g.not_ready_policy == "skip":
            return Verdict(DECIDE, NOT_READY, details=missing)
        if g.not_ready_policy == "fail":
            return Verdict(FAIL, NOT_READY, details=missing)
        deadline = ready_deadline_at(g, slot)
        if now >= deadline:
            return Verdict(
                DECIDE, NOT_READY_EXPIRED, deadline=deadline, details={**missing, "deadline": deadline.isoformat()}
            )
        return Verdict(HOLD, NOT_READY, recheck_at=min(now + g.recheck, deadline), deadline=deadline, details=missing)

    if facts.active_runs and g.overlap != "allow":
        if g.overlap == "buffer" and (facts.held_as == OVERLAP or not facts.buffered):
            return Verdict(HOLD, OVERLAP, recheck_at=now + OVERLAP_RECHECK, details={"active_runs": facts.active_runs})
        why = "a run is active" if g.overlap == "skip" else "a run is active and one slot is already buffered"
        return Verdict(DECIDE, OVERLAP, details={"why": why, "active_runs": facts.active_runs})

    if spread > timedelta(0):
        planned = base + spread
        if g.start_window is not None:
            planned = min(planned, slot + g.start_window)
        start = max(start, planned)
    return Verdict(RUN, run_after=start, details=details)


def in_hours(g: Guards, local: datetime) -> bool:
    """Whether a local instant is within business hours [start, end); no hours means always."""
    if g.hours_start is None or g.hours_end is None:
        return True
    return g.hours_start <= local.time().replace(tzinfo=None) < g.hours_end


def next_opening(g: Guards, local: datetime) -> datetime | None:
    """The first business-hours opening at or after `local`, on a day the calendar allows, in UTC.

    The opening is the local `hours_start` on the rule zone's wall clock (local_time_instants): in a
    repeated hour it happens twice and the first occurrence at or after the slot counts (a slot in
    the second pass waits for the second pass, not for the next day); inside a gap it is the gap's
    end (New York 02:30 on a spring-forward day opens at 03:00 EDT).
    """
    assert g.hours_start is not None
    zone = ZoneInfo(g.timezone)
    after = local.astimezone(UTC)
    first_day = local.astimezone(zone).date()
    for offset in range(MAX_DEFER_DAYS + 1):
        day = first_day + timedelta(days=offset)
        if day in g.excluded_dates or (g.weekdays is not None and day.weekday() not in g.weekdays):
            continue
        if g.calendar is not None and not g.calendar.is_business_day(day):
            continue
        for opening in local_time_instants(zone, day, g.hours_start):
            if opening >= after:
                return opening
    return None


def ready_deadline_at(g: Guards, slot: datetime) -> datetime:
    """When a waiting slot expires: the first local `ready_deadline` at or after the slot (UTC).

    Read on the wall clock like an opening: a slot in the second pass of a repeated hour expires at
    the second occurrence of the deadline the same day; a deadline inside a gap is the gap's end.
    """
    if g.ready_deadline is None:
        return slot + DEFAULT_READY_WAIT
    zone = ZoneInfo(g.timezone)
    first_day = slot.astimezone(zone).date()
    for offset in (0, 1, 2):
        for candidate in local_time_instants(zone, first_day + timedelta(days=offset), g.ready_deadline):
            if candidate >= slot:
                return candidate
    return slot + DEFAULT_READY_WAIT  # unreachable: some day within two has the time after the slot


def local_time_instants(zone: ZoneInfo, day: date, wall: time) -> list[datetime]:
    """The UTC instants (ascending) at which a local time of day happens on `day` in `zone`.

    Usually one. In a repeated hour (fall back) two: the first and the second pass. In a gap
    (spring forward), where the wall clock never reads it, one: the gap's end, the first instant
    after the jump. Compared as instants, never as wall times (PEP 495 folds).
    """
    naive = datetime.combine(day, wall.replace(tzinfo=None))
    first = naive.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = naive.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) != naive:
        # zoneinfo maps a wall time in a gap with the offsets either side of it: the jump is between.
        return [_gap_end(zone, min(first, second), max(first, second))]
    return [first] if first == second else [first, second]


def _gap_end(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The first instant with the offset in force at `after`, bisected to the second (tzdata
    transitions fall on whole seconds)."""
    target = after.astimezone(zone).utcoffset()
    lo, hi = int(before.timestamp()), int(after.timestamp())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, UTC).astimezone(zone).utcoffset() == target:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)


def describe_slot(g: Guards, slot: datetime) -> Reason:
    """What the static guards (calendar, hours, window) do to a future slot, for previews."""
    verdict = evaluate_slot(g, slot, now=slot, facts=Facts())
    if verdict.action == DECIDE:
        if verdict.details["why"] == WHY_NOT_BUSINESS_DAY:
            return calendar_reason(verdict.details)
        params = {k: v for k, v in verdict.details.items() if k != "why"}
        return Reason(_SLOT_NO_RUN[verdict.details["why"]], params)
    if verdict.run_after and verdict.run_after > slot:
        local = verdict.run_after.astimezone(ZoneInfo(g.timezone))
        runs = Reason.of(SLOT_DEFERRED, local=f"{local:%Y-%m-%d %H:%M %Z}")
    elif g.depends_on:
        runs = Reason.of(SLOT_RUNS_IF_READY, flags=", ".join(g.depends_on))
    else:
        runs = Reason.of(SLOT_RUNS)
    if g.calendar is not None:
        return describe_day(g.calendar, g.calendar.day(slot.astimezone(ZoneInfo(g.timezone)).date()), runs=runs)
    return runs


def describe_day(
    cal: business_days.BusinessCalendar, business: business_days.Day, *, runs: Reason | None = None
) -> Reason:
    """What a business day means for a slot on it: `runs`, said with why when it is no ordinary day
    (a make-up working day, an extra working day, or a date the calendar has no data for)."""
    runs = runs or Reason.of(SLOT_RUNS)
    if business.kind == business_days.UNCERTAIN:
        policy = Reason.of(SLOT_UNCERTAIN_HOLD if business.hold else SLOT_UNCERTAIN_RUN, runs=runs)
        return _uncertain(
            business.maybe,
            date=business.date.isoformat(),
            name=HolidayName(business.name),
            calendar=cal.name,
            runs=policy,
        )
    if not business.covered:
        return Reason.of(SLOT_NO_DATA_OPEN, date=business.date.isoformat(), calendar=cal.name, runs=runs)
    if business.kind in (business_days.MAKEUP, business_days.OPENED):
        code_ = SLOT_MAKEUP if business.kind == business_days.MAKEUP else SLOT_OPENED
        return Reason.of(code_, date=business.date.isoformat(), name=HolidayName(business.name), runs=runs)
    return runs


class HolidayName(str):
    """A holiday's name from a library (English): the catalogue words the ones it knows in the
    user's language (China's seven public holidays), and shows the rest as they are."""

    __slots__ = ()


def day_details(cal: business_days.BusinessCalendar, business: business_days.Day) -> dict[str, Any]:
    """A business-day decision's details: what a page or explain needs to word it again later."""
    details: dict[str, object] = {
        "date": business.date.isoformat(),
        "calendar": cal.name,
        "day": business.kind,
        "name": business.name,
    }
    if not business.covered:
        details["no_data"] = True
    if business.maybe:
        details["maybe"] = business.maybe
    if business.hold:
        details["hold"] = True
    return details


def _uncertain(maybe: str, **params: Any) -> Reason:
    return Reason(SLOT_MAY_BE_MAKEUP if maybe == no_notice.MAYBE_MAKEUP else SLOT_MAY_BE_OFF, params)


def calendar_reason(details: dict[str, Any]) -> Reason:
    """The words for a business-day decision, rebuilt from its stored details."""
    params = {"date": details.get("date", ""), "calendar": details.get("calendar", "")}
    kind = details.get("day", business_days.WEEKEND)
    name = HolidayName(details.get("name", ""))
    if kind == business_days.UNCERTAIN:
        return _uncertain(details.get("maybe", ""), **params, name=name, runs=Reason.of(SLOT_UNCERTAIN_SKIP))
    if details.get("no_data"):
        if kind == business_days.HOLIDAY:
            return Reason(SLOT_LAW_HOLIDAY, {**params, "name": name})
        return Reason(SLOT_NO_DATA_CLOSED, params)
    if kind == business_days.WEEKEND:
        return Reason(SLOT_WEEKEND, params)
    return Reason(_DAY_NO_RUN.get(kind, SLOT_HOLIDAY), {**params, "name": HolidayName(details.get("name", ""))})


def calendar_run_reason(details: dict[str, Any]) -> Reason:
    """The words for a run on a day its calendar had no data for, rebuilt from the details the run
    recorded (its payload's "calendar")."""
    params = {"date": details.get("date", ""), "calendar": details.get("calendar", "")}
    if details.get("day") == business_days.UNCERTAIN:
        policy = Reason.of(
            SLOT_UNCERTAIN_HOLD if details.get("hold") else SLOT_UNCERTAIN_RUN, runs=Reason.of(SLOT_RUNS)
        )
        return _uncertain(details.get("maybe", ""), **params, name=HolidayName(details.get("name", "")), runs=policy)
    return Reason(SLOT_NO_DATA_OPEN, {**params, "runs": Reason.of(SLOT_RUNS)})


def parse_weekdays(text: str) -> frozenset[int] | None:
    """ "mon-fri", "mon,wed,fri", "sat-sun" → Monday=0 day numbers; blank → None (every day)."""
    text = (text or "").strip().lower()
    if not text:
        return None
    days: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        ends = [e.strip()[:3] for e in part.split("-")]
        if len(ends) > 2 or not all(e in WEEKDAY_NAMES for e in ends):
            raise GuardError(BAD_WEEKDAYS, part=part)
        lo, hi = WEEKDAY_NAMES.index(ends[0]), WEEKDAY_NAMES.index(ends[-1])
        days.update(range(lo, hi + 1) if lo <= hi else [*range(lo, 7), *range(0, hi + 1)])
    return frozenset(days)


def parse_dates(values: object) -> frozenset[date]:
    """A JSON list of "YYYY-MM-DD" strings → dates; anything else is a GuardError naming the item."""
    if not isinstance(values, list):
        raise GuardError(DATES_NOT_A_LIST)
    out = set()
    for item in values:
        try:
            out.add(date.fromisoformat(item))
        except (TypeError, ValueError):
            raise GuardError(BAD_DATE, item=repr(item)) from None
    return frozenset(out)


def _hours(g: Guards) -> dict[str, Any]:
    return {"hours": f"{g.hours_start:%H:%M}-{g.hours_end:%H:%M}"}
