"""A wall-clock time typed for a rule (a one-time rule's run-at) → the instant it means.

Pure: no Django, no clock. The time is read on the wall clock of the rule's IANA zone, with the
rule's DST policies applied exactly as cron slots apply them (tasks/rules/schedule.py,
docs/schedule.md): a time inside a spring-forward gap moves to the first instant after the gap
under "shift" and means no instant at all under "skip"; a time in a repeated (fall-back) hour is
its first occurrence, or its second under "last". A one-time rule runs once, so "both" is the first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from tasks.rules import schedule

GAP = "gap"
REPEAT = "repeat"


@dataclass(frozen=True)
class WallInstant:
    """What a naive wall time means in a zone. `utc` is None when it falls in a gap under "skip"."""

    wall: datetime
    timezone: str
    utc: datetime | None
    dst: str = ""  # "", GAP or REPEAT
    note: str = ""

    @property
    def local(self) -> datetime | None:
        return None if self.utc is None else self.utc.astimezone(schedule.validate_timezone(self.timezone))


def wall_instant(wall: datetime, *, timezone: str, dst_gap: str = "shift", dst_repeat: str = "first") -> WallInstant:
    """Read `wall` (naive) on `timezone`'s clock. ScheduleError names the field at fault: the zone,
    a DST policy, or run_at when the instant is outside what a datetime can hold."""
    if not isinstance(wall, datetime) or wall.tzinfo is not None:
        raise ValueError(f"wall must be a naive datetime, got {wall!r}")
    zone = schedule.validate_timezone(timezone)
    placeholder = datetime(2000, 1, 1, tzinfo=UTC)  # the spec only carries the zone and the policies
    schedule.validate_spec(
        schedule.ScheduleSpec(
            kind="once", timezone=timezone, run_at=placeholder, dst_gap=dst_gap, dst_repeat=dst_repeat
        )
    )
    once = "first" if dst_repeat == "both" else dst_repeat
    spec = schedule.ScheduleSpec(kind="once", timezone=timezone, run_at=placeholder, dst_gap=dst_gap, dst_repeat=once)
    try:
        # The one place wall times become instants (cron slots go through it too), so a one-time
        # rule and a cron rule agree on every gap and repeat.
        _floor, candidates = schedule._map_wall(wall, zone, spec, False)
    except (OverflowError, ValueError):
        raise ScheduleRangeError() from None
    if not candidates:  # in a gap, under "skip"
        return WallInstant(wall, timezone, None, GAP, f"DST gap: {wall:%H:%M} does not exist, skipped")
    utc, tag = candidates[0]
    if tag == "gap":
        note = f"DST gap: {wall:%H:%M} does not exist, shifted to {utc.astimezone(zone):%H:%M}"
        return WallInstant(wall, timezone, utc, GAP, note)
    if tag:
        return WallInstant(wall, timezone, utc, REPEAT, f"DST repeat: {tag} of two {wall:%H:%M}")
    return WallInstant(wall, timezone, utc)


class ScheduleRangeError(schedule.ScheduleError):
    """The wall time is a valid datetime, but its instant is before year 1 or after 9999 UTC."""

    def __init__(self):
        super().__init__("run_at", "is out of range: give an instant between year 1 and 9999-12-31 UTC")
