"""A country's published holiday notice, imported once as data (tasks.models.NoticeDay) and read by
every calendar of that country, until the holiday library ships the same year.

The file (docs/calendars.md), one country and year per file:

    {"country": "CN", "year": 2027,
     "days_off": [{"date": "2027-01-01", "name": "New Year's Day"}, ...],
     "working_days": [{"date": "2027-02-20", "name": "Spring Festival"}, ...]}

An import replaces that country's days for that year, all or nothing.
"""

import json
from datetime import date, datetime

from django.db import transaction

from tasks.models import NoticeDay

NOTICE_FIELDS = {"country", "year", "days_off", "working_days"}


class NoticeError(ValueError):
    """The file is not a notice; `errors` says what is wrong, one line each."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("; ".join(errors))


def notice_import(text: str | bytes, *, now: datetime) -> dict:
    """Replace a country's notice days for one year with the file's; {"country", "year", "days_off",
    "working_days"} as counts. NoticeError (nothing saved) when the file is not a valid notice."""
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise NoticeError([f"not JSON: {exc}"]) from None
    if not isinstance(data, dict):
        raise NoticeError(["a notice is a JSON object with country, year, days_off and working_days"])
    errors = [f"unknown field {f!r}" for f in sorted(set(data) - NOTICE_FIELDS)]
    country, year = data.get("country"), data.get("year")
    if not isinstance(country, str) or not country.strip() or len(country.strip()) > 10:
        errors.append('country: an ISO 3166 code, e.g. "CN"')
    if not isinstance(year, int) or isinstance(year, bool) or not 1 <= year <= 9999:
        errors.append("year: a year, e.g. 2027")
    days: dict[date, tuple[str, str]] = {}
    for field, kind in (("days_off", NoticeDay.Kind.OFF), ("working_days", NoticeDay.Kind.WORKING)):
        entries = data.get(field, [])
        if not isinstance(entries, list):
            errors.append(f"{field}: a list of {{date, name}} objects")
            continue
        for n, entry in enumerate(entries, 1):
            where = f"{field} #{n}"
            if not isinstance(entry, dict) or set(entry) != {"date", "name"}:
                errors.append(f'{where}: an object with date and name, e.g. {{"date": "2027-01-01", "name": "…"}}')
                continue
            try:
                day = date.fromisoformat(entry["date"])
            except (TypeError, ValueError):
                errors.append(f"{where}: date must be YYYY-MM-DD")
                continue
            name = entry["name"]
            if not isinstance(name, str) or not name.strip() or len(name) > 100 or "\x00" in name:
                errors.append(f"{where}: name must be a text of 1 to 100 characters")
                continue
            if day in days:
                errors.append(f"{where}: {day} appears more than once")
                continue
            days[day] = (kind, name.strip())
    if not days and not errors:
        errors.append("the notice names no day")
    if errors or not isinstance(country, str) or not isinstance(year, int):  # the checks above named why
        raise NoticeError(errors)
    country = country.strip().upper()
    with transaction.atomic():
        NoticeDay.objects.filter(country=country, year=year).delete()
        NoticeDay.objects.bulk_create(
            NoticeDay(country=country, year=year, date=day, kind=kind, name=name, imported_at=now)
            for day, (kind, name) in sorted(days.items())
        )
    off = sum(1 for kind, _name in days.values() if kind == NoticeDay.Kind.OFF)
    return {"country": country, "year": year, "days_off": off, "working_days": len(days) - off}
