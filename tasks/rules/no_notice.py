"""What is known of a mainland-China year before the State Council's notice? Pure: dates in, no clock.

The law (全国年节及纪念日放假办法) fixes the public holidays themselves: 元旦 1 January, 春节 除夕 to
初三, 清明, 劳动节 1-2 May, 端午, 中秋, 国庆 1-3 October. The yearly notice only adds the days around
them: weekdays bridged into a longer break, paid back by weekend make-up working days (调休). So a
year without its notice still has its holidays (the lunar and solar-term dates come from a
calendar library, handed in as `LawDates`); the days a notice usually moves are *uncertain*, and
the calendar's policy says whether a rule runs on them, skips them or holds them for approval.

Which days a notice usually moves is read off its past practice (2020-2026):

- a break is a run of BREAKS[name].length days that contains the holiday and needs the fewest
  bridged weekdays (May Day and National Day breaks begin on the holiday itself); weekdays in such
  a break are uncertain days off;
- a weekend day within MAKEUP_REACH of a holiday that has uncertain days off may be a make-up day.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

# Holiday names as chinese-calendar spells them, so a name reads the same with or without a notice.
NEW_YEAR = "New Year's Day"
SPRING_FESTIVAL = "Spring Festival"
TOMB_SWEEPING = "Tomb-sweeping Day"
LABOUR_DAY = "Labour Day"
DRAGON_BOAT = "Dragon Boat Festival"
MID_AUTUMN = "Mid-autumn Festival"
NATIONAL_DAY = "National Day"

# What an uncertain day may turn out to be.
MAYBE_OFF = "off"  # a weekday a notice may bridge into the break
MAYBE_MAKEUP = "makeup"  # a weekend day a notice may make a working day

# Make-up days of 2020-2026 fell at most 11 days from their holiday (2026-09-20 for National Day).
MAKEUP_REACH = timedelta(days=14)


@dataclass(frozen=True)
class LawDates:
    """The dates the law names for one year that are not fixed on the solar calendar."""

    new_years_eve: date  # 除夕, the last day of the lunar year
    tomb_sweeping: date  # 清明, a solar term
    dragon_boat: date  # 端午, 5th day of the 5th lunar month
    mid_autumn: date  # 中秋, 15th day of the 8th lunar month


@dataclass(frozen=True)
class Break:
    """How a notice usually lays out the break around a holiday: `length` days in all, with the
    fewest bridged weekdays (`slack` more allowed), starting on the holiday when `anchored`."""

    length: int
    anchored: bool = False
    slack: int = 0


BREAKS = {
    NEW_YEAR: Break(3),
    SPRING_FESTIVAL: Break(9, slack=1),  # 8 days in 2025, 9 in 2026
    TOMB_SWEEPING: Break(3),
    LABOUR_DAY: Break(5, anchored=True),
    DRAGON_BOAT: Break(3),
    MID_AUTUMN: Break(3),
    NATIONAL_DAY: Break(7, anchored=True),
}


@dataclass(frozen=True)
class Guess:
    """One date of a year without its notice: a holiday fixed by law (`maybe` ""), or an uncertain
    day (`maybe` MAYBE_OFF / MAYBE_MAKEUP), with the holiday it belongs to."""

    name: str
    maybe: str = ""


def fixed_holidays(year: int, law: LawDates) -> dict[date, str]:
    """The holidays the law fixes in `year`, by date (National Day wins a day shared with 中秋)."""
    days: dict[date, str] = {date(year, 1, 1): NEW_YEAR}
    for n in range(4):  # 除夕 to 初三
        day = law.new_years_eve + timedelta(days=n)
        if day.year == year:
            days[day] = SPRING_FESTIVAL
    days[law.tomb_sweeping] = TOMB_SWEEPING
    days[date(year, 5, 1)] = days[date(year, 5, 2)] = LABOUR_DAY
    days[law.dragon_boat] = DRAGON_BOAT
    days[law.mid_autumn] = MID_AUTUMN
    for n in (1, 2, 3):
        days[date(year, 10, n)] = NATIONAL_DAY
    return days


def year_guesses(year: int, law: LawDates, *, weekend: frozenset[int]) -> dict[date, Guess]:
    """Every date of `year` (and the edges of its neighbours) that is not an ordinary day without
    a notice: the fixed holidays, and the days a notice usually moves around them."""
    fixed = fixed_holidays(year, law)
    guesses: dict[date, Guess] = {}
    for name, block in _blocks(fixed).items():
        off, surely_off = _breaks(block, BREAKS[name], fixed=fixed, weekend=weekend)
        for day in off:
            guesses.setdefault(day, Guess(name, MAYBE_OFF))
        if not off:
            continue  # a break without bridged days needs no make-up day
        day, hi = min(block) - MAKEUP_REACH, max(block) + MAKEUP_REACH
        while day <= hi:
            if day.weekday() in weekend and day not in fixed and day not in surely_off:
                guesses.setdefault(day, Guess(name, MAYBE_MAKEUP))
            day += timedelta(days=1)
    for day, name in fixed.items():
        guesses[day] = Guess(name)
    return guesses


def _blocks(fixed: dict[date, str]) -> dict[str, list[date]]:
    blocks: dict[str, list[date]] = {}
    for day, name in sorted(fixed.items()):
        blocks.setdefault(name, []).append(day)
    return blocks


def _breaks(
    block: list[date], rule: Break, *, fixed: dict[date, str], weekend: frozenset[int]
) -> tuple[set[date], set[date]]:
    """The likely breaks of `rule.length` days around `block` (those needing the fewest bridged
    weekdays): their bridged weekdays, and the days every one of them contains."""
    first, last = min(block), max(block)
    starts = [first] if rule.anchored else [first - timedelta(days=n) for n in range(rule.length)]
    windows = []
    for start in starts:
        end = start + timedelta(days=rule.length - 1)
        if end < last:
            continue
        days = {start + timedelta(days=n) for n in range(rule.length)}
        windows.append((days, {d for d in days if d.weekday() not in weekend and d not in fixed}))
    if not windows:
        return set(), set()
    fewest = min(len(bridged) for _days, bridged in windows)
    likely = [(days, bridged) for days, bridged in windows if len(bridged) <= fewest + rule.slack]
    return set().union(*(b for _d, b in likely)), set.intersection(*(d for d, _b in likely))
