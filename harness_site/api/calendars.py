"""Business calendars: each calendar with its library and coverage; one calendar put (created or
replaced, overrides included) and deleted; its days in a date range (every day with whether it is a
business day and why). A put is checked exactly as `rules import` checks a file's "calendars", with
the same messages."""

import re
from datetime import date, timedelta

from django.db import DatabaseError, transaction
from django.db.models import ProtectedError
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from harness_site.api.base import COMMON, DeskView, body_object, problems, query_text
from harness_site.api.problems import ApiProblem, invalid
from tasks import sentences
from tasks.calendar_io import calendar_export, calendar_save, calendar_stage
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


class CalendarInputSerializer(serializers.Serializer):
    """A calendar as a rules file writes it; the name comes from the path."""

    country = serializers.CharField(required=False, allow_blank=True)
    subdivision = serializers.CharField(required=False, allow_blank=True)
    weekend = serializers.CharField(required=False)
    description = serializers.CharField(required=False, allow_blank=True)
    overrides = OverrideSerializer(many=True, required=False, help_text="replaces the calendar's overrides")


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
class CalendarDetailView(DeskView):
    scope_area = "rules"
    perms = {
        "GET": VIEW,
        "PUT": ("tasks.add_businesscalendar", "tasks.change_businesscalendar"),
        "DELETE": ("tasks.delete_businesscalendar",),
    }

    @extend_schema(operation_id="calendars_get", responses={200: CalendarSerializer, **problems(*COMMON, 404)})
    def get(self, request, name: str):
        return Response(_one(_get(name)))

    @extend_schema(
        operation_id="calendars_put",
        request=CalendarInputSerializer,
        responses={200: CalendarSerializer, **problems(*COMMON)},
        description="Create or replace a calendar (its overrides too, when given).",
    )
    def put(self, request, name: str):
        item = {**body_object(request), "name": name}
        staged, errors = calendar_stage([item])
        if errors:
            raise _refusal(errors, label=f"calendar {name!r}")
        try:
            with transaction.atomic():
                calendar_save(staged)
        except DatabaseError as exc:
            raise ApiProblem(409, "conflict", f"the calendar was not saved: {exc}") from None
        return Response(_one(_get(name)))

    @extend_schema(operation_id="calendars_delete", responses={204: None, **problems(401, 403, 404, 409)})
    def delete(self, request, name: str):
        cal = _get(name)
        try:
            cal.delete()
        except ProtectedError:
            rules = ", ".join(sorted(cal.rules.values_list("name", flat=True)))
            raise ApiProblem(409, "calendar-in-use", f"rules run by this calendar: {rules}") from None
        return Response(status=204)


def _refusal(errors: list[str], *, label: str) -> ApiProblem:
    """The import's refusals ("<label> field <f>[ #n]: <message>") as problem details with their fields."""
    items = []
    for error in errors:
        found = re.match(r"^ field (\w+)(?: #\d+)?: (.*)$", error.removeprefix(label), re.S)
        items.append({"field": found[1], "detail": found[2]} if found else {"field": "", "detail": error})
    detail = "; ".join(f"{i['field']}: {i['detail']}" if i["field"] else i["detail"] for i in items)
    return ApiProblem(400, "invalid-calendar", detail, field=items[0]["field"], errors=items)


def _get(name: str) -> BusinessCalendar:
    cal = None if "\x00" in name else BusinessCalendar.objects.filter(name=name).first()
    if cal is None:
        raise ApiProblem(404, "not-found", f"no business calendar named {name[:100]!r}")
    return cal


def _one(cal: BusinessCalendar) -> dict:
    row = next(r for r in calendar_export() if r["name"] == cal.name)
    return {**row, **_coverage(cal, timezone.now().date())}


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
        cal = _get(name)
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
