"""The alert delivery queue: which recorded alert is sent to its channel when, by whom, and what
happens when a send fails. A compare-and-set claim sends each alert once; a failure is retried with
bounded backoff from the outbox row (next_attempt_at), not from a countdown in worker memory; folded
storms are summarised when their window ends; finished rows are pruned.
"""

import logging
from datetime import datetime, timedelta

from celery import current_app
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q

from deadletters import alert_rules as rules
from deadletters.alert_delivery import DeliveryError, deliver
from deadletters.alert_texts import alert_message
from deadletters.alert_urls import admin_link
from deadletters.models import Alert

log = logging.getLogger("harness.alerts")

# A delivery in progress holds its row this long (longer than any send's timeout), so the periodic
# sweep and the on-commit task never send one alert twice.
DELIVERY_CLAIM = timedelta(seconds=60)
# A first try whose on-commit message has not been answered this long is sent again. Longer than a run's
# re-send delay (HARNESS_REDISPATCH_SECONDS) on purpose: nothing here looks into the queue, so the delay
# alone must outlast a normal wait behind runs on the default queue (docs/architecture.md, "Lost messages").
ALERT_REDISPATCH_AFTER = timedelta(seconds=30)
DELIVER_BATCH = 200
# Sent, folded and failed outbox rows are kept this long, then pruned in bounded batches.
ALERT_RETENTION = timedelta(days=30)
PRUNE_BATCH = 5000
LOG_LEVEL = {rules.NOTICE: logging.INFO, rules.WARNING: logging.WARNING, rules.URGENT: logging.ERROR}


def alert_queue_on_commit(payloads: list[dict], pending: list[int]) -> None:
    """When the caller's transaction commits: log every alert (the built-in log) and queue a delivery
    of each pending outbox row. Call inside the transaction that recorded them."""
    transaction.on_commit(lambda: _after_commit_many(payloads, pending), robust=True)


def _after_commit_many(payloads: list[dict], pending: list[int]) -> None:
    for payload in payloads:
        _log_alert(payload)
    for alert_id in pending:  # a lost message is picked up by the periodic alerts_check
        alert_send(alert_id)


def _log_alert(payload: dict) -> None:
    msg = alert_message(payload)  # the log speaks English, like the rest of the log
    fields = " ".join(
        f"{f}={payload.get(f)!r}" for f in rules.PAYLOAD_FIELDS
    )  # quoted: one line whatever a value holds
    log.log(LOG_LEVEL.get(payload["severity"], logging.ERROR), "%s | %s", msg.title, fields)


def alert_send(alert_id: int) -> None:
    """Queue one delivery, by task name: a message is a hint, the outbox row is the truth."""
    current_app.send_task("deadletters.alert_deliver", args=[alert_id])


def delivery_retry_base() -> timedelta:
    """The first delay before a failed delivery is tried again (HARNESS_ALERT_RETRY_SECONDS)."""
    return timedelta(seconds=settings.HARNESS["ALERT_RETRY_SECONDS"])


def alert_deliver(*, alert_id: int, now: datetime) -> str:
    """Send one pending alert to its channel; on failure, schedule a bounded retry.

    Compare-and-set claim: only one of the on-commit task and the periodic sweep sends it.
    Returns "sent", "retry", "failed" or "not_due" (sent, folded, claimed elsewhere or not yet due).
    """
    claimed = Alert.objects.filter(id=alert_id, state=Alert.State.PENDING, next_attempt_at__lte=now).update(
        next_attempt_at=now + DELIVERY_CLAIM, attempts=F("attempts") + 1
    )
    if not claimed:  # a row count of 0: another deliverer has it, or it is done
        return "not_due"
    alert = Alert.objects.select_related("channel").get(id=alert_id)
    channel = alert.channel
    if channel is None:  # the built-in log's row: logged when recorded, never pending (defensive)
        return "not_due"
    try:
        if not channel.enabled:
            raise DeliveryError("channel disabled")
        deliver(channel, alert.payload)
    except DeliveryError as exc:
        retry_at = rules.delivery_retry_at(attempts=alert.attempts, now=now, base=delivery_retry_base())
        Alert.objects.filter(id=alert_id).update(
            state=Alert.State.PENDING if retry_at else Alert.State.FAILED,
            next_attempt_at=retry_at,
            last_error=str(exc)[:2000],
        )
        log.warning(
            "alert %s to channel %s failed (attempt %s of %s): %s",
            alert_id,
            channel.name,
            alert.attempts,
            rules.MAX_DELIVERY_ATTEMPTS,
            exc,
        )
        return "retry" if retry_at else "failed"
    Alert.objects.filter(id=alert_id).update(state=Alert.State.SENT, sent_at=now, next_attempt_at=None, last_error="")
    return "sent"


def alert_deliver_due(*, now: datetime, limit: int = DELIVER_BATCH) -> dict:
    """Summarise ended storm windows, then send every due pending alert in this process
    (tests, a shell). The worker's periodic check queues them instead: alert_redispatch_due."""
    summaries = alert_summarise_due(now=now)
    ids = list(
        Alert.objects.filter(state=Alert.State.PENDING, next_attempt_at__lte=now)  # alert_due_idx
        .order_by("next_attempt_at")
        .values_list("id", flat=True)[:limit]
    )
    outcomes: dict[str, int] = {"summaries": summaries}
    for alert_id in ids:
        status = alert_deliver(alert_id=alert_id, now=now)
        outcomes[status] = outcomes.get(status, 0) + 1
    return outcomes


def alert_redispatch_due(*, now: datetime, limit: int = DELIVER_BATCH) -> list[int]:
    """The pending alerts a worker should be told about again: retries that came due, and first
    tries whose on-commit message seems lost (ALERT_REDISPATCH_AFTER). Sending is left to the delivery
    task on the default queue, so a slow receiver never holds up the control worker (ticks)."""
    return list(
        Alert.objects.filter(state=Alert.State.PENDING, next_attempt_at__lte=now)  # alert_due_idx
        .filter(Q(attempts__gt=0) | Q(next_attempt_at__lte=now - ALERT_REDISPATCH_AFTER))
        .order_by("next_attempt_at")
        .values_list("id", flat=True)[:limit]
    )


def alert_prune(*, now: datetime) -> int:
    """Delete finished outbox rows older than ALERT_RETENTION, at most PRUNE_BATCH per call
    (alert_created_idx). Pending rows stay whatever their age: they are still owed a delivery."""
    ids = list(
        Alert.objects.filter(created_at__lt=now - ALERT_RETENTION)
        .exclude(state=Alert.State.PENDING)
        .order_by("created_at")
        .values_list("id", flat=True)[:PRUNE_BATCH]
    )
    if not ids:
        return 0
    return Alert.objects.filter(id__in=ids).delete()[0]


def alert_summarise_due(*, now: datetime) -> int:
    """One summary per channel, storm group and ended window: "and N more like this". Returns how
    many were recorded. The summary's dedupe key makes a racing second sweep a no-op."""
    ended_before = now - rules.STORM_WINDOW
    groups = list(
        Alert.objects.filter(state=Alert.State.FOLDED, summary__isnull=True, window_start__lte=ended_before)
        .order_by()  # no Meta ordering: its columns would enter the DISTINCT
        .values_list("channel_id", "group_key", "window_start")
        .distinct()[:DELIVER_BATCH]
    )
    made = 0
    for channel_id, group, window in groups:
        if not rules.summary_due(window_start=window, now=now):
            continue
        try:
            with transaction.atomic():
                made += _summarise(channel_id, group, window, now=now)
        except IntegrityError:
            pass  # another sweep summarised this window
    return made


def _summarise(channel_id: int, group: str, window: datetime, *, now: datetime) -> int:
    folded = Alert.objects.filter(
        channel_id=channel_id, group_key=group, window_start=window, state=Alert.State.FOLDED, summary__isnull=True
    )
    rows = list(folded.order_by("created_at", "id").values_list("id", "severity", "payload"))
    if not rows:
        return 0
    first = rows[0][2]
    severity = max((r[1] for r in rows), key=rules.SEVERITY_RANK.__getitem__)
    examples = [p.get("biz_key") or p.get("slot") or str(p.get("run_id")) for _, _, p in rows[:5]]
    until = window + rules.STORM_WINDOW
    payload = {
        "kind": rules.SUMMARY,
        "severity": severity,
        "title": f"{len(rows)} more {first.get('kind')} alerts for rule {first.get('rule') or '-'} "
        f"between {window:%H:%M} and {until:%H:%M} UTC",
        "run_id": None,
        "biz_key": None,
        "rule": first.get("rule"),
        "error_kind": first.get("error_kind"),
        "count": len(rows),
        "summary_kind": first.get("kind"),
        "from": f"{window:%H:%M}",
        "until": f"{until:%H:%M}",
        "examples": examples,
        "examples_text": ", ".join(map(str, examples)),
        "link": admin_link("admin:deadletters_alert_changelist") + f"?q={group}",
        "at": now.isoformat(),
    }
    summary = Alert.objects.create(
        channel_id=channel_id,
        severity=severity,
        kind=rules.SUMMARY,
        dedupe_key=f"summary:{group}:{window.isoformat()}"[:300],
        group_key=f"summary:{group}"[:200],
        window_start=window,
        payload=payload,
        created_at=now,
        next_attempt_at=now,
    )
    Alert.objects.filter(id__in=[r[0] for r in rows]).update(summary=summary)
    alert_queue_on_commit([payload], [summary.id])
    return 1
