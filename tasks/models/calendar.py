"""Business calendars: shared data that many rules run by (tasks/rules/business_days.py decides).

A calendar names a holiday library and a country, plus local overrides with reasons. The library
is read at build time, never copied into rows, so a library upgrade (the State Council's next year,
published each November) reaches every rule without a data migration:

- mainland China ("CN") reads chinese-calendar, which knows the official holidays *and* the
  weekend make-up working days (调休) from the State Council's notices, and raises for a year it
  has no notice for: that is the calendar's "no data" (staleness) signal;
- any other country reads the `holidays` package (rule-based: it computes any year, so only its
  own supported range ends coverage).

A year's notice can also be imported as data (NoticeDay, `harness calendars import-notice`), once
per country, before the library catches up: every calendar of the country reads it, and it wins
over the library for its year. For a mainland-China year with neither, the holidays the law fixes
are still known (lunar dates from lunar-python; tasks/rules/no_notice.py decides the rest).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from datetime import date, timedelta
from importlib.metadata import version

import chinese_calendar
import holidays
from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from lunar_python import Lunar, Solar

from tasks.rules import business_days, evaluation, no_notice
from tasks.rules.business_days import LibraryDay

CHINA = "CN"
# The language holiday names are recorded in (the desk words them for its reader; tasks/sentences.py).
HOLIDAY_LANGUAGE = "en_US"


class BusinessCalendar(models.Model):
    """A named set of business days: a country's public holidays from a library, plus overrides."""

    name = models.SlugField(_("name"), max_length=100, unique=True)
    country = models.CharField(
        _("country"),
        max_length=10,
        blank=True,
        help_text=_(
            'ISO 3166 country code, e.g. "CN" (mainland China, with its make-up working days); '
            "blank: weekends and overrides only."
        ),
    )
    subdivision = models.CharField(
        _("subdivision"),
        max_length=10,
        blank=True,
        help_text=_(
            "A state or province of the country (its ISO 3166-2 code without the country); blank: national holidays."
        ),
    )
    weekend = models.CharField(
        _("weekend"),
        max_length=60,
        default="sat-sun",
        help_text=_('Weekend days, written like a rule\'s weekdays, e.g. "sat-sun".'),
    )
    description = models.TextField(_("description"), blank=True)

    class Uncertain(models.TextChoices):
        HOLD = business_days.POLICY_HOLD, _("hold the run for approval")
        SKIP = business_days.POLICY_SKIP, _("skip: no run")
        RUN = business_days.POLICY_RUN, _("run")

    uncertain_days = models.CharField(
        _("uncertain days"),
        max_length=10,
        choices=Uncertain.choices,
        default=Uncertain.HOLD,
        db_default=Uncertain.HOLD,
        help_text=_(
            "In a year without the published notice (mainland China): what rules do on a day the notice "
            "usually moves, a weekday bridged into a holiday or a weekend made a working day."
        ),
    )
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("business calendar")
        verbose_name_plural = _("business calendars")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        super().clean()
        try:
            evaluation.parse_weekdays(self.weekend)
        except evaluation.GuardError as exc:
            raise ValidationError({"weekend": str(exc)}) from None
        if self.country:
            self.country = self.country.strip().upper()
            self.subdivision = self.subdivision.strip().upper()
            try:
                library_lookup(self.country, self.subdivision)
            except NotImplementedError as exc:
                raise ValidationError({"country": str(exc)}) from None

    def business_days(
        self,
        overrides: list[tuple[date, str, str]] | None = None,
        notices: list[tuple[int, date, str, str]] | None = None,
    ) -> business_days.BusinessCalendar:
        """The pure calendar: an imported notice, the library's days, the law's holidays (mainland
        China), the weekend and the overrides (two queries; none when the `overrides` (date, kind,
        reason) and the country's `notices` (year, date, kind, name) are given, read for many
        calendars at once)."""
        closed: dict[date, str] = {}
        opened: dict[date, str] = {}
        if overrides is None:
            overrides = list(self.overrides.values_list("date", "kind", "reason"))
        for day, kind, reason in overrides:
            (opened if kind == CalendarOverride.Kind.WORKING else closed)[day] = reason
        weekend = evaluation.parse_weekdays(self.weekend) or business_days.DEFAULT_WEEKEND
        lookup = library_lookup(self.country, self.subdivision) if self.country else business_days.no_library
        if self.country:
            lookup = notice_lookup(self.country, lookup, notices)
        china = self.country == CHINA and not self.subdivision
        return business_days.BusinessCalendar(
            name=self.name,
            lookup=lookup,
            weekend=weekend,
            closed=closed,
            opened=opened,
            source=library_name(self.country),
            guess=functools.partial(china_guess, weekend=weekend) if china else None,
            uncertain=self.uncertain_days,
        )


class CalendarOverride(models.Model):
    """A local exception to a calendar's library: a day closed (company shutdown) or an extra
    working day, with the reason shown wherever a rule's slot is decided by it."""

    class Kind(models.TextChoices):
        CLOSED = "closed", _("closed (no business)")
        WORKING = "working", _("extra working day")

    # No index of its own: the (calendar, date) unique constraint's index leads with it.
    calendar = models.ForeignKey(
        BusinessCalendar,
        on_delete=models.CASCADE,
        related_name="overrides",
        verbose_name=_("calendar"),
        db_index=False,
    )
    date = models.DateField(_("date"))
    kind = models.CharField(_("kind"), max_length=10, choices=Kind.choices)
    reason = models.CharField(
        _("reason"), max_length=200, help_text=_('Shown with each decision, e.g. "Year-end shutdown".')
    )

    class Meta:
        verbose_name = _("calendar override")
        verbose_name_plural = _("calendar overrides")
        ordering = ["date"]
        constraints = [models.UniqueConstraint(fields=["calendar", "date"], name="calendar_override_one_per_date")]

    def __str__(self) -> str:
        return f"{self.date} {self.get_kind_display()}: {self.reason}"


class NoticeDay(models.Model):
    """One date of a country's published holiday notice (e.g. the State Council's for a year),
    imported once for the country and read by every calendar of it: a day off with its holiday's
    name, or a make-up working day. A year with any row counts as published: its other dates are
    ordinary days, whatever the library says. A calendar's overrides still win."""

    class Kind(models.TextChoices):
        OFF = "off", _("day off")
        WORKING = "working", _("make-up working day")

    country = models.CharField(_("country"), max_length=10)
    year = models.PositiveIntegerField(_("year"), help_text=_("The year of the notice the day belongs to."))
    date = models.DateField(_("date"))
    kind = models.CharField(_("kind"), max_length=10, choices=Kind.choices)
    name = models.CharField(_("holiday"), max_length=100, help_text=_("The holiday the day belongs to."))
    imported_at = models.DateTimeField(_("imported at"), default=timezone.now)  # typed in the admin: now

    class Meta:
        verbose_name = _("notice day")
        verbose_name_plural = _("notice days")
        ordering = ["country", "date"]
        # notice_lookup reads a country's rows by this constraint's index.
        constraints = [models.UniqueConstraint(fields=["country", "date"], name="notice_day_one_per_date")]

    def __str__(self) -> str:
        return f"{self.country} {self.date} {self.get_kind_display()}: {self.name}"


def notice_lookup(
    country: str, library: business_days.Lookup, rows: list[tuple[int, date, str, str]] | None = None
) -> business_days.Lookup:
    """`library`, with the country's imported notices over it for the years they cover (one query;
    none when their `rows` (year, date, kind, name) are given, read for many calendars at once)."""
    if rows is None:
        rows = list(NoticeDay.objects.filter(country=country).values_list("year", "date", "kind", "name"))
    if not rows:
        return library
    years = {year for year, *_rest in rows}
    days = {day: LibraryDay(kind == NoticeDay.Kind.WORKING, name) for _y, day, kind, name in rows}

    def lookup(day: date) -> LibraryDay | None:
        if day in days:
            return days[day]
        if day.year in years:
            return LibraryDay(None)  # a published year: any other date is an ordinary day
        return library(day)

    return lookup


def library_name(country: str) -> str:
    """The library (and version) a country's holidays come from, for notes; "" without a country."""
    if not country:
        return ""
    package = "chinesecalendar" if country == CHINA else "holidays"
    return f"{package} {version(package)}"


@functools.lru_cache(maxsize=128)
def library_lookup(country: str, subdivision: str = "") -> business_days.Lookup:
    """The lookup for a country's holidays; NotImplementedError names an unknown country or region.
    Cached per process: the libraries' data is fixed until the package is upgraded (a restart)."""
    if country == CHINA and not subdivision:
        return _china
    try:
        # A fixed language: unasked, the library names holidays after the process's locale
        # (LANGUAGE, LC_*, LANG), so a decision's reason would change with how the server started.
        # Every country speaks en_US or has English names of its own.
        table = holidays.country_holidays(country, subdiv=subdivision or None, language=HOLIDAY_LANGUAGE)
    except NotImplementedError as exc:
        raise NotImplementedError(str(exc)) from None
    first, last = table.start_year, table.end_year

    def lookup(day: date) -> LibraryDay | None:
        if not first <= day.year <= last:
            return None
        name = table.get(day)
        return LibraryDay(False, name) if name else LibraryDay(None)

    return lookup


def _china(day: date) -> LibraryDay | None:
    try:
        working = chinese_calendar.is_workday(day)
    except NotImplementedError:
        return None  # no State Council notice for this year in the installed library
    # get_holiday_detail names the holiday a make-up working day belongs to, too.
    _on_holiday, name = chinese_calendar.get_holiday_detail(day)
    return LibraryDay(working, name or "")


# The law's current holidays (除夕 and a second May Day) apply from 2025; the upper end keeps the
# lunar arithmetic inside the dates Python can name.
LAW_YEARS = (2025, 9998)


def china_guess(day: date, *, weekend: frozenset[int]) -> no_notice.Guess | None:
    """For a mainland-China date without a notice: a holiday the law fixes, or an uncertain day."""
    # A date near a year's edge can belong to the next or the previous year's breaks.
    for year in (day.year, day.year + 1, day.year - 1):
        if not LAW_YEARS[0] <= year <= LAW_YEARS[1]:
            continue
        found = _china_year(year, weekend).get(day)
        if found is not None:
            return found
    return None


@functools.lru_cache(maxsize=32)
def _china_year(year: int, weekend: frozenset[int]) -> dict[date, no_notice.Guess]:
    return no_notice.year_guesses(year, china_law_dates(year), weekend=weekend)


def china_law_dates(year: int) -> no_notice.LawDates:
    """The lunar and solar-term dates the law names in `year`, from lunar-python."""

    def solar(s) -> date:
        return date(s.getYear(), s.getMonth(), s.getDay())

    return no_notice.LawDates(
        new_years_eve=solar(Lunar.fromYmd(year, 1, 1).next(-1).getSolar()),
        # The term table of the lunar year holding 20 April has this year's 清明 (early April).
        tomb_sweeping=solar(Solar.fromYmd(year, 4, 20).getLunar().getJieQiTable()["清明"]),
        dragon_boat=solar(Lunar.fromYmd(year, 5, 5).getSolar()),
        mid_autumn=solar(Lunar.fromYmd(year, 8, 15).getSolar()),
    )


def calendar_gaps(*, today: date, horizon: timedelta = business_days.DEFAULT_HORIZON) -> list[dict]:
    """Calendars an enabled rule runs by that have no data for some date from `today` to `today +
    horizon`: {"id", "calendar", "source", "no_data_from", "days_left", "rules", "uncertain_days"}, for /healthz, the
    system banner, the alert check and the rule page. Four queries, whatever the calendars in use
    (they are read on every desk page)."""
    calendars = list(BusinessCalendar.objects.filter(rules__enabled=True).distinct())
    ids = [c.id for c in calendars]
    overrides: dict[int, list] = defaultdict(list)
    for cal_id, *row in CalendarOverride.objects.filter(calendar_id__in=ids).values_list(
        "calendar_id", "date", "kind", "reason"
    ):
        overrides[cal_id].append(tuple(row))
    notices: dict[str, list] = defaultdict(list)
    for country, *notice in NoticeDay.objects.filter(
        country__in={c.country for c in calendars if c.country}
    ).values_list("country", "year", "date", "kind", "name"):
        notices[country].append(tuple(notice))
    rules: dict[int, list[str]] = defaultdict(list)
    for cal_id, name in (
        apps.get_model("tasks", "TriggerRule")
        .objects.filter(business_calendar_id__in=ids, enabled=True)
        .values_list("business_calendar_id", "name")
    ):
        rules[cal_id].append(name)
    gaps = []
    for cal in calendars:
        calendar = cal.business_days(overrides[cal.id], notices[cal.country])
        gap = business_days.calendar_gap(calendar, today=today, horizon=horizon)
        if gap is None:
            continue
        gaps.append(
            {
                "id": cal.id,
                "calendar": cal.name,
                "source": library_name(cal.country),
                "no_data_from": gap.isoformat(),
                "days_left": (gap - today).days,
                "rules": sorted(rules[cal.id]),
                # What its rules do meanwhile, where the law's holidays judge a year without data.
                "uncertain_days": cal.uncertain_days if calendar.guess is not None else None,
            }
        )
    return gaps
