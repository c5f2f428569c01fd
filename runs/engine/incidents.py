"""Incidents: spans in which the harness itself was unwell, one record each, and what they cost.

Opened from the figures /healthz reports (runs.desk.harness_health.health_figures, read by the periodic
alerts pass, deadletters.jobs), closed when the figure is well again. A scheduler outage is named by
its last tick: when beat itself was down no pass ran, so the first tick after a gap longer than the
stall period records it (open while that tick writes the missed slots, closed when it is done).
Several passes and ticks at once record one incident (incident_one_open, incident_one_per_start).

One page per incident: the opening alert (the scheduler-stalled alert for a scheduler outage) and one
closing alert with what it cost; the missed-slot alerts of slots inside an outage are not sent
(incident_unfolded).

What an incident cost is read over its span, not stored as it happens: slots decided in it (missed,
superseded, capped, ...), runs of its slots (caught up when claimed later than the slot grace),
alerts recorded in it and operator actions (audit entries) from its start to ACTION_TAIL after its end.
"""

import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict, TypeVar

from django.db import IntegrityError, transaction
from django.db.models import Count, F, Model, Q, QuerySet

from deadletters import alert_rules
from deadletters.alerts import admin_link, alert_check_scheduler, alert_record
from deadletters.models import Alert
from harness_site.audit.models import AuditEntry
from runs.engine.outages import scheduler_stall_after, slot_grace
from runs.models import Decision, Incident, SchedulerTick, TaskRun

log = logging.getLogger("harness.incidents")

SCHEDULER = "scheduler"  # the subject of a scheduler outage, and the beat tick's SchedulerTick name
# Operator actions after an incident ended still belong to it (re-running what it missed).
ACTION_TAIL = timedelta(hours=1)
# Decisions that mean "this slot did not run because the scheduler was not there".
MISSED_REASONS = (
    Decision.Reason.MISSED,
    Decision.Reason.SUPERSEDED,
    Decision.Reason.CATCHUP_CAPPED,
)


@dataclass(frozen=True)
class Problem:
    kind: str
    subject: str
    started_at: datetime
    detail: str


def incident_problems(figures: Mapping[str, Any], *, now: datetime) -> list[Problem]:
    """What is down now, from health_figures (pure): a stalled scheduler (since its last tick; one that
    never ticked is starting, as the stall alert says) and each queue no consuming worker reads."""
    found: list[Problem] = []
    if figures["code"] == "scheduler_stalled" and figures.get("last_tick_at") is not None:
        found.append(Problem(Incident.Kind.SCHEDULER, SCHEDULER, figures["last_tick_at"], figures["reason"]))
    for queue in figures.get("queues_without_worker", ()):
        found.append(Problem(Incident.Kind.QUEUE, queue, now, f"no consuming worker reads queue {queue}"))
    return found


@dataclass
class SyncResult:
    opened: list[int] = field(default_factory=list)
    closed: list[int] = field(default_factory=list)


def incident_sync(*, figures: Mapping[str, Any], now: datetime) -> SyncResult:
    """Open an incident for each problem the figures show that has none open, and close each open one
    whose problem is gone (a scheduler outage ends at the first tick after it). Idempotent: a problem
    already open, or opened by another pass meanwhile, opens nothing; a close is a compare-and-set."""
    result = SyncResult()
    problems = incident_problems(figures, now=now)
    open_rows = {(i.kind, i.subject): i for i in Incident.objects.filter(ended_at=None)}
    for p in problems:
        if (p.kind, p.subject) in open_rows:
            continue
        incident = _open(p, now=now)
        if incident is None:
            continue
        result.opened.append(incident.id)
        if p.kind == Incident.Kind.SCHEDULER:
            alert_check_scheduler(health=figures, now=now, link=incident_link(incident))
        else:
            alert_record(
                kind=alert_rules.INCIDENT_OPENED,
                severity=alert_rules.EVENT_SEVERITY[alert_rules.INCIDENT_OPENED],
                dedupe_key=f"incident-opened:{incident.id}",
                payload=_payload(incident, title=f"incident: {incident} since {incident.started_at:%H:%M:%S}Z"),
                now=now,
            )
    down = {(p.kind, p.subject) for p in problems}
    for key, incident in open_rows.items():
        if key in down:
            continue
        ended = now
        if incident.kind == Incident.Kind.SCHEDULER and figures.get("last_tick_at"):
            ended = max(incident.started_at, min(now, figures["last_tick_at"]))
        if incident_close(incident, ended_at=ended, now=now):
            result.closed.append(incident.id)
    return result


def incident_scheduler_gap(*, now: datetime, name: str = SCHEDULER) -> Incident | None:
    """At the start of a tick: the scheduler outage this tick ends, if no tick ran for longer than the
    stall period before it (opened now if no pass saw it: beat itself was down), else None. The tick
    writes its missed slots inside it, then closes it (incident_close)."""
    last = SchedulerTick.objects.filter(name=name).values_list("last_tick_at", flat=True).first()
    if last is None or now - last <= scheduler_stall_after():
        return None
    found = Incident.objects.filter(kind=Incident.Kind.SCHEDULER, subject=SCHEDULER, started_at=last).first()
    if found is not None:
        return found if found.ended_at is None else None  # closed: another tick has ended it
    detail = f"no scheduler tick from {last:%Y-%m-%dT%H:%M:%S}Z to {now:%Y-%m-%dT%H:%M:%S}Z"
    return _open(Problem(Incident.Kind.SCHEDULER, SCHEDULER, last, detail), now=now)


def incident_close(incident: Incident, *, ended_at: datetime, now: datetime) -> bool:
    """Close an open incident at `ended_at` with its cost counted, and send its closing alert. False
    when another pass or tick closed it first (nothing sent)."""
    cost = incident_cost(incident, until=ended_at)
    summary = _summary(cost)
    # Compare-and-set: 0 rows means another pass or tick closed it first.
    if not Incident.objects.filter(id=incident.id, ended_at=None).update(ended_at=ended_at, summary=summary):
        return False
    incident.ended_at, incident.summary = ended_at, summary
    duration = (ended_at - incident.started_at).total_seconds()
    payload = _payload(
        incident,
        title=f"incident over: {incident}, {duration:.0f}s; {cost.missed} slots missed across {len(cost.rules)} rules",
    )
    payload.update(
        summary,
        ended_at=ended_at.isoformat(),
        ended_utc=f"{ended_at:%Y-%m-%dT%H:%M:%S}",
        duration_s=f"{duration:.0f}",
        reason=f"{cost.missed} slots missed, {cost.caught_up} caught up, across {len(cost.rules)} rules",
    )
    alert_record(
        kind=alert_rules.INCIDENT_CLOSED,
        severity=alert_rules.EVENT_SEVERITY[alert_rules.INCIDENT_CLOSED],
        dedupe_key=f"incident-closed:{incident.id}",
        payload=payload,
        now=now,
    )
    return True


def _summary(cost: "Cost") -> dict[str, int]:
    return {
        "missed": cost.missed,
        "caught_up": cost.caught_up,
        "rules_affected": len(cost.rules),
        "alerts": cost.alerts,
    }


def _open(p: Problem, *, now: datetime) -> Incident | None:
    """Insert the incident; None when another pass or tick opened it first (incident_one_open)."""
    try:
        with transaction.atomic():  # a savepoint: a conflict leaves the caller's transaction usable
            return Incident.objects.create(
                kind=p.kind, subject=p.subject, started_at=p.started_at, detected_at=now, detail=p.detail
            )
    except IntegrityError:
        return None


def _payload(incident: Incident, *, title: str) -> dict[str, Any]:
    return {
        "title": title,
        "error_kind": f"incident_{incident.kind}",
        "incident_id": incident.id,
        "incident_kind": incident.kind,
        "subject": incident.subject,
        "started_at": incident.started_at.isoformat(),
        "started_utc": f"{incident.started_at:%Y-%m-%dT%H:%M:%S}",
        "reason": incident.detail,
        "link": incident_link(incident),
    }


def incident_link(incident: Incident) -> str:
    return admin_link("admin:runs_incident_change", incident.id)


def incident_unfolded(decisions: list[Decision]) -> list[Decision]:
    """Those of `decisions` whose alert is not folded into an incident: a missed slot inside a
    scheduler outage is the outage's, paged once by it. One query, only when a missed slot is there."""
    missed = [d for d in decisions if d.reason == Decision.Reason.MISSED and d.slot is not None]
    if not missed:
        return decisions
    slots = [d.slot for d in missed if d.slot is not None]  # every one (filtered above): said to the type checker
    first, last = min(slots), max(slots)
    spans = list(
        Incident.objects.filter(kind=Incident.Kind.SCHEDULER, started_at__lte=last)
        .filter(Q(ended_at=None) | Q(ended_at__gte=first))
        .values_list("started_at", "ended_at")
    )
    if not spans:
        return decisions

    def folded(d: Decision) -> bool:
        slot = d.slot
        return (
            d in missed
            and slot is not None
            and any(start <= slot and (end is None or slot <= end) for start, end in spans)
        )

    return [d for d in decisions if not folded(d)]


# --- what an incident cost -------------------------------------------------------------------

MISSED_LIST_LIMIT = 500  # the page's selectable missed slots (a re-run takes at most this many too)


class RuleCost(TypedDict):
    """One rule's share of an incident's cost: its slots missed, caught up, and otherwise decided."""

    name: str
    missed: int
    caught_up: int
    other: int


@dataclass
class Cost:
    missed: int = 0
    caught_up: int = 0
    rules: dict[int, RuleCost] = field(default_factory=dict)  # by rule id, ordered by name
    alerts: int = 0


_M = TypeVar("_M", bound=Model)


def _slots_in(qs: QuerySet[_M], incident: Incident, until: datetime) -> QuerySet[_M]:
    # Decisions and runs are written at or after their slot: the created/trigger time bounds the scan.
    return qs.filter(slot__gt=incident.started_at, slot__lte=until)


def incident_cost(incident: Incident, *, until: datetime) -> Cost:
    """The slots of every rule inside (started_at, until]: missed (missed, superseded, capped), other
    decisions, and runs caught up (claimed later than the
    slot grace, or by the tick that ended the outage). Four queries, counted in the
    database, whatever the number of slots."""
    start = incident.started_at
    cost = Cost()
    rules: defaultdict[int, RuleCost] = defaultdict(lambda: {"name": "", "missed": 0, "caught_up": 0, "other": 0})
    decided = (
        _slots_in(Decision.objects.filter(created_at__gte=start), incident, until)  # decision_created_idx
        .values("rule_id", "rule__name")
        .annotate(
            missed=Count("id", filter=Q(reason__in=MISSED_REASONS)),
            other=Count("id", filter=~Q(reason__in=MISSED_REASONS)),
        )
        .order_by()
    )
    for row in decided:
        rule = rules[row["rule_id"]]
        rule["name"], rule["missed"], rule["other"] = row["rule__name"], row["missed"], row["other"]
        cost.missed += row["missed"]
    late = (
        _slots_in(TaskRun.objects.filter(trigger_at__gte=start, rule__isnull=False), incident, until)  # run_recent_idx
        # Later than the grace, or by the tick that ended the outage: the scheduler was not there before.
        .filter(Q(trigger_at__gt=F("slot") + slot_grace()) | Q(trigger_at__gte=until, slot__lt=until))
        .values("rule_id", "rule_name")
        .annotate(n=Count("id"))
        .order_by()
    )
    for run_row in late:
        rule = rules[run_row["rule_id"]]
        rule["caught_up"] = run_row["n"]
        rule["name"] = rule["name"] or run_row["rule_name"]
        cost.caught_up += run_row["n"]
    cost.rules = dict(sorted(rules.items(), key=lambda kv: kv[1]["name"]))
    cost.alerts = Alert.objects.filter(channel=None, created_at__gte=start, created_at__lte=until).count()
    return cost


def incident_missed(incident: Incident, *, now: datetime, limit: int = MISSED_LIST_LIMIT) -> list[Decision]:
    """The missed slots of the incident, oldest first (at most `limit`): what the page offers to re-run."""
    until = incident.ended_at or now
    return list(
        _slots_in(Decision.objects.filter(created_at__gte=incident.started_at), incident, until)
        .filter(reason__in=MISSED_REASONS)
        .select_related("rule")
        .only("id", "slot", "reason", "rule_id", "rule__name", "rule__timezone")
        .order_by("slot", "rule__name")[:limit]
    )


def incident_alerts(incident: Incident, *, now: datetime, limit: int = 100) -> list[Alert]:
    """Alerts recorded during the incident (the log's entries, one per event), and its closing alert."""
    until = incident.ended_at or now
    return list(
        Alert.objects.filter(channel=None, created_at__gte=incident.started_at, created_at__lte=until + ACTION_TAIL)
        .filter(Q(created_at__lte=until) | Q(payload__incident_id=incident.id))
        .order_by("created_at", "id")[:limit]
    )


def incident_actions(incident: Incident, *, now: datetime, limit: int = 100) -> list[AuditEntry]:
    """Operator actions (audit entries) from the incident's start until ACTION_TAIL after its end."""
    until = (incident.ended_at or now) + ACTION_TAIL
    return list(AuditEntry.objects.filter(at__gte=incident.started_at, at__lte=until).order_by("at", "id")[:limit])


# --- database and broker outages, seen by the workers that lived through them ----------------

OUTAGE_KINDS = (Incident.Kind.DATABASE, Incident.Kind.BROKER)


def incident_record_outage(
    *,
    kind: str,
    subject: str,
    started_at: datetime,
    ended_at: datetime,
    join: timedelta,
    seen_by: str,
    now: datetime,
) -> tuple[Incident, bool]:
    """Record a database or broker outage a worker lived through (runs/engine/downtime.py), once it is over.
    `subject` names which database or broker (its address, no credentials). Returns the incident and
    whether it is new.

    Several workers see one outage: a span that overlaps or comes within `join` of one already recorded
    of the same kind widens that one (no second alert); else it is a new incident, closed at once with
    its cost counted and one closing alert (incident_close). Safe under concurrency: each recorder first
    inserts its span as the kind's one open incident (incident_one_open), so a second recorder waits
    for the first to commit (PostgreSQL's unique index; SQLite's IMMEDIATE write lock) and then sees
    its row."""
    subject = subject[:200]
    span = f"{started_at:%Y-%m-%dT%H:%M:%S}Z to {ended_at:%Y-%m-%dT%H:%M:%S}Z"
    detail = f"{kind} {subject} unreachable from {span} (seen by {seen_by})"
    with transaction.atomic():
        mine = _open(Problem(kind, subject, started_at, detail), now=now)  # None: one starts at this instant
        near = (
            Incident.objects.filter(kind=kind, subject=subject, ended_at__isnull=False)
            .filter(started_at__lte=ended_at + join, ended_at__gte=started_at - join)
            .order_by("started_at", "id")
            .first()
        )
        if near is None:
            if mine is None:
                raise IntegrityError(f"an open {kind} incident is in the way")  # none is ever left open
            incident_close(mine, ended_at=ended_at, now=now)
            return mine, True
        if mine is not None:
            mine.delete()  # first: the widened span may take its start (incident_one_per_start)
        until = max(near.ended_at or ended_at, ended_at)
        near.started_at, near.ended_at = min(near.started_at, started_at), until
        cost = incident_cost(near, until=until)
        near.summary = {**near.summary, **_summary(cost)}
        near.save(update_fields=["started_at", "ended_at", "summary"])
        return near, False
