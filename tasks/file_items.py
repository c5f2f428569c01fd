"""What every section of a rule file (pools, agents, rules) checks the same way: each entry is an
object, named in errors by its name (or its position), with no unknown and no missing fields; and a
value no model field can take becomes an error naming the entry, never a traceback."""

from collections.abc import Iterator

from django.core.exceptions import ValidationError

# Raised by a field for a value it cannot take even after the type checks (a date past year 9999,
# a number too large for a float, a list for a name).
STAGING_ERRORS = (TypeError, ValueError, OverflowError)


def file_entries(items: list, kind: str, errors: list[str]) -> Iterator[tuple[str, object, dict]]:
    """(label, name, entry) for each object in `items`; an entry that is not one is an error."""
    for index, item in enumerate(items):
        label = f"{kind} #{index + 1}"
        if not isinstance(item, dict):
            errors.append(f"{label}: expected an object")
            continue
        name = item.get("name")
        yield (f"{kind} {name!r}" if isinstance(name, str) and name else label), name, item


def field_problems(item: dict, fields: tuple[str, ...], required: tuple[str, ...]) -> list[str]:
    """An unknown field (the first, with the known ones listed) and every required one missing."""
    unknown = sorted(set(item) - set(fields))
    problems = [f"field {unknown[0]}: unknown field; known fields: {', '.join(fields)}"] if unknown else []
    return problems + [f"field {f}: required" for f in required if item.get(f) in (None, "")]


def staging_errors(label: str, exc: Exception) -> list[str]:
    """The errors of one entry that full_clean() or a field's conversion refused."""
    if isinstance(exc, ValidationError):
        pairs = exc.message_dict.items() if hasattr(exc, "error_dict") else [("", exc.messages)]
        return [f"{label} field {f}: {m}" if f else f"{label}: {m}" for f, messages in pairs for m in messages]
    return [f"{label}: {exc}"]


def named_resolve(item: dict, field: str, staged: dict, model, what: str) -> str | None:
    """Replace a rule item's `field`, a name, by the object it names: staged from the same file, or
    saved already. None when resolved (or the field is empty, then None); else the error text."""
    if field not in item or item[field] in (None, ""):
        if field in item:
            item[field] = None
        return None
    name = item[field]
    if not isinstance(name, str):
        return f"give the {what}'s name, got {name!r}"
    found = staged[name][0] if name in staged else model.objects.filter(name=name).first()
    if found is None:
        return f"no {what} named {name!r} in the file or the database"
    item[field] = found
    return None
