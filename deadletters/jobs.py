"""Celery tasks of the deadletters app: thin. Ids in, one service call; the clock is read here."""

from celery import shared_task
from django.utils import timezone

from deadletters import alert_queue, alerts
from runs.desk.harness_health import health_figures
from runs.engine.incidents import incident_sync


# Queued on commit of the event that recorded the alert. One try per message: a failed send is
# retried from the outbox row (next_attempt_at) by alerts_check, not by a countdown in worker memory.
@shared_task(name="deadletters.alert_deliver", acks_late=True, ignore_result=True)
def alert_deliver_task(alert_id: int) -> str:
    return alert_queue.alert_deliver(alert_id=alert_id, now=timezone.now())


# Periodic (beat entry "harness: alerts", control queue): idempotent, a lost one is replaced by the next.
@shared_task(name="deadletters.alerts_check", acks_late=False, ignore_result=True, expires=60)
def alerts_check_task() -> dict:
    now = timezone.now()
    # Incidents open and close from /healthz's own figures; a scheduler outage's opening page is the
    # scheduler-stalled alert, linked to the incident.
    figures = health_figures(now=now)
    incidents = incident_sync(figures=figures, now=now)
    calendars = alerts.alert_check_calendars(gaps=figures["calendars_without_data"], now=now)
    summaries = alert_queue.alert_summarise_due(now=now)
    due = alert_queue.alert_redispatch_due(now=now)
    for alert_id in due:  # a duplicate message is harmless: alert_deliver claims by compare-and-set
        alert_queue.alert_send(alert_id)
    return {
        "incidents_opened": len(incidents.opened),
        "incidents_closed": len(incidents.closed),
        "calendar_alerts": len(calendars),
        "summaries": summaries,
        "redispatched": len(due),
        "pruned": alert_queue.alert_prune(now=now),
    }
