"""Business calendar admin: a named calendar (library, country, weekend), its overrides with reasons,
what it says of the weeks ahead, and whether its library still has data for them."""

from datetime import timedelta

from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from tasks import sentences
from tasks.models import BusinessCalendar, CalendarOverride, NoticeDay
from tasks.models.calendar import library_name
from tasks.rules import business_days, evaluation

# How far ahead the calendar page lists the days that are not ordinary.
UPCOMING_DAYS = 120


class CalendarOverrideInline(admin.TabularInline):
    model = CalendarOverride
    extra = 1
    fields = ("date", "kind", "reason")


@admin.register(BusinessCalendar)
class BusinessCalendarAdmin(admin.ModelAdmin):
    list_display = ("name", "country", "subdivision", "weekend", "library", "coverage", "rules_using")
    search_fields = ("name", "country", "description")
    readonly_fields = ("library", "coverage", "rules_using", "upcoming", "updated_at")
    inlines = (CalendarOverrideInline,)
    fieldsets = (
        (None, {"fields": ("name", "country", "subdivision", "weekend", "uncertain_days", "description")}),
        (_("What it says"), {"fields": ("library", "coverage", "upcoming", "rules_using", "updated_at")}),
    )

    @admin.display(description=_("library"))
    def library(self, cal: BusinessCalendar) -> str:
        name = library_name(cal.country)
        return format_html("<code>{}</code>", name) if name else "—"

    @admin.display(description=_("coverage"))
    def coverage(self, cal: BusinessCalendar) -> str:
        if cal.pk is None:
            return "—"
        today = timezone.now().date()
        gap = business_days.calendar_gap(cal.business_days(), today=today)
        if gap is None:
            until = today + business_days.DEFAULT_HORIZON
            return gettext("knows every date up to %(until)s") % {"until": until.isoformat()}
        return format_html(
            '<strong class="calendar-no-data">⚠ {}</strong>',
            gettext("no data from %(since)s (in %(days)s days)")
            % {"since": gap.isoformat(), "days": (gap - today).days},
        )

    @admin.display(description=_("rules"))
    def rules_using(self, cal: BusinessCalendar) -> str:
        if cal.pk is None:
            return "—"
        rules = list(cal.rules.order_by("name").values_list("pk", "name"))
        if not rules:
            return "—"
        return format_html_join(
            ", ", '<a href="{}">{}</a>', ((reverse("admin:tasks_triggerrule_change", args=[pk]), n) for pk, n in rules)
        )

    @admin.display(description=_("days ahead that are not ordinary"))
    def upcoming(self, cal: BusinessCalendar) -> str:
        """Holidays, closed days, make-up and extra working days, and dates without data, in the next months."""
        if cal.pk is None:
            return "—"
        pure = cal.business_days()
        today = timezone.now().date()
        rows = []
        for n in range(UPCOMING_DAYS):
            day = pure.day(today + timedelta(days=n))
            if not day.covered and pure.guess is None and day.kind in (business_days.WORKDAY, business_days.WEEKEND):
                # One line for the rest: past its data the calendar knows nothing but weekdays.
                since = gettext("from %(since)s on: no data; weekdays count as business days") % {
                    "since": day.date.isoformat()
                }
                rows.append(("⚠", since))
                break
            if not day.covered and not any(mark == "⚠" for mark, _said in rows):
                # The law still names the holidays; the days a notice moves follow the policy, listed below.
                since = gettext(
                    "from %(since)s on: no notice yet; holidays fixed by law are skipped, "
                    "uncertain days follow the calendar's policy"
                ) % {"since": day.date.isoformat()}
                rows.append(("⚠", since))
            if day.kind in (business_days.WORKDAY, business_days.WEEKEND):
                continue
            rows.append((f"{day.date:%Y-%m-%d} {date_format(day.date, 'D')}", sentences.say(_day_reason(pure, day))))
        if not rows:
            return "—"
        return format_html(
            '<ul class="calendar-upcoming">{}</ul>', format_html_join("", "<li><code>{}</code> {}</li>", rows)
        )


def _day_reason(cal: business_days.BusinessCalendar, day: business_days.Day):
    """The same words a rule's preview uses for the day."""
    if day.business:
        return evaluation.describe_day(cal, day)
    return evaluation.calendar_reason(evaluation.day_details(cal, day))


@admin.register(NoticeDay)
class NoticeDayAdmin(admin.ModelAdmin):
    """A country's published notice, shared by its calendars (imported with `harness notice import`)."""

    list_display = ("country", "year", "date", "kind", "name", "imported_at")
    list_filter = ("country", "year", "kind")
    search_fields = ("name",)
    date_hierarchy = "date"
    readonly_fields = ("imported_at",)
