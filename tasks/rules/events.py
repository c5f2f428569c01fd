"""Event intake decisions: signatures, freshness, payload mapping, file selection. Pure: no ORM, no clock.

Every check raises :class:`Refused` with a stable reason code, an HTTP status and a detail that
names what was wrong and where, so the webhook view, the Python intake and the Celery task all
refuse the same things in the same words (docs/events.md lists the codes).
"""

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tasks.rules import keys
from tasks.rules.json_limits import strict_loads

# A signed delivery is accepted only within this distance of our clock, either way.
TIMESTAMP_TOLERANCE = timedelta(minutes=5)
HEADER_TIMESTAMP = "X-Harness-Timestamp"
HEADER_DELIVERY = "X-Harness-Delivery"
HEADER_SIGNATURE = "X-Harness-Signature"
DELIVERY_ID_RE = re.compile(r"[A-Za-z0-9._:\-]{1,200}")
SOURCE_NAME_RE = re.compile(r"[-a-zA-Z0-9_]{1,100}")  # TriggerSource.name is a SlugField

# The placeholders an event rule's dedupe-key template may use besides {rule}, {business_date}
# and its params. {slot} is not one: an event has no slot, and the key must not depend on when
# it arrived, or a redelivery a minute later would become a second run.
EVENT_PLACEHOLDERS = ("object_id", "action", "version", "source")
CRITERIA = ("object_id", "action", "version")
MAX_CRITERION_CHARS = 200
MAX_FIELD_CHARS = 2000

# File sensor: names that are still being written by a well-behaved producer, or are not data.
READY_SUFFIX = ".ready"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
TEMP_SUFFIXES = (".tmp", ".temp", ".part", ".partial", ".crdownload", ".download", ".swp", ".lock", "~")


class Refused(Exception):
    """An event that must not run. `code` is stable (metrics, docs); `detail` is for a human."""

    def __init__(self, code: str, detail: str, *, status: int = 400):
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.status = status


# --- headers and freshness (signatures: tasks/rules/signatures.py) -------------------------


def parse_timestamp(timestamp: str, *, header: str = HEADER_TIMESTAMP) -> datetime:
    """The sender's instant from the timestamp header: whole Unix seconds, nothing else."""
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 11:
        raise Refused("bad_timestamp", f"{header} must be whole Unix seconds, got {timestamp[:40]!r}")
    return datetime.fromtimestamp(int(timestamp), tz=UTC)


def check_freshness(
    sent: datetime, *, now: datetime, tolerance: timedelta = TIMESTAMP_TOLERANCE, header: str = HEADER_TIMESTAMP
) -> None:
    """Refuse a delivery signed more than `tolerance` before or after `now` (exactly `tolerance` is fine)."""
    if sent < now - tolerance:
        raise Refused(
            "timestamp_too_old",
            f"{header} is {int((now - sent).total_seconds())} s old; the limit is {int(tolerance.total_seconds())} s",
            status=401,
        )
    if sent > now + tolerance:
        raise Refused(
            "timestamp_too_new",
            f"{header} is {int((sent - now).total_seconds())} s in the future; "
            f"the limit is {int(tolerance.total_seconds())} s",
            status=401,
        )


def check_delivery_id(value: str, *, header: str = HEADER_DELIVERY) -> str:
    if not DELIVERY_ID_RE.fullmatch(value):  # fullmatch: "$" alone would let a trailing newline through
        raise Refused(
            "bad_delivery_id", f"{header} must be 1-200 characters of A-Z a-z 0-9 . _ : -, got {value[:40]!r}"
        )
    return value


def printable(text: str) -> str:
    """`text` for a record or a log line: as is when harmless, else escaped (NUL, newlines, surrogates)."""
    return text if text.isprintable() and text.isascii() else ascii(text)[1:-1]


def check_source_name(name: str) -> str:
    """A name that cannot be a source's (a NUL, a space, 101 characters) is unknown, without a lookup:
    PostgreSQL refuses NUL in a query, and such a name is never worth a database round trip."""
    if not SOURCE_NAME_RE.fullmatch(name):
        raise Refused("unknown_source", f"no trigger source named {name[:100]!r}", status=404)
    return name


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def canonical_json(payload: dict[str, Any]) -> bytes:
    """A payload's bytes when it did not come over HTTP: stable, so equal payloads hash equal."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def parse_body(body: bytes) -> dict[str, Any]:
    """A JSON object we can store: no NaN/Infinity, no NUL or lone surrogates, bounded nesting."""
    try:
        payload = strict_loads(body)
    except ValueError as exc:
        raise Refused("malformed_json", f"body is not JSON we accept: {exc}") from None
    if not isinstance(payload, dict):
        raise Refused("malformed_json", f"body must be a JSON object, got {type(payload).__name__}")
    return payload


# --- payload mapping ------------------------------------------------------------------------


@dataclass(frozen=True)
class Mapping:
    """How one source's payload maps to the event's criteria and what of it the run keeps."""

    object_id_path: str = "object_id"
    action_path: str = "action"
    version_path: str = "version"
    snapshot_fields: tuple[str, ...] = ()
    reference_fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class MappedEvent:
    criteria: dict[str, Any]  # {"object_id": ..., "action": ..., "version": ...}, all strings
    snapshot: dict[str, Any]  # declared snapshot paths → scalar values (None when absent)
    refs: dict[str, Any]  # declared reference paths → scalar values (None when absent)


_MISSING = object()


def lookup(payload: dict[str, Any], path: str) -> Any:
    """The value at a dotted path (`order.customer.id`), or _MISSING."""
    value = payload
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def map_payload(payload: dict[str, Any], mapping: Mapping) -> MappedEvent:
    """Criteria, snapshot and references out of a payload; the rest of the document is not kept.

    Criteria must be present, non-empty strings or integers. Declared snapshot and reference
    fields must be scalars: an object or list there would copy a whole document into the run.
    """
    criteria = {}
    for name, path in zip(CRITERIA, (mapping.object_id_path, mapping.action_path, mapping.version_path), strict=True):
        value = lookup(payload, path)
        if value is _MISSING:
            raise Refused("invalid_payload", f"payload has no {path!r} (the event's {name})", status=422)
        if isinstance(value, bool) or not isinstance(value, str | int) or str(value).strip() == "":
            raise Refused(
                "invalid_payload",
                f"payload field {path!r} (the event's {name}) must be a non-empty string or integer, got {value!r:.60}",
                status=422,
            )
        text = str(value)
        if len(text) > MAX_CRITERION_CHARS:
            raise Refused(
                "invalid_payload",
                f"payload field {path!r} is {len(text)} characters; the limit is {MAX_CRITERION_CHARS}",
                status=422,
            )
        criteria[name] = text
    return MappedEvent(
        criteria=criteria,
        snapshot=_declared(payload, mapping.snapshot_fields, "snapshot"),
        refs=_declared(payload, mapping.reference_fields, "reference"),
    )


def _declared(payload: dict[str, Any], paths: Iterable[str], what: str) -> dict[str, Any]:
    kept: dict[str, object] = {}
    for path in paths:
        value = lookup(payload, path)
        if value is _MISSING:
            kept[path] = None
            continue
        if isinstance(value, dict | list):
            raise Refused(
                "invalid_payload",
                f"{what} field {path!r} is a JSON {type(value).__name__}; declare its scalar fields instead",
                status=422,
            )
        if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
            raise Refused(
                "invalid_payload",
                f"{what} field {path!r} is {len(value)} characters; the limit is {MAX_FIELD_CHARS}",
                status=422,
            )
        kept[path] = value
    return kept


def validate_field_paths(paths: object, *, field: str) -> list[str]:
    """Field-level message for a declared list of dotted paths (the admin shows it on the form)."""
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise ValueError(f'{field} must be a JSON list of dotted field names, e.g. ["amount", "customer.tier"]')
    for p in paths:
        if not p or any(not part.isidentifier() and not (part.isascii() and part.isdigit()) for part in p.split(".")):
            raise ValueError(f"{field}: {p!r} is not a dotted field name such as customer.tier")
    return paths


# --- business keys --------------------------------------------------------------------------


def validate_key_template(template: str, *, params: dict[str, Any], by_date: bool = False) -> None:
    """An event rule's template: {object_id} required, no {slot}, and {business_date} only when the
    rule says so (`by_date`, the rule's "event key by date"): the date is the day the event arrived,
    so the same event re-sent after midnight would otherwise become a second run.
    Raises keys.KeyTemplateError."""
    names = keys.placeholders(template)
    if "slot" in names:
        raise keys.KeyTemplateError(
            "Event rules have no slot; use {object_id}, {action} and {version}, e.g. {object_id}:{action}:{version}."
        )
    dated = [n for n in names if n in keys.BUSINESS_DATE_PLACEHOLDERS]
    if dated and not by_date:
        raise keys.KeyTemplateError(
            f"{{{dated[0]}}} in an event key is the day the event arrived: the same event re-sent after "
            'midnight would become a second run. Remove it, or tick "event key by date" '
            "(event_key_by_date) if one run per object per day is what you want."
        )
    keys.validate_template(template, params={**params, **dict.fromkeys(EVENT_PLACEHOLDERS)})
    if "object_id" not in names:
        raise keys.KeyTemplateError(
            "An event rule's template needs {object_id}, or every event would share one key; "
            "e.g. {object_id}:{action}:{version}."
        )


def render_key(
    template: str,
    *,
    rule_id: int,
    rule: str,
    source: str,
    criteria: dict[str, Any],
    business_date: str,
    params: dict[str, Any],
    neighbours: dict[str, str] | None = None,
) -> str:
    """The event's biz_key, in the rule's EVENT namespace with every sender value escaped (invariant 1).
    Criteria override params of the same name; built-ins override both."""
    try:
        rendered = keys.render(
            template,
            rule=rule,
            slot="",
            business_date=business_date,
            params={**params, **criteria},
            escaped=True,
            source=source,
            **(neighbours or {}),
        )
        return keys.scoped(rule_id, keys.EVENT, rendered)
    except (keys.KeyTemplateError, KeyError, ValueError) as exc:
        raise Refused("invalid_key", f"cannot render the business key from {template!r}: {exc}", status=422) from None


# --- file sensor ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FileEntry:
    name: str
    size: int
    mtime: datetime  # aware, UTC


def is_temp_name(name: str) -> bool:
    """Half-written or editor/lock names that are never data: dotfiles (incl. `.~lock`), *.tmp, *.part, …"""
    lower = name.lower()
    return name.startswith((".", "~")) or lower.endswith(TEMP_SUFFIXES)


def select_ready_files(
    entries: Iterable[FileEntry], *, now: datetime, require_marker: bool, settle: timedelta
) -> list[FileEntry]:
    """The data files of one folder listing that are complete, by name, oldest first.

    A file is complete when `<name>.ready` exists next to it, or (unless markers are required)
    when its name is final and it has not changed for `settle`, so a producer that writes in place
    is not read mid-write. Temp names are never data, marker or not.
    """
    files = {e.name: e for e in entries}
    chosen = []
    for name, entry in files.items():
        if is_temp_name(name) or name.endswith(READY_SUFFIX):
            continue
        marked = (name + READY_SUFFIX) in files
        settled = entry.mtime <= now - settle
        if marked or (not require_marker and settled):
            chosen.append(entry)
    return sorted(chosen, key=lambda e: (e.mtime, e.name))


def file_payload(entry: FileEntry, *, path: str) -> dict[str, Any]:
    """The event a file arrival stands for. Its version is the file's identity (size and mtime),
    so a rewritten file is a new event and the same file scanned again is the same one."""
    mtime_us = (entry.mtime - EPOCH) // timedelta(microseconds=1)  # exact integer arithmetic
    return {
        "object_id": entry.name,
        "action": "arrived",
        "version": f"{entry.size}-{mtime_us}",
        "file": {"name": entry.name, "path": path, "size": entry.size, "mtime": entry.mtime.isoformat()},
    }


def file_delivery_id(payload: dict[str, Any]) -> str:
    """A stable delivery id per file identity: a rescan is recognised before any work is done."""
    digest = hashlib.sha256(f"{payload['object_id']}\0{payload['version']}".encode()).hexdigest()[:32]
    return f"file:{digest}"
