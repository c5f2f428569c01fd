"""Is a date a business day, and why not? Pure: a calendar as plain data and a lookup, no ORM, no clock.

A business calendar is shared data (tasks.models.BusinessCalendar): a well-kept holiday library
for a country, plus local overrides (company shutdown days, extra working days), each with a
reason. The library is asked through `lookup`, a function handed in by whoever builds the
calendar (tasks/models/calendar.py), so this module imports none of them. A library that has no
data for a date (mainland China's next year before the State Council publishes it) says so by
returning None: `covers` is False for it, which the rule page, /healthz and an alert report weeks
ahead (calendar_gap). Such a date is then judged by `guess` where the calendar has one (mainland
China: the holidays the law fixes, and the days a notice usually moves, tasks/rules/no_notice.py),
else by its weekday alone. A day the notice may move is UNCERTAIN, and the calendar's policy for
uncertain days decides: run it, skip it, or hold its runs for approval.

One day's verdict, in the order it is decided:

    local override (closed / extra working day) → library (holiday / make-up working day) → weekend
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta

from tasks.rules.no_notice import Guess

# What kind of day a date is, in a calendar (Day.kind; stored in a decision's details).
WORKDAY = "workday"  # an ordinary working day
WEEKEND = "weekend"
HOLIDAY = "holiday"  # a public holiday (or a day off in lieu), named by the library
MAKEUP = "makeup"  # a weekend day that is an official working day (调休), named after its holiday
CLOSED = "closed"  # a local override: closed on a working day (company shutdown), with a reason
OPENED = "opened"  # a local override: an extra working day, with a reason
UNCERTAIN = "uncertain"  # no notice yet: a day the notice may bridge or make a working day (Day.maybe)
KINDS = (WORKDAY, WEEKEND, HOLIDAY, MAKEUP, CLOSED, OPENED, UNCERTAIN)

# What a calendar does on an uncertain day (BusinessCalendar.uncertain).
POLICY_RUN = "run"  # runs, like a working day (a possible make-up weekend day too)
POLICY_SKIP = "skip"  # no run (a decision says why)
POLICY_HOLD = "hold"  # the run waits for an operator's approval
POLICIES = (POLICY_RUN, POLICY_SKIP, POLICY_HOLD)

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
# For a date the library has no data for: a holiday the law fixes or an uncertain day, else None.
Guesser = Callable[[date], Guess | None]


def no_library(_day: date) -> LibraryDay:
    """A calendar without a library: every date is covered and ordinary (weekend and overrides only)."""
    return LibraryDay(None)


@dataclass(frozen=True)
class Day:
    """One date in a calendar: whether it is a business day, what kind of day, and why (the
    holiday's name or the override's reason; "" for an ordinary day). `covered` False: the
    library has no data for it, so the law's holidays and its weekday decided. An UNCERTAIN day
    says what it may turn out to be (`maybe`, no_notice.MAYBE_*) and `hold`s its runs for approval
    under the hold policy."""

    date: date
    business: bool
    kind: str
    name: str = ""
    covered: bool = True
    maybe: str = ""
    hold: bool = False


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
    guess: Guesser | None = None
    uncertain: str = POLICY_HOLD

    def day(self, d: date) -> Day:
        """The verdict for one date (see the module's order)."""
        if d in self.closed:
            return Day(d, False, CLOSED, self.closed[d])
        if d in self.opened:
            return Day(d, True, OPENED, self.opened[d])
        known = self.lookup(d)
        weekend = d.weekday() in self.weekend
        if known is None:
            return self._without_data(d, weekend=weekend)
        if known.working is False:
            return Day(d, False, HOLIDAY if known.name else WEEKEND, known.name)
        if known.working is True and weekend:
            return Day(d, True, MAKEUP, known.name)
        if known.working is True or not weekend:
            return Day(d, True, WORKDAY)
        return Day(d, False, WEEKEND)

    def _without_data(self, d: date, *, weekend: bool) -> Day:
        guess = self.guess(d) if self.guess is not None else None
        if guess is None:
            return Day(d, not weekend, WEEKEND if weekend else WORKDAY, covered=False)
        if not guess.maybe:  # fixed by law: no notice moves it
            return Day(d, False, HOLIDAY, guess.name, covered=False)
        business = self.uncertain != POLICY_SKIP
        hold = self.uncertain == POLICY_HOLD
        return Day(d, business, UNCERTAIN, guess.name, covered=False, maybe=guess.maybe, hold=hold)

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
