"""Is a date a business day, and why not? Pure: a calendar as plain data and a lookup, no ORM, no clock.

A business calendar is shared data (tasks.models.BusinessCalendar): a well-kept holiday library
for a country, plus local overrides (company shutdown days, extra working days), each with a
reason. The library is asked through `lookup`, a function handed in by whoever builds the
calendar (tasks/models/calendar.py), so this module imports none of them. A library that has no
data for a date (mainland China's next year before the State Council publishes it) says so by
returning None: the date is then judged by its weekday alone and `covers` is False for it, which
the rule page, /healthz and an alert report weeks ahead (calendar_gap).

One day's verdict, in the order it is decided:

    local override (closed / extra working day) → library (holiday / make-up working day) → weekend
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta

# What kind of day a date is, in a calendar (Day.kind; stored in a decision's details).
WORKDAY = "workday"  # an ordinary working day
WEEKEND = "weekend"
HOLIDAY = "holiday"  # a public holiday (or a day off in lieu), named by the library
MAKEUP = "makeup"  # a weekend day that is an official working day (调休), named after its holiday
CLOSED = "closed"  # a local override: closed on a working day (company shutdown), with a reason
OPENED = "opened"  # a local override: an extra working day, with a reason
KINDS = (WORKDAY, WEEKEND, HOLIDAY, MAKEUP, CLOSED, OPENED)

DEFAULT_WEEKEND = frozenset({5, 6})  # Saturday, Sunday (Monday is 0)
# How far next/previous_business_day look before giving up (a calendar closed for a year is broken).
MAX_SEARCH_DAYS = 366
# How far ahead a calendar must know its dates (calendar_gap): the State Council publishes the next
# year in November, so a gap 45 days before 1 January leaves weeks to update the library.
DEFAULT_HORIZON = timedelta(days=45)


@dataclass(frozen=True)
class LibraryDay:
    """What the holiday library says of one date: working or not, and the holiday it belongs to
    ("" for an ordinary day). `working` None: an ordinary day, judged by the weekend."""

    working: bool | None
    name: str = ""


# A library lookup: a date → what the library says, or None when it has no data for the date.
Lookup = Callable[[date], LibraryDay | None]


def no_library(_day: date) -> LibraryDay:
    """A calendar without a library: every date is covered and ordinary (weekend and overrides only)."""
    return LibraryDay(None)


@dataclass(frozen=True)
class Day:
    """One date in a calendar: whether it is a business day, what kind of day, and why (the
    holiday's name or the override's reason; "" for an ordinary day). `covered` False: the
    library has no data for it, so only its weekday (and any override) decided."""

    date: date
    business: bool
    kind: str
    name: str = ""
    covered: bool = True


@dataclass(frozen=True)
class BusinessCalendar:
    """A named calendar's business days. `closed` and `opened` are the local overrides (date →
    reason); `source` names the library and its version, for notes."""

    name: str
    lookup: Lookup = no_library
    weekend: frozenset[int] = DEFAULT_WEEKEND
    closed: dict[date, str] = field(default_factory=dict, hash=False)
    opened: dict[date, str] = field(default_factory=dict, hash=False)
    source: str = ""

    def day(self, d: date) -> Day:
        """The verdict for one date (see the module's order)."""
        if d in self.closed:
            return Day(d, False, CLOSED, self.closed[d])
        if d in self.opened:
            return Day(d, True, OPENED, self.opened[d])
        known = self.lookup(d)
        weekend = d.weekday() in self.weekend
        if known is None:
            return Day(d, not weekend, WEEKEND if weekend else WORKDAY, covered=False)
        if known.working is False:
            return Day(d, False, HOLIDAY if known.name else WEEKEND, known.name)
        if known.working is True and weekend:
            return Day(d, True, MAKEUP, known.name)
        if known.working is True or not weekend:
            return Day(d, True, WORKDAY)
        return Day(d, False, WEEKEND)

    def is_business_day(self, d: date) -> bool:
        return self.day(d).business

    def reason(self, d: date) -> str:
        """The holiday's name or the override's reason; "" for an ordinary day."""
        return self.day(d).name

    def covers(self, d: date) -> bool:
        """Whether the calendar knows this date (an override counts), rather than guessing by weekday."""
        return d in self.closed or d in self.opened or self.lookup(d) is not None

    def next_business_day(self, d: date) -> date:
        """The first business day strictly after `d`. ValueError if none within a year."""
        return self._step(d, 1)

    def previous_business_day(self, d: date) -> date:
        """The last business day strictly before `d` ("yesterday's data" on a Monday or after a
        holiday). ValueError if none within a year."""
        return self._step(d, -1)

    def _step(self, d: date, direction: int) -> date:
        for n in range(1, MAX_SEARCH_DAYS + 1):
            candidate = d + timedelta(days=direction * n)
            if self.is_business_day(candidate):
                return candidate
        raise ValueError(f"calendar {self.name!r} has no business day within {MAX_SEARCH_DAYS} days of {d}")


WEEKDAYS_ONLY = BusinessCalendar(name="")  # Monday to Friday, no holidays: the arithmetic without a calendar


def calendar_gap(cal: BusinessCalendar, *, today: date, horizon: timedelta = DEFAULT_HORIZON) -> date | None:
    """The first date from `today` to `today + horizon` the calendar has no data for, or None if it
    knows them all. Checked a day at a time from the end of each year, since libraries publish by year."""
    last = today + horizon
    for year in range(today.year, last.year + 1):
        first_day = max(today, date(year, 1, 1))
        if not cal.covers(first_day):
            return first_day
        end = min(last, date(year, 12, 31))
        if not cal.covers(end):
            # Data ends inside the year: find where (rare; a library publishes whole years).
            d = first_day
            while d <= end:
                if not cal.covers(d):
                    return d
                d += timedelta(days=1)
    return None


def business_dates(cal: BusinessCalendar | None, day: date) -> dict[str, str]:
    """The business-day placeholders of a key or scope for a slot on local date `day`."""
    cal = cal or WEEKDAYS_ONLY
    return {
        "business_date": day.isoformat(),
        "previous_business_date": _neighbour(cal.previous_business_day, day),
        "next_business_date": _neighbour(cal.next_business_day, day),
    }


def _neighbour(step: Callable[[date], date], day: date) -> str:
    try:
        return step(day).isoformat()
    except OverflowError:
        return ""  # before year 1 or after 9999: there is no such date to name
