"""Business calendars, read-only: each calendar with its library and coverage, and one calendar's
days in a date range (every day with whether it is a business day and why). Calendars are written
in the admin or with `rules import` (a file's "calendars"), which checks them."""

from datetime import date, timedelta

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from harness_site.api.base import COMMON, DeskView, problems, query_text
from harness_site.api.problems import ApiProblem, invalid
from tasks import sentences
from tasks.calendar_io import calendar_export
from tasks.models import BusinessCalendar
from tasks.models.calendar import library_name
from tasks.rules import business_days, evaluation

VIEW = ("tasks.view_businesscalendar",)
MAX_RANGE_DAYS = 400
CALENDAR_NAME = OpenApiParameter("name", str, OpenApiParameter.PATH, description="the calendar's name")


class OverrideSerializer(serializers.Serializer):
    date = serializers.DateField()
    kind = serializers.CharField(help_text="closed or working")
    reason = serializers.CharField()


class CoverageSerializer(serializers.Serializer):
    library = serializers.CharField(help_text='e.g. "chinesecalendar 1.11.0"; "" without a country')
    no_data_from = serializers.DateField(
        allow_null=True, help_text="the first date up to checked_until the library has no data for; null: none"
    )
    checked_until = serializers.DateField()


class CalendarSerializer(CoverageSerializer):
    name = serializers.CharField()
    country = serializers.CharField()
    subdivision = serializers.CharField()
    weekend = serializers.CharField()
    description = serializers.CharField()
    overrides = OverrideSerializer(many=True)


class DaySerializer(serializers.Serializer):
    date = serializers.DateField()
    business_day = serializers.BooleanField()
    kind = serializers.CharField(help_text=", ".join(business_days.KINDS))
    name = serializers.CharField(help_text="the holiday's name or the override's reason; \"\" for an ordinary day")
    covered = serializers.BooleanField(help_text="false: the library has no data for it; judged by its weekday")
    summary = serializers.CharField(help_text="what a rule's preview says of a slot on this day")


class CalendarDaysSerializer(CoverageSerializer):
    calendar = serializers.CharField()
    days = DaySerializer(many=True)


def _coverage(cal: BusinessCalendar, today: date) -> dict:
    gap = business_days.calendar_gap(cal.business_days(), today=today)
    return {
        "library": library_name(cal.country),
        "no_data_from": gap.isoformat() if gap else None,
        "checked_until": (today + business_days.DEFAULT_HORIZON).isoformat(),
    }


@extend_schema(tags=["calendars"])
class CalendarListView(DeskView):
    scope_area = "rules"
    perms = {"GET": VIEW}

    @extend_schema(operation_id="calendars_list", responses={200: CalendarSerializer(many=True), **problems(*COMMON)})
    def get(self, request):
        """Every calendar as `rules export` writes it, with its library and the first date ahead it has no data for."""
        today = timezone.now().date()
        by_name = {c.name: c for c in BusinessCalendar.objects.all()}
        return Response([{**row, **_coverage(by_name[row["name"]], today)} for row in calendar_export()])


@extend_schema(tags=["calendars"], parameters=[CALENDAR_NAME])
class CalendarDaysView(DeskView):
    scope_area = "rules"
    perms = {"GET": VIEW}

    @extend_schema(
        operation_id="calendars_days",
        parameters=[
            OpenApiParameter("from", str, description="first date, YYYY-MM-DD (default: today)"),
            OpenApiParameter(
                "to", str, description=f"last date, YYYY-MM-DD (default and at most: {MAX_RANGE_DAYS} days)"
            ),
        ],
        responses={200: CalendarDaysSerializer, **problems(*COMMON, 404)},
    )
    def get(self, request, name: str):
        """Each day of the range: business or not, what kind of day, its holiday or override, and
        whether the library has data for it, with the sentence a rule's preview says of it."""
        cal = BusinessCalendar.objects.filter(name=name).first()
        if cal is None:
            raise ApiProblem(404, "not-found", f"no business calendar named {name!r}")
        first = _date(request, "from") or timezone.now().date()
        last = _date(request, "to") or min(first, date.max - timedelta(days=30)) + timedelta(days=30)
        if last < first:
            raise invalid("to", "must not be before from")
        if (last - first).days >= MAX_RANGE_DAYS:
            raise invalid("to", f"at most {MAX_RANGE_DAYS} days after from")
        pure = cal.business_days()
        days = []
        for n in range((last - first).days + 1):
            day = pure.day(first + timedelta(days=n))
            said = (
                evaluation.describe_day(pure, day)
                if day.business
                else evaluation.calendar_reason(evaluation.day_details(pure, day))
            )
            days.append(
                {
                    "date": day.date.isoformat(),
                    "business_day": day.business,
                    "kind": day.kind,
                    "name": day.name,
                    "covered": day.covered,
                    "summary": sentences.say(said),
                }
            )
        return Response({"calendar": cal.name, **_coverage(cal, timezone.now().date()), "days": days})


def _date(request, param: str) -> date | None:
    text = query_text(request, param)
    if not text:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise invalid(param, 'a date, YYYY-MM-DD, e.g. "2026-02-14"') from None
