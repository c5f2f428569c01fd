"""Which alerts are raised, and how each is recorded: once per event (deduped), stored in the event's
own transaction (the outbox, Alert rows), folded beyond a storm limit.

Every alert carries run id, biz_key, rule, error kind and a link to the admin page (PAYLOAD_FIELDS).
The built-in log gets every alert as soon as the event commits; email, webhook and log channels
(AlertChannel rows) get those at or above their minimum severity through the delivery queue
(deadletters.alert_queue), never in the way of the failure being recorded.
"""

import logging
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

from django.db import IntegrityError, transaction

from deadletters import alert_rules as rules
from deadletters.alert_queue import alert_queue_on_commit
from deadletters.alert_urls import admin_link
from deadletters.models import Alert, AlertChannel, DeadLetter
from tasks.models import TriggerRule

log = logging.getLogger("harness.alerts")

# What every final-failure alert carries; the rule lint checks run_id and biz_key are among them.
ALERT_FIELDS = frozenset(rules.PAYLOAD_FIELDS)


def alert_record(*, kind: str, severity: str, dedupe_key: str, payload: dict, now: datetime) -> Alert | None:
    """Record one alert in the caller's transaction; after commit, log it and queue its deliveries.

    Invariants: an event alerts once (the log entry's unique dedupe_key: a second report of the same
    event returns None); recording never raises and never undoes the caller's work (its own savepoint);
    a storm beyond STORM_LIMIT per channel, rule and kind within a window is folded, not queued.
    """
    entries = alert_record_many(kind=kind, severity=severity, events=[(dedupe_key, payload)], now=now)
    return entries[0] if entries else None


def alert_record_many(*, kind: str, severity: str, events: list[tuple[str, dict]], now: datetime) -> list[Alert]:
    """Record alerts of one kind at once (a tick's missed slots): alert_record's rows and invariants,
    in a fixed number of statements per channel and storm group, not per alert. Returns the log
    entries recorded; an event that alerted already has none."""
    window = rules.storm_window(now)
    fresh: dict[str, dict] = {}  # dedupe_key -> the row's fields; a key twice in `events` alerts once
    for dedupe_key, payload in events:
        full = {
            **dict.fromkeys(rules.PAYLOAD_FIELDS),
            **payload,
            "kind": kind,
            "severity": severity,
            "at": now.isoformat(),
        }
        fresh.setdefault(
            dedupe_key[:300],
            {
                "severity": severity,
                "kind": kind,
                "dedupe_key": dedupe_key[:300],
                "group_key": rules.storm_group(rule=full.get("rule"), kind=kind)[:200],
                "window_start": window,
                "payload": full,
                "created_at": now,
            },
        )
    try:
        with transaction.atomic():
            if len(fresh) > 1:  # one event: its unique dedupe_key answers (IntegrityError), no read first
                for key in Alert.objects.filter(channel=None, dedupe_key__in=list(fresh)).values_list(
                    "dedupe_key", flat=True
                ):
                    del fresh[key]  # this event has alerted already
                if not fresh:
                    return []
            entries = Alert.objects.bulk_create(
                [Alert(channel=None, state=Alert.State.SENT, sent_at=now, **row) for row in fresh.values()]
            )
            rows = []
            for channel in AlertChannel.objects.filter(enabled=True):
                if not rules.severity_reaches(severity, channel.min_severity):
                    continue
                seen: dict[str, int] = {}  # group -> rows in this window (alert_storm_idx); two workers
                for row in fresh.values():  # counting at once may both send: bounded by their number
                    group = row["group_key"]
                    if group not in seen:
                        seen[group] = Alert.objects.filter(
                            channel=channel, group_key=group, window_start=window
                        ).count()
                    if rules.storm_fold(recorded_in_window=seen[group]):
                        rows.append(Alert(channel=channel, state=Alert.State.FOLDED, **row))
                    else:
                        rows.append(Alert(channel=channel, next_attempt_at=now, **row))
                    seen[group] += 1
            # Both databases return the ids of a bulk insert (PostgreSQL, SQLite 3.35+).
            pending = [a for a in Alert.objects.bulk_create(rows) if a.state == Alert.State.PENDING]
    except IntegrityError:
        if len(events) == 1:
            return []  # this event has alerted already (recorded by another process meanwhile)
        # Another process recorded one of them meanwhile: each on its own, so the others still alert.
        return [
            e
            for key, payload in events
            if (e := alert_record(kind=kind, severity=severity, dedupe_key=key, payload=payload, now=now))
        ]
    except Exception:  # an alert that cannot be recorded must not undo the failure it reports
        log.exception("could not record %s alert %s", kind, ", ".join(list(fresh)[:3]))
        return []
    payloads = [row["payload"] for row in fresh.values()]
    pending_ids = [a.id for a in pending]
    alert_queue_on_commit(payloads, pending_ids)
    return entries


# --- the events -------------------------------------------------------------------------------


def alert_final_failure(*, ticket: DeadLetter, reason: str, now: datetime | None = None) -> Alert | None:
    """A run failed for good and its ticket is open: urgent. Call in the ticket's transaction."""
    return alert_record(
        kind=rules.FINAL_FAILURE,
        severity=rules.EVENT_SEVERITY[rules.FINAL_FAILURE],
        dedupe_key=f"final:{ticket.pk}",
        payload={
            "title": f"run {ticket.run_id} failed for good: {ticket.biz_key}",
            "run_id": ticket.run_id,
            "biz_key": ticket.biz_key,
            "rule": ticket.rule_name or None,
            "error_kind": ticket.error_kind,
            "attempt": ticket.attempts,
            "reason": reason,
            "error": (ticket.last_error or "")[:500],
            "ticket_id": ticket.pk,
            "link": admin_link("admin:deadletters_deadletter_change", ticket.pk),
        },
        now=now or ticket.last_failure_at,
    )


def alert_retry(*, run, attempt: int, max_attempts: int, error, now: datetime) -> Alert | None:
    """An attempt failed and the run will retry: a notice on the first, a warning near the cap."""
    severity = rules.retry_severity(attempt=attempt, max_attempts=max_attempts)
    if severity is None:
        return None
    return alert_record(
        kind=rules.RETRY,
        severity=severity,
        dedupe_key=f"retry:{run.id}:{attempt}",
        payload={
            "title": f"run {run.id} attempt {attempt} of {max_attempts} failed, will retry: {run.biz_key}",
            "run_id": run.id,
            "biz_key": run.biz_key,
            "rule": run.rule_name or None,
            "error_kind": error.kind,
            "attempt": f"{attempt} of {max_attempts}",
            "attempt_n": attempt,
            "attempt_max": max_attempts,
            "error": (error.message or "")[:500],
            "link": admin_link("admin:runs_taskrun_change", run.id),
        },
        now=now,
    )


def alert_slot_expired(*, rule_name: str, slot: datetime, missing: list[str], now: datetime) -> Alert | None:
    """A slot waited for its readiness flags until the deadline and expired. Call in the decision's
    transaction."""
    return alert_record(
        kind=rules.SLOT_EXPIRED,
        severity=rules.EVENT_SEVERITY[rules.SLOT_EXPIRED],
        dedupe_key=f"expired:{rule_name}:{slot.isoformat()}",
        payload={
            "title": f"rule {rule_name} slot {slot:%Y-%m-%dT%H:%M:%SZ} expired: dependencies not ready "
            f"(missing {', '.join(missing) or '-'})",
            "rule": rule_name,
            "error_kind": "not_ready_expired",
            "slot": slot.isoformat(),
            "slot_utc": f"{slot:%Y-%m-%dT%H:%M:%SZ}",
            "missing": list(missing),
            "reason": f"missing: {', '.join(missing) or '-'}",
            "link": _rule_link(rule_name),
        },
        now=now,
    )


CALENDAR_NO_DATA = rules.CALENDAR_NO_DATA
MISSED_REASON = "missed"  # runs.models.Decision.Reason.MISSED (runs is the layer above: not imported)


def alert_decisions(decisions: list, *, now: datetime) -> int:
    """Alert the slot decisions that warrant one, just written in the caller's transaction: a slot
    missed beyond the catch-up window (reason missed) is a warning. One batch for a whole tick's
    decisions; returns how many alerts were recorded."""
    events = []
    links: dict[int, str] = {}
    for d in decisions:
        if d.reason != MISSED_REASON or d.slot is None or d.rule_id is None:
            continue
        rule_name = d.rule.name
        if d.rule_id not in links:
            links[d.rule_id] = _rule_link(rule_name, rule_id=d.rule_id)
        details = d.details or {}
        events.append(
            (
                f"missed:{rule_name}:{d.slot.isoformat()}",
                {
                    "title": f"rule {rule_name} missed slot {d.slot:%Y-%m-%dT%H:%M:%SZ}",
                    "rule": rule_name,
                    "error_kind": "missed",
                    "slot": d.slot.isoformat(),
                    "slot_utc": f"{d.slot:%Y-%m-%dT%H:%M:%SZ}",
                    "late": details.get("late_seconds"),
                    "catchup": details.get("catchup"),
                    "reason": f"{details.get('late_seconds', '?')}s late, catch-up {details.get('catchup', '?')}",
                    "link": links[d.rule_id],
                },
            )
        )
    if not events:
        return 0
    severity = rules.EVENT_SEVERITY[rules.SLOT_MISSED]
    return len(alert_record_many(kind=rules.SLOT_MISSED, severity=severity, events=events, now=now))


def _rule_link(rule_name: str, *, rule_id: int | None = None) -> str:
    if rule_id is None:
        rule_id = TriggerRule.objects.filter(name=rule_name).values_list("id", flat=True).first()
    if rule_id is None:
        return admin_link("admin:tasks_triggerrule_changelist")
    return admin_link("admin:tasks_triggerrule_change", rule_id)


def alert_check_scheduler(*, health: Mapping[str, Any], now: datetime, link: str | None = None) -> Alert | None:
    """Alert once per stall, from the scheduler's health figures (runs.desk.selectors.scheduler_health).

    The stall is named by the last tick it follows, so a check every minute while it lasts finds its
    alert recorded; a new stall after recovery alerts again. A scheduler that never ticked is
    starting, not stalled. `link`: the page of the incident it opens (default: the desk's index).
    """
    last = health.get("last_tick_at")
    if last is None or health["last_tick_age_seconds"] <= health["stall_after_seconds"]:
        return None  # never ticked (starting), or ticking: an overdue slot alerts as a missed slot
    return alert_record(
        kind=rules.SCHEDULER_STALLED,
        severity=rules.EVENT_SEVERITY[rules.SCHEDULER_STALLED],
        dedupe_key=f"stalled:{last.isoformat()}",
        payload={
            "title": f"scheduler stalled: no tick for {health['last_tick_age_seconds']:.0f}s",
            "error_kind": "scheduler_stalled",
            "last_tick_at": last.isoformat(),
            "age": f"{health['last_tick_age_seconds']:.0f}",
            "since": f"{last:%Y-%m-%dT%H:%M:%SZ}",
            "stall": f"{health['stall_after_seconds']:.0f}",
            "reason": f"no tick since {last:%Y-%m-%dT%H:%M:%SZ}; stalled after {health['stall_after_seconds']:.0f}s",
            "link": link or admin_link("admin:index"),
        },
        now=now,
    )


def alert_check_calendars(*, gaps: list[dict], now: datetime) -> list[Alert]:
    """Alert business calendars without data ahead (tasks.models.calendar.calendar_gaps), escalating as
    the first such date approaches (alert_rules.calendar_step): each step once per calendar and year,
    so a check every minute finds its alert recorded. Returns the alerts recorded now."""
    by_severity: dict[str, list[tuple[str, dict]]] = {}
    for gap in gaps:
        no_data_from = date.fromisoformat(gap["no_data_from"])
        step = rules.calendar_step(no_data_from=no_data_from, now=now)
        if step is None:
            continue
        by_severity.setdefault(step.severity, []).append(
            (
                rules.calendar_dedupe_key(calendar=gap["calendar"], no_data_from=no_data_from, step=step),
                {
                    "title": f"business calendar {gap['calendar']} has no data from {gap['no_data_from']} "
                    f"(in {gap['days_left']} days)",
                    "error_kind": CALENDAR_NO_DATA,
                    "rule": ", ".join(gap["rules"]),
                    # The figures, worded at delivery in each channel's language (alert_texts).
                    "calendar": gap["calendar"],
                    "no_data_from": gap["no_data_from"],
                    "days_left": gap["days_left"],
                    "step": step.name,
                    "source": gap["source"] or "",
                    "uncertain_days": gap.get("uncertain_days") or "",
                    "reason": f"{gap['source'] or 'no library'} has no holidays or make-up working days from "
                    f"{gap['no_data_from']}.",
                    "link": admin_link("admin:tasks_businesscalendar_changelist"),
                },
            )
        )
    recorded: list[Alert] = []
    for severity, events in by_severity.items():
        recorded += alert_record_many(kind=CALENDAR_NO_DATA, severity=severity, events=events, now=now)
    return recorded


def alert_send_test(*, channel: AlertChannel, now: datetime) -> Alert:
    """A test alert to one channel (the admin's "send test alert"), queued like any other."""
    payload = {
        **{f: None for f in rules.PAYLOAD_FIELDS},
        "kind": rules.TEST,
        "severity": rules.NOTICE,
        "title": f"test alert for channel {channel.name}",
        "channel": channel.name,
        "at": now.isoformat(),
        "link": admin_link("admin:deadletters_alertchannel_change", channel.pk),
    }
    with transaction.atomic():
        alert = Alert.objects.create(
            channel=channel,
            severity=rules.NOTICE,
            kind=rules.TEST,
            dedupe_key=f"test:{channel.pk}:{now.isoformat()}",
            group_key=f"test:{channel.pk}",
            window_start=rules.storm_window(now),
            payload=payload,
            created_at=now,
            next_attempt_at=now,
        )
        alert_queue_on_commit([payload], [alert.id])
    return alert
