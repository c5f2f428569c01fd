"""The objective pass: each open slot's freshness status, recorded per slot, alerted once per slot.

Run from the sweeper at most every HARNESS_OBJECTIVE_SECONDS (a compare-and-set on its own tick row,
so several sweepers make one pass). A pass costs a fixed number of queries, whatever the number of
rules or slots (OBJECTIVE_PASS_QUERIES; tests/runs/test_objectives.py): it reads the rules with an
objective and, for all of them at once, their recent runs, decisions, holds, pool waits, workers and
pause records; decides each slot with tasks.rules.objectives (pure); writes the rows in one upsert;
and records the alerts in one batch per kind (deadletters.alerts: channels, storm summaries).

Which slots: every slot of the last OBJECTIVE_LOOKBACK with a run, a decision or a hold, plus a due
slot no tick has taken yet, plus the slots a paused rule has skipped. A slot is closed (looked at no
more) once it finished or will not run; a breached slot that is still running stays open, so its
lateness is recorded when it ends.

One page per incident: while the scheduler is stalled, the slots it holds are at risk and breached
with that cause, and their alerts are folded into the one scheduler-stalled alert (not sent, marked
as alerted, so no page follows for them either). A pause with a reason excuses its slots.

What pages and the API read of the rows (a rule's status now, its history, the dashboard's counts):
runs/desk/objectives.py.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeAlias
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db.models import Exists, F, OuterRef, QuerySet, Window
from django.db.models.functions import RowNumber
from django.utils import translation

from deadletters import alert_rules
from deadletters.alerts import admin_link, alert_record_many
from harness_site.audit.models import AuditEntry
from runs.engine.outages import scheduler_stall_after
from runs.models import (
    Attempt,
    Decision,
    PoolSlot,
    PoolWaiter,
    SchedulerTick,
    SlotHold,
    SlotObjective,
    TaskRun,
    WorkerHeartbeat,
)
from tasks import sentences
from tasks.models import BusinessCalendar, TriggerRule
from tasks.rules import objectives as obj
from tasks.rules import schedule

log = logging.getLogger("harness.objectives")

PASS_NAME = "objectives"  # its SchedulerTick row: when the last pass ran
OBJECTIVE_LOOKBACK = timedelta(days=2)
# A slot still open this long after its deadline is closed as breached: the pass stops looking.
CLOSE_AFTER = timedelta(days=1)
RETENTION = timedelta(days=35)
PAUSED_SLOTS = 20  # a paused rule's skipped slots looked at, at most
EXECUTE_QUEUE = "celery"  # runs.engine.sweeper.EXECUTE_QUEUE: every run's message goes there
SCHEDULED = (TriggerRule.Kind.CRON, TriggerRule.Kind.INTERVAL, TriggerRule.Kind.ONCE)
TRIGGERED_BY_SCHEDULE = (TaskRun.Source.SCHEDULER, TaskRun.Source.CATCHUP)
CLOSING = (obj.MET, obj.EXCUSED)
# What a pass costs at most (asserted by the tests): tick claim, rules, rows, runs, decisions, holds,
# waiters, waiting ahead, pool slots, attempts, estimates, workers, audit, the scheduler's tick, and
# the upsert in its transaction (plus the alerts' statements, when there are any).
OBJECTIVE_PASS_QUERIES = 17

# Alert kinds (deadletters.alert_rules knows the others); the severity of each.
AT_RISK_ALERT = alert_rules.OBJECTIVE_AT_RISK
BREACHED_ALERT = alert_rules.OBJECTIVE_BREACHED
RECOVERED_ALERT = alert_rules.OBJECTIVE_RECOVERED
ALERT_SEVERITY = {
    AT_RISK_ALERT: alert_rules.WARNING,
    BREACHED_ALERT: alert_rules.URGENT,
    RECOVERED_ALERT: alert_rules.NOTICE,
}


# A rule's business-day calendar (None: every day is a business day).
CalendarFor: TypeAlias = Callable[[TriggerRule], obj.Calendar | None]
# Alerts to record, by kind: (dedupe key, payload) each.
AlertEvents: TypeAlias = dict[str, list[tuple[str, dict[str, Any]]]]


def objective_period() -> timedelta:
    return timedelta(seconds=settings.HARNESS["OBJECTIVE_SECONDS"])


@dataclass(frozen=True)
class PassResult:
    slots: int = 0
    at_risk: int = 0
    breached: int = 0
    alerts: int = 0


def objective_pass_due(*, now: datetime) -> bool:
    """Claim this period's pass (compare-and-set on its tick row): False when another process made
    one less than objective_period() ago."""
    claimed = SchedulerTick.objects.filter(name=PASS_NAME, last_tick_at__lte=now - objective_period()).update(
        last_tick_at=now
    )
    if claimed:
        return True
    _, created = SchedulerTick.objects.get_or_create(name=PASS_NAME, defaults={"last_tick_at": now})
    return created


def objective_sweep(*, now: datetime, calendar_for: CalendarFor | None = None) -> PassResult | None:
    """One pass if one is due (None: not due). `calendar_for(rule)` gives a rule's business-day
    calendar (None: every day is a business day)."""
    if not objective_pass_due(now=now):
        return None
    return objective_evaluate(now=now, calendar_for=calendar_for)


def objective_evaluate(*, now: datetime, calendar_for: CalendarFor | None = None) -> PassResult:
    """Evaluate every open slot of every rule with an objective at `now`; record and alert.

    1. Read the rules and, for all at once, what their recent slots hold.
    2. Decide each slot's status (pure), keeping the rows already closed as they are.
    3. Upsert the rows; record the alerts not yet sent for each slot (once per slot and kind).
    """
    rules = {r.id: r for r in TriggerRule.objects.filter(kind__in=SCHEDULED).exclude(objective="").only(*_RULE_FIELDS)}
    if not rules:
        return PassResult()
    since = now - OBJECTIVE_LOOKBACK
    facts = _read_facts(rules, since=since, now=now)
    calendars = _calendars(rules.values()) if calendar_for is None else {}
    rows: list[SlotObjective] = []
    alerts: AlertEvents = defaultdict(list)
    for rule_id, rule in rules.items():
        spec = rule.objective_spec()
        assert spec is not None
        calendar_id = rule.business_calendar_id
        calendar = calendar_for(rule) if calendar_for else calendars.get(calendar_id) if calendar_id else None
        estimate = facts.estimates.get(rule_id)
        for slot in sorted(facts.slots[rule_id]):
            old = facts.rows.get((rule_id, slot))
            state = facts.state(rule, slot, now=now)
            status = obj.objective_status(spec, slot, state, now=now, estimate=estimate, calendar=calendar)
            row = _row(rule, slot, status, old=old, state=state, now=now)
            _alerts_for(rule, row, old=old, into=alerts)
            rows.append(row)
    if rows:
        SlotObjective.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["rule", "slot"],
            update_fields=[
                "deadline",
                "status",
                "cause",
                "expected_finish",
                "finished_at",
                "lateness_seconds",
                "closed",
                "alerted_at_risk",
                "alerted_breached",
                "checked_at",
            ],
        )
    sent = sum(
        len(alert_record_many(kind=kind, severity=ALERT_SEVERITY[kind], events=events, now=now))
        for kind, events in alerts.items()
    )
    return PassResult(
        slots=len(rows),
        at_risk=sum(r.status == obj.AT_RISK for r in rows),
        breached=sum(r.status == obj.BREACHED for r in rows),
        alerts=sent,
    )


def _calendars(rules: Iterable[TriggerRule]) -> dict[int, obj.Calendar]:
    """The business calendars the rules run by, each built once for all its rules (one query for
    the calendars, one per calendar for its overrides: bounded by calendars, not by rules)."""
    ids = {r.business_calendar_id for r in rules if r.business_calendar_id}
    return {c.id: c.business_days() for c in BusinessCalendar.objects.filter(id__in=ids)} if ids else {}


_RULE_FIELDS = (
    "id",
    "business_calendar",
    "name",
    "kind",
    "cron",
    "interval_seconds",
    "run_at",
    "timezone",
    "dst_gap",
    "dst_repeat",
    "enabled",
    "paused_at",
    "pause_reason",
    "next_fire_at",
    "objective",
    "objective_offset_seconds",
    "objective_time",
    "objective_start_before_seconds",
    "objective_lead_seconds",
    "heartbeat_every_seconds",
)


# What the pass reads of a run (a run row has some forty columns).
_RUN_FIELDS = (
    "id",
    "rule_id",
    "slot",
    "state",
    "attempts",
    "retry_max_attempts",
    "last_error_kind",
    "trigger_at",
    "run_after",
    "start_at",
    "finish_at",
)


def _row(
    rule: TriggerRule,
    slot: datetime,
    status: obj.ObjectiveStatus,
    *,
    old: SlotObjective | None,
    state: obj.SlotState,
    now: datetime,
) -> SlotObjective:
    # Closed: the outcome is final (finished, will not run, or breached long enough ago).
    final = status.status in CLOSING or (
        status.status == obj.BREACHED
        and (state.phase in (obj.SUCCEEDED, obj.FAILED, obj.NOT_RUN) or now >= status.deadline + CLOSE_AFTER)
    )
    return SlotObjective(
        rule_id=rule.id,
        slot=slot,
        deadline=status.deadline,
        status=status.status,
        cause=sentences.reason_dump(status.cause),
        expected_finish=status.expected_finish,
        finished_at=status.finished_at,
        lateness_seconds=status.lateness.total_seconds() if status.lateness is not None else None,
        closed=final,
        alerted_at_risk=old.alerted_at_risk if old else False,
        alerted_breached=old.alerted_breached if old else False,
        acknowledged_by=old.acknowledged_by if old else "",
        acknowledged_at=old.acknowledged_at if old else None,
        checked_at=now,
    )


def _alerts_for(rule: TriggerRule, row: SlotObjective, *, old: SlotObjective | None, into: AlertEvents) -> None:
    """At risk once per slot, breached once per slot, recovered when an at-risk slot ends met. An
    acknowledged slot alerts no more. A slot held by a stalled scheduler is the scheduler alert's: it
    is marked as alerted for both, and sends nothing now or later (one page per incident)."""
    if row.acknowledged_at is not None:
        return
    if (row.cause or {}).get("code") == obj.CAUSE_SCHEDULER_DOWN and row.status in (obj.AT_RISK, obj.BREACHED):
        row.alerted_at_risk = row.alerted_breached = True
        return
    kind = None
    if row.status == obj.AT_RISK and not row.alerted_at_risk:
        kind, row.alerted_at_risk = AT_RISK_ALERT, True
    elif row.status == obj.BREACHED and not row.alerted_breached:
        kind, row.alerted_breached = BREACHED_ALERT, True
    elif (
        row.status == obj.MET
        and row.alerted_at_risk
        and not row.alerted_breached
        and not (old and old.status == obj.MET)
    ):
        kind = RECOVERED_ALERT
    if kind is None:
        return
    into[kind].append((f"{kind}:{rule.name}:{row.slot.isoformat()}", objective_alert_payload(rule, row, kind=kind)))


def objective_alert_payload(rule: TriggerRule, row: SlotObjective, *, kind: str) -> dict[str, Any]:
    """What an objective alert carries: figures (the slot and deadline as instants with the rule's zone,
    the cause as data), so that delivery words it in each channel's language (deadletters.alert_texts);
    the English title and reason are for the log and for readers of the raw payload."""
    words = cause_text(row.cause, lang="en")
    label = {AT_RISK_ALERT: "at risk", BREACHED_ALERT: "breached", RECOVERED_ALERT: "recovered"}[kind]
    zone = ZoneInfo(rule.timezone)
    slot, deadline = row.slot.astimezone(zone), row.deadline.astimezone(zone)
    return {
        "title": f"rule {rule.name} slot {slot:%Y-%m-%d %H:%M %Z} objective {label}: {words}",
        "rule": rule.name,
        "error_kind": kind,
        "slot": row.slot.isoformat(),
        "deadline": row.deadline.isoformat(),
        "timezone": rule.timezone,
        "cause": row.cause,
        "reason": f"{label}: {words}; objective {deadline:%Y-%m-%d %H:%M %Z}",
        "link": admin_link("admin:tasks_triggerrule_change", rule.id),
    }


# --- what the slots hold ---------------------------------------------------------------------


@dataclass
class _Facts:
    slots: dict[int, set[datetime]]
    rows: dict[tuple[int, datetime], SlotObjective]
    runs: dict[tuple[int, datetime], TaskRun]
    decisions: dict[tuple[int, datetime], Decision]
    holds: dict[tuple[int, datetime], SlotHold]
    waiters: dict[int, PoolWaiter]
    ahead: dict[int, int]
    in_use: dict[tuple[int, str], int]
    attempt_started: dict[int, datetime]
    estimates: dict[int, obj.Estimate]
    consumed_at: datetime | None
    paused_by: dict[int, str]
    scheduler_down_since: datetime | None = None  # the last tick, when the scheduler is stalled

    def state(self, rule: TriggerRule, slot: datetime, *, now: datetime) -> obj.SlotState:
        """The pure SlotState of one slot from the records read."""
        key = (rule.id, slot)
        run = self.runs.get(key)
        if run is not None:
            return _run_state(run, self, now=now)
        decision = self.decisions.get(key)
        if decision is not None:
            return obj.SlotState(
                obj.NOT_RUN, decision=str(decision.get_reason_display()), decision_reason=decision.reason
            )
        hold = self.holds.get(key)
        if hold is not None:
            if hold.reason == SlotHold.Reason.NOT_READY:
                missing = tuple((hold.details or {}).get("missing") or ())
                return obj.SlotState(obj.WAITING_READY, since=hold.created_at, flags=missing)
            return obj.SlotState(obj.WAITING_OVERLAP, since=hold.created_at)
        if not rule.enabled and rule.paused_at is not None and slot >= rule.paused_at:
            return obj.SlotState(
                obj.PAUSED,
                paused_at=rule.paused_at,
                paused_by=self.paused_by.get(rule.id, ""),
                pause_reason=rule.pause_reason,
            )
        return obj.SlotState(obj.NOT_CLAIMED, since=slot, scheduler_down_since=self.scheduler_down_since)


def _run_state(run: TaskRun, facts: _Facts, *, now: datetime) -> obj.SlotState:
    s = TaskRun.State
    attempt, max_attempts, error_kind = run.attempts, run.retry_max_attempts, run.last_error_kind
    if run.state == s.SUCCEEDED:
        return obj.SlotState(obj.SUCCEEDED, finished_at=run.finish_at)
    if run.state in (s.FAILED, s.CANCELLED):
        return obj.SlotState(obj.FAILED, attempt=attempt, max_attempts=max_attempts, error_kind=error_kind)
    if run.state == s.COALESCED:
        return obj.SlotState(obj.NOT_RUN, decision=str(run.get_state_display()), decision_reason="coalesced")
    if run.state == s.AWAITING_APPROVAL:
        return obj.SlotState(obj.AWAITING_APPROVAL)
    if run.state == s.RUNNING:
        return obj.SlotState(obj.RUNNING, since=facts.attempt_started.get(run.id, run.start_at or now))
    waiter = facts.waiters.get(run.id)
    if waiter is not None:
        pool = waiter.pool
        if waiter.reason == PoolWaiter.Reason.CONCURRENCY:
            return obj.SlotState(
                obj.WAITING_POOL,
                since=waiter.since,
                pool=pool.name,
                in_use=facts.in_use.get((pool.id, waiter.key), 0),
                limit=pool.max_concurrency,
                ahead=facts.ahead.get(run.id, 0),
            )
        return obj.SlotState(
            obj.WAITING_RATE, since=waiter.since, pool=pool.name, until=pool.paused_until or waiter.until
        )
    if run.state == s.WAITING_RETRY:
        return obj.SlotState(
            obj.RETRYING,
            next_try=run.run_after,
            attempt=attempt,
            max_attempts=max_attempts,
            error_kind=error_kind,
        )
    return obj.SlotState(
        obj.QUEUED, since=run.trigger_at, run_after=run.run_after, queue=EXECUTE_QUEUE, consumed_at=facts.consumed_at
    )


def _read_facts(rules: dict[int, TriggerRule], *, since: datetime, now: datetime) -> _Facts:
    ids = list(rules)
    slots: dict[int, set[datetime]] = {rule_id: set() for rule_id in ids}
    # Open rows only (slot_objective_open_idx): a closed slot is final. An open slot older than the
    # lookback (a deadline days after its slot) widens the window for its records.
    rows = {(r.rule_id, r.slot): r for r in SlotObjective.objects.filter(rule_id__in=ids, closed=False, slot__lte=now)}
    since = min([since, *(slot for _, slot in rows)])
    # Records of closed slots are not read again (the unique (rule, slot) index answers the
    # subquery), so a pass reads the open work, not two days of a busy rule's runs.
    closed = SlotObjective.objects.filter(rule_id=OuterRef("rule_id"), slot=OuterRef("slot"), closed=True)
    # The filters make rule_id and slot present; the checks below say so to the type checker.
    runs: dict[tuple[int, datetime], TaskRun] = {}
    for run in (
        TaskRun.objects.filter(
            rule_id__in=ids, slot__gte=since, slot__lte=now, is_trial=False, source__in=TRIGGERED_BY_SCHEDULE
        )
        .exclude(Exists(closed))
        .only(*_RUN_FIELDS)
        .order_by("id")
    ):
        if run.rule_id is not None and run.slot is not None:
            runs.setdefault((run.rule_id, run.slot), run)
    decisions: dict[tuple[int, datetime], Decision] = {}
    for d in (
        Decision.objects.filter(rule_id__in=ids, slot__gte=since, slot__lte=now).exclude(Exists(closed)).order_by("-id")
    ):
        if d.rule_id is not None and d.slot is not None:
            decisions[(d.rule_id, d.slot)] = d
    holds = {(h.rule_id, h.slot): h for h in SlotHold.objects.filter(rule_id__in=ids, slot__gte=since, slot__lte=now)}
    for rule_id, slot in (*rows, *runs, *decisions, *holds):
        slots[rule_id].add(slot)
    for rule in rules.values():
        slots[rule.id].update(_unrecorded_slots(rule, now=now))

    waiting_runs = [r.id for r in runs.values() if r.state in TaskRun.CLAIMABLE]
    waiters = {w.run_id: w for w in PoolWaiter.objects.filter(run_id__in=waiting_runs).select_related("pool")}
    ahead: dict[int, int] = {}
    in_use: dict[tuple[int, str], int] = {}
    if waiters:
        pools = {w.pool_id for w in waiters.values()}
        queue: dict[tuple[int, str, str], list[datetime]] = defaultdict(list)
        for pool_id, key, reason, at in PoolWaiter.objects.filter(pool_id__in=pools).values_list(
            "pool_id", "key", "reason", "since"
        ):
            queue[(pool_id, key, reason)].append(at)
        for w in waiters.values():
            ahead[w.run_id] = sum(at < w.since for at in queue[(w.pool_id, w.key, w.reason)])
        for pool_id, key in PoolSlot.objects.filter(pool_id__in=pools, expires_at__gt=now).values_list(
            "pool_id", "key"
        ):
            in_use[(pool_id, key)] = in_use.get((pool_id, key), 0) + 1
    running = [r.id for r in runs.values() if r.state == TaskRun.State.RUNNING]
    attempt_started = dict(
        Attempt.objects.filter(run_id__in=running, outcome=Attempt.Outcome.RUNNING).values_list("run_id", "started_at")
    )
    return _Facts(
        slots=slots,
        rows=rows,
        runs=runs,
        decisions=decisions,
        holds=holds,
        waiters=waiters,
        ahead=ahead,
        in_use=in_use,
        attempt_started=attempt_started,
        estimates=objective_estimates(ids),
        consumed_at=_queue_consumed_at(EXECUTE_QUEUE, now=now),
        paused_by=_paused_by([r for r in rules.values() if not r.enabled]),
        scheduler_down_since=_scheduler_down_since(now=now),
    )


def _scheduler_down_since(*, now: datetime) -> datetime | None:
    """The scheduler's last tick if it has stalled since (the stall alert's test); None while it ticks,
    or before its first tick (starting, as the stall alert says)."""
    last = SchedulerTick.objects.filter(name="scheduler").values_list("last_tick_at", flat=True).first()
    return last if last is not None and now - last > scheduler_stall_after() else None


def _unrecorded_slots(rule: TriggerRule, *, now: datetime) -> list[datetime]:
    """Slots with no record yet: a due slot no tick has taken, or the slots a paused rule skips."""
    if rule.enabled:
        due = rule.next_fire_at
        return [due] if due is not None and due <= now else []
    if rule.paused_at is None:
        return []
    # Not the slots closed already (breached a day ago): they would be written again on every pass.
    start = max(rule.paused_at, now - CLOSE_AFTER)
    try:
        found = schedule.slots_between(rule.schedule_spec(), start - timedelta(microseconds=1), now)
    except (schedule.ScheduleError, ValueError, OverflowError):
        return []
    return found[-PAUSED_SLOTS:]


def objective_estimates(rule_ids: list[int]) -> dict[int, obj.Estimate]:
    """Each rule's estimate from its last SAMPLE_RUNS successful scheduled runs (one query, a window)."""
    ranked = (
        TaskRun.objects.filter(
            rule_id__in=rule_ids, state=TaskRun.State.SUCCEEDED, is_trial=False, start_at__isnull=False
        )
        .annotate(n=Window(RowNumber(), partition_by=[F("rule_id")], order_by=F("finish_at").desc()))
        .filter(n__lte=obj.SAMPLE_RUNS)
        .values_list("rule_id", "trigger_at", "run_after", "start_at", "finish_at")
    )
    samples: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for rule_id, trigger_at, run_after, start_at, finish_at in ranked:
        if start_at is None or finish_at is None:
            continue  # a succeeded run has both; the column allows none
        ready = max(trigger_at, run_after)
        samples[rule_id].append(((start_at - ready).total_seconds(), (finish_at - start_at).total_seconds()))
    return {rule_id: obj.estimate_duration(samples.get(rule_id, [])) for rule_id in rule_ids}


def _queue_consumed_at(queue: str, *, now: datetime) -> datetime | None:
    """When a worker consuming `queue` last took work (or had none to take); None: no worker reports."""
    latest = None
    for queues, progress_at in WorkerHeartbeat.objects.filter(stopping=False).values_list("queues", "progress_at"):
        if queue in [q.strip() for q in (queues or "").split(",")] and (latest is None or progress_at > latest):
            latest = progress_at
    return latest


def _paused_by(rules: list[TriggerRule]) -> dict[int, str]:
    """Who paused each rule (its latest pause in the audit log)."""
    if not rules:
        return {}
    found: dict[int, str] = {}
    entries = AuditEntry.objects.filter(
        action=AuditEntry.Action.RULE_PAUSE, target_type="rule", target_id__in=[str(r.id) for r in rules]
    ).order_by("-at", "-id")
    for target_id, actor in entries.values_list("target_id", "actor"):
        found.setdefault(int(target_id), actor)
    return found


def objective_prune(*, now: datetime) -> int:
    """Delete slot objectives older than RETENTION (slot_objective_slot_idx)."""
    return SlotObjective.objects.filter(slot__lt=now - RETENTION).delete()[0]


# --- causes as stored data -------------------------------------------------------------------


def cause_text(data: dict[str, Any], *, lang: str | None = None) -> str:
    """The stored cause in words: the active language, or `lang`."""
    reason = sentences.reason_load(data)
    if lang is None:
        return sentences.say(reason)
    with translation.override(lang):
        return sentences.say(reason)


def objective_acknowledge(*, rows: QuerySet[SlotObjective], actor: str, now: datetime) -> int:
    """Acknowledge slot objectives: on-call has it, no more alerts for those slots. Returns how many
    were acknowledged now (an acknowledged row stays as it was)."""
    return rows.filter(acknowledged_at__isnull=True).update(acknowledged_by=actor[:150], acknowledged_at=now)


__all__ = [
    "cause_text",
    "objective_acknowledge",
    "objective_evaluate",
    "objective_prune",
    "objective_sweep",
]
