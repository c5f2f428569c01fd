"""Readiness flags: set, clear, list. One service each; the admin, the HTTP API and the command call them."""

import logging
import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction

from tasks.models import ReadinessFlag

log = logging.getLogger("harness.flags")

# Matched whole (fullmatch): "$" would also accept a trailing newline.
NAME_RE = re.compile(r"[A-Za-z0-9_.:\-]{1,200}")
SCOPE_MAX = 200
NOTE_MAX = 500


@dataclass(frozen=True)
class FlagError(ValueError):
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def _control(text: str, *, allow: str = "") -> bool:
    """Whether `text` holds a control character: a line break, an escape sequence or a bidi override
    would forge or disguise log lines, and PostgreSQL refuses a NUL outright."""
    return any(unicodedata.category(c).startswith("C") and c not in allow for c in text)


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise FlagError("name", "required; letters, digits and . _ : - only, at most 200, e.g. pipeline.raw_data.ready")
    return name


def _check_scope(scope: object) -> str:
    if not isinstance(scope, str) or not scope.strip() or len(scope) > SCOPE_MAX:
        raise FlagError(
            "scope", f"required; a business date such as 2026-12-01 or a key, at most {SCOPE_MAX} characters"
        )
    if _control(scope):
        raise FlagError("scope", "no line breaks, tabs or other control characters")
    return scope.strip()


def _check(name: object, scope: object) -> tuple[str, str]:
    return _check_name(name), _check_scope(scope)


def flag_set(
    *, name: object, scope: object, actor: str, now: datetime, note: object = ""
) -> tuple[ReadinessFlag, bool]:
    """Set a flag for one scope; (flag, created). Setting a set flag again only refreshes set_at/by."""
    name, scope = _check(name, scope)
    if not isinstance(note, str) or len(note) > NOTE_MAX or _control(note, allow="\n\t"):
        raise FlagError("note", f"must be text of at most {NOTE_MAX} characters, without control characters")
    try:
        with transaction.atomic():
            flag = ReadinessFlag.objects.create(name=name, scope=scope, set_at=now, set_by=actor[:150], note=note)
            created = True
    except IntegrityError:  # insert-and-catch: already set
        ReadinessFlag.objects.filter(name=name, scope=scope).update(set_at=now, set_by=actor[:150], note=note)
        flag, created = ReadinessFlag.objects.get(name=name, scope=scope), False
    log.info("flag set name=%r scope=%r by=%r created=%s", name, scope, actor, created)
    return flag, created


def flag_clear(*, name: object, scope: object, actor: str) -> bool:
    """Clear a flag; False if it was not set. A slot already run is not affected."""
    name, scope = _check(name, scope)
    deleted, _ = ReadinessFlag.objects.filter(name=name, scope=scope).delete()
    log.info("flag cleared name=%r scope=%r by=%r existed=%s", name, scope, actor, bool(deleted))
    return bool(deleted)


def flag_list(*, name: str | None = None, scope: str | None = None, limit: int = 500) -> list[ReadinessFlag]:
    """Flags, optionally of one name and/or scope. Raises FlagError for a filter no flag could match."""
    qs = ReadinessFlag.objects.order_by("name", "scope")
    if name:
        qs = qs.filter(name=_check_name(name))
    if scope:
        qs = qs.filter(scope=_check_scope(scope))
    return list(qs[:limit])


def flag_json(flag: ReadinessFlag) -> dict:
    return {
        "name": flag.name,
        "scope": flag.scope,
        "set_at": flag.set_at.isoformat(),
        "set_by": flag.set_by,
        "note": flag.note,
    }
