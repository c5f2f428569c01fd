"""Business calendars: shared data that many rules run by (tasks/rules/business_days.py decides).

A calendar names a holiday library and a country, plus local overrides with reasons. The library
is read at build time, never copied into rows, so a library upgrade (the State Council's next year,
published each November) reaches every rule without a data migration:

- mainland China ("CN") reads chinese-calendar, which knows the official holidays *and* the
  weekend make-up working days (调休) from the State Council's notices, and raises for a year it
  has no notice for: that is the calendar's "no data" (staleness) signal;
- any other country reads the `holidays` package (rule-based: it computes any year, so only its
  own supported range ends coverage).
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
from django.utils.translation import gettext_lazy as _

from tasks.rules import business_days, evaluation
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

    def business_days(self, overrides: list[tuple[date, str, str]] | None = None) -> business_days.BusinessCalendar:
        """The pure calendar: the library's days, the weekend and the overrides (one query, none when
        `overrides` (date, kind, reason) are given, read for many calendars at once)."""
        closed: dict[date, str] = {}
        opened: dict[date, str] = {}
        if overrides is None:
            overrides = list(self.overrides.values_list("date", "kind", "reason"))
        for day, kind, reason in overrides:
            (opened if kind == CalendarOverride.Kind.WORKING else closed)[day] = reason
        return business_days.BusinessCalendar(
            name=self.name,
            lookup=library_lookup(self.country, self.subdivision) if self.country else business_days.no_library,
            weekend=evaluation.parse_weekdays(self.weekend) or business_days.DEFAULT_WEEKEND,
            closed=closed,
            opened=opened,
            source=library_name(self.country),
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


def calendar_gaps(*, today: date, horizon: timedelta = business_days.DEFAULT_HORIZON) -> list[dict]:
    """Calendars an enabled rule runs by that have no data for some date from `today` to `today +
    horizon`: {"id", "calendar", "source", "no_data_from", "days_left", "rules"}, for /healthz, the
    system banner, the alert check and the rule page. Three queries, whatever the calendars in use
    (they are read on every desk page)."""
    calendars = list(BusinessCalendar.objects.filter(rules__enabled=True).distinct())
    ids = [c.id for c in calendars]
    overrides: dict[int, list] = defaultdict(list)
    for cal_id, *row in CalendarOverride.objects.filter(calendar_id__in=ids).values_list(
        "calendar_id", "date", "kind", "reason"
    ):
        overrides[cal_id].append(tuple(row))
    rules: dict[int, list[str]] = defaultdict(list)
    for cal_id, name in (
        apps.get_model("tasks", "TriggerRule")
        .objects.filter(business_calendar_id__in=ids, enabled=True)
        .values_list("business_calendar_id", "name")
    ):
        rules[cal_id].append(name)
    gaps = []
    for cal in calendars:
        gap = business_days.calendar_gap(cal.business_days(overrides[cal.id]), today=today, horizon=horizon)
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
            }
        )
    return gaps
