"""Was it down long enough to be an incident? What a process that lives through a database or broker
outage saw of it, decided from its own failed and next successful tries (pure: `now` is passed in).

A worker's heartbeat thread tries the database every heartbeat, and its queue watch tries the broker;
each keeps one Downtime per part. A single failed try is a hiccup, not an incident: an outage is
recorded only when the failures lasted at least `at_least` (two heartbeat intervals), from the first
failed try to the next successful one. Recording it is runs.engine.incidents.incident_record_outage's.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Span:
    start: datetime  # the first failed try
    end: datetime  # the next successful one

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


class Downtime:
    """Down since the first failed try; back at the next success, which yields the span when it lasted
    at least `at_least`, else None (a hiccup, forgotten)."""

    def __init__(self, *, at_least: timedelta):
        self.at_least = at_least
        self.down_since: datetime | None = None

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, *, now: datetime) -> None:
        if self.down_since is None:
            self.down_since = now

    def succeeded(self, *, now: datetime) -> Span | None:
        since, self.down_since = self.down_since, None
        if since is None or now - since < self.at_least:
            return None
        return Span(start=since, end=now)
