"""Celery tasks of the tasks app: thin. Plain data in, one service call; the clock is read here."""

import time

from celery import shared_task
from django.utils import timezone

from tasks.models import TriggerSource
from tasks.triggers.events import event_intake, event_records_prune
from tasks.triggers.scheduler import scheduler_tick_until_next_wakeup
from tasks.triggers.sensors import sensors_scan_all


# For queue producers: send_task("tasks.event_intake", kwargs={"source": ..., "payload": {...}}).
# A refusal is recorded and counted like a webhook's; it is not retried (the same message would
# be refused again), so the task always completes.
@shared_task(name="tasks.event_intake", acks_late=True, ignore_result=True)
def event_intake_task(source: str, payload: dict, delivery_id: str | None = None) -> dict:
    result = event_intake(
        source=source, payload=payload, now=timezone.now(), delivery_id=delivery_id, channel=TriggerSource.Kind.QUEUE
    )
    return {"status": result.status, **result.as_json()}


# Periodic (beat entry "harness: file sensors"): idempotent, so a lost or expired one is replaced
# by the next. It also keeps event records bounded.
@shared_task(name="tasks.sensors_scan", acks_late=False, ignore_result=True, expires=60)
def sensors_scan_task() -> dict:
    now = timezone.now()
    result = sensors_scan_all(now=now)
    pruned = event_records_prune(now=now)
    return {**vars(result), "pruned": pruned}


# The tick is idempotent and frequent: a lost or expired one is replaced by the next.
@shared_task(name="runs.scheduler_tick", acks_late=False, ignore_result=True, expires=30)
def scheduler_tick_task() -> dict:
    # Slots due before the next wake-up are ticked on their instant (sleeping up to a second).
    result = scheduler_tick_until_next_wakeup(clock=timezone.now, sleep=time.sleep)
    return vars(result)
