"""Business calendars in rule import/export files: `{"calendars": [...], "rules": [...]}`, upserted
by name with their overrides. Rules name their calendar by name ("business_calendar": "cn-mainland").
The library's holidays never travel: they are read from the library wherever the file is imported."""

from datetime import date

from django.core.exceptions import ValidationError

from tasks.file_items import STAGING_ERRORS, field_problems, file_entries, named_resolve, staging_errors
from tasks.models.calendar import BusinessCalendar, CalendarOverride

CALENDAR_FIELDS = ("name", "country", "subdivision", "weekend", "uncertain_days", "description", "overrides")
REQUIRED_CALENDAR_FIELDS = ("name",)
OVERRIDE_FIELDS = ("date", "kind", "reason")

# name → (calendar, its overrides as (date, kind, reason), changed)
Staged = dict[str, tuple[BusinessCalendar, list[tuple[date, str, str]] | None, bool]]


def calendar_export() -> list[dict]:
    rows = []
    for cal in BusinessCalendar.objects.prefetch_related("overrides").order_by("name"):
        rows.append(
            {
                "name": cal.name,
                "country": cal.country,
                "subdivision": cal.subdivision,
                "weekend": cal.weekend,
                "uncertain_days": cal.uncertain_days,
                "description": cal.description,
                "overrides": [
                    {"date": o.date.isoformat(), "kind": o.kind, "reason": o.reason} for o in cal.overrides.all()
                ],
            }
        )
    return rows


def calendar_stage(items) -> tuple[Staged, list[str]]:
    """Validate the file's calendars without saving; errors name the calendar and the field at fault."""
    staged: Staged = {}
    errors: list[str] = []
    if items is None:
        return staged, errors
    if not isinstance(items, list):
        return staged, ["file: calendars must be a list of objects"]
    for label, name, item in file_entries(items, "calendar", errors):
        problems = field_problems(item, CALENDAR_FIELDS, REQUIRED_CALENDAR_FIELDS)
        for f in ("name", "country", "subdivision", "weekend", "uncertain_days", "description"):
            if f in item and not isinstance(item[f], str):
                problems.append(f"field {f}: must be a string, got {item[f]!r}"[:160])
            elif "\x00" in item.get(f, ""):
                problems.append(f"field {f}: must not contain a NUL character")
        if isinstance(name, str) and name in staged:
            problems.append(f"field name: {name!r} appears more than once in the file")
        overrides, override_problems = _overrides(item.get("overrides"))
        problems += override_problems
        if problems or not isinstance(name, str):  # a name that is not a text is among the problems
            errors.extend(f"{label} {p}" for p in problems)
            continue
        cal = BusinessCalendar.objects.filter(name=name).first()
        created = cal is None
        cal = cal or BusinessCalendar()
        before = None if created else _state(cal)
        try:
            for f, value in item.items():
                if f != "overrides":
                    setattr(cal, f, value)
            cal.full_clean()
        except (ValidationError, *STAGING_ERRORS) as exc:
            errors.extend(staging_errors(label, exc))
            continue
        old = None if created else sorted(cal.overrides.values_list("date", "kind", "reason"))
        changed = created or before != _state(cal) or (overrides is not None and sorted(overrides) != old)
        staged[name] = (cal, overrides, changed)
    return staged, errors


def calendar_resolve(item: dict, staged: Staged) -> str | None:
    """Replace a rule item's calendar name by the calendar (file or database); an error text if none."""
    return named_resolve(item, "business_calendar", staged, BusinessCalendar, "business calendar")


def calendar_save(staged: Staged) -> None:
    """Save changed calendars and replace their overrides; inside the import's transaction, before the rules."""
    for cal, overrides, changed in staged.values():
        if not changed:
            continue
        cal.save()
        if overrides is not None:
            cal.overrides.all().delete()
            CalendarOverride.objects.bulk_create(
                CalendarOverride(calendar=cal, date=d, kind=kind, reason=reason) for d, kind, reason in overrides
            )


def _state(cal: BusinessCalendar) -> tuple:
    return (cal.country, cal.subdivision, cal.weekend, cal.uncertain_days, cal.description)


def _overrides(value) -> tuple[list[tuple[date, str, str]] | None, list[str]]:
    if value is None:
        return None, []
    if not isinstance(value, list):
        return None, ["field overrides: must be a JSON list of objects"]
    out, problems, seen = [], [], set()
    kinds = set(CalendarOverride.Kind.values)
    for n, entry in enumerate(value, 1):
        where = f"field overrides #{n}"
        if not isinstance(entry, dict) or set(entry) - set(OVERRIDE_FIELDS):
            problems.append(f"{where}: expected an object with {', '.join(OVERRIDE_FIELDS)}")
            continue
        raw = entry.get("date")
        try:
            day = date.fromisoformat(raw if isinstance(raw, str) else "")  # not a text: refused as ""
        except ValueError:
            problems.append(f'{where}: date must be YYYY-MM-DD, e.g. "2026-12-31"')
            continue
        if entry.get("kind") not in kinds:
            problems.append(f"{where}: kind must be one of {', '.join(sorted(kinds))}")
            continue
        reason = entry.get("reason")
        if not isinstance(reason, str) or not reason.strip() or len(reason) > 200 or "\x00" in reason:
            problems.append(f"{where}: reason must be a text of 1 to 200 characters, without NUL")
            continue
        if day in seen:
            problems.append(f"{where}: {day} appears more than once")
            continue
        seen.add(day)
        out.append((day, entry["kind"], reason))
    return out, problems
