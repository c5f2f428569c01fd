"""The file-arrival sensor: complete files in a source's folder become events (docs/events.md).

A file is identified by name, size and modification time; that identity is the event's version,
so it is in the biz_key: the same file scanned again is the same run, a rewritten file a new one.
"""

import logging
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tasks.models import EventDelivery, TriggerSource
from tasks.rules import events
from tasks.triggers.events import ACCEPTED, event_intake, event_metric_count

log = logging.getLogger("harness.sensors")
BAD_FILE_NAME = "bad_file_name"  # metric outcome: a file skipped because its name is not UTF-8


@dataclass
class ScanResult:
    sources: int = 0
    ready: int = 0  # complete files seen
    accepted: int = 0  # new runs
    known: int = 0  # files already taken by an earlier scan
    other: int = 0  # duplicates of an existing business key, or refused
    errors: list[str] = field(default_factory=list)


def sensors_scan_all(*, now: datetime) -> ScanResult:
    """Scan every enabled file source once."""
    total = ScanResult()
    for source in TriggerSource.objects.select_related("rule").filter(kind=TriggerSource.Kind.FILE, enabled=True):
        one = sensor_scan(source=source, now=now)
        total.sources += 1
        total.ready += one.ready
        total.accepted += one.accepted
        total.known += one.known
        total.other += one.other
        total.errors.extend(one.errors)
    return total


def sensor_scan(*, source: TriggerSource, now: datetime) -> ScanResult:
    """Turn the complete files of one source's folder into events; files already taken are skipped.

    1. List the folder (top level, regular files only; symlinks are not followed).
    2. Keep complete files: a `.ready` marker, or a final name unchanged for settle_seconds.
    3. Skip those whose delivery id is already remembered (a cheap read: the unique constraint
       on deliveries is what actually guarantees one delivery per file identity).
    4. Hand each remaining file to the common intake as a "file" event.
    """
    result = ScanResult(sources=1)
    folder = Path(source.watch_dir)
    try:
        entries, bad_names = _list(folder)
    except OSError as exc:
        result.errors.append(f"{source.name}: cannot list {folder}: {exc.strerror or exc}")
        event_metric_count(source.name, "scan_error", now=now)
        log.error("sensor %s: cannot list %s: %s", source.name, folder, exc)
        return result
    for raw in bad_names:
        # Its name cannot be a key, a delivery id or a database string: skip this one file, say so
        # each scan until it is renamed, and carry on with the others.
        result.errors.append(f"{source.name}: skipped {raw!r} in {folder}: the file name is not UTF-8; rename it")
        event_metric_count(source.name, BAD_FILE_NAME, now=now)
        log.warning("sensor %s: skipped %r in %s: file name is not UTF-8", source.name, raw, folder)
    ready = events.select_ready_files(
        entries, now=now, require_marker=source.require_ready_marker, settle=timedelta(seconds=source.settle_seconds)
    )
    result.ready = len(ready)
    items = [events.file_payload(e, path=str(folder / e.name)) for e in ready]
    ids = [events.file_delivery_id(p) for p in items]
    known = set(EventDelivery.objects.filter(source=source, delivery_id__in=ids).values_list("delivery_id", flat=True))
    for payload, delivery_id in zip(items, ids, strict=True):
        if delivery_id in known:
            result.known += 1
            continue
        outcome = event_intake(
            source=source, payload=payload, now=now, delivery_id=delivery_id, channel=TriggerSource.Kind.FILE
        )
        if outcome.outcome == ACCEPTED:
            result.accepted += 1
        else:
            result.other += 1
    return result


def _list(folder: Path) -> tuple[list[events.FileEntry], list[bytes]]:
    """The folder's regular files, and the raw names of those whose name is not UTF-8."""
    entries, bad_names = [], []
    with os.scandir(folder) as it:
        for entry in it:
            if not _is_utf8(entry.name):
                if entry.is_file(follow_symlinks=False) and not events.is_temp_name(entry.name):
                    bad_names.append(os.fsencode(entry.name))
                continue
            try:
                if not entry.is_file(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed between listing and stat
            # Whole microseconds, exactly: the identity must not wobble between two scans.
            mtime = datetime.fromtimestamp(st.st_mtime_ns // 10**9, tz=UTC) + timedelta(
                microseconds=(st.st_mtime_ns // 1000) % 10**6
            )
            entries.append(events.FileEntry(name=entry.name, size=st.st_size, mtime=mtime))
    return entries, sorted(bad_names)


def _is_utf8(name: str) -> bool:
    # os.scandir decodes undecodable bytes to lone surrogates (PEP 383); those cannot be encoded back.
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
