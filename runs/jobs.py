"""Celery tasks: thin. Ids in, one service call; the clock is read here, at the edge."""

import logging
import os
import socket

from celery import shared_task
from django.db import OperationalError
from django.utils import timezone

from runs.engine import executor, sweeper
from runs.engine.approvals import approval_expire_due
from runs.engine.objectives import objective_prune, objective_sweep
from runs.engine.outages import outage_sweep
from runs.engine.retention import decision_sweep
from runs.engine.store import StatementsStale, database

log = logging.getLogger("harness.executor")
DB_UNAVAILABLE = "db_unavailable"


def _worker_identity(task) -> str:
    host = getattr(task.request, "hostname", None) or socket.gethostname()
    return f"{host}:{os.getpid()}"


@shared_task(bind=True, name="runs.execute", acks_late=True, ignore_result=True)
def run_execute_task(self, run_id: int) -> str:
    try:
        return executor.run_execute(run_id=run_id, worker=_worker_identity(self), clock=timezone.now).status
    except OperationalError as exc:
        # The database refused the connection, or the pool had none free in time: hand the run back
        # with one line, not a traceback. The row is the truth: a run not yet taken is sent again by
        # the sweeper; a taken one's lease runs out and it is retried like a lost worker's.
        # Or a migration left this connection's prepared statements stale, twice (runs/engine/store/postgres.py).
        why = "prepared statements stale" if isinstance(exc, StatementsStale) else "database unavailable"
        log.warning("run %s handed back: %s (%s)", run_id, why, " ".join(str(exc).split())[:200])
        database.connection_close()
        return DB_UNAVAILABLE


# Sweeps are idempotent and frequent: a lost or expired one is replaced by the next.
@shared_task(name="runs.sweep", acks_late=False, ignore_result=True, expires=30)
def sweep_task() -> dict:
    now = timezone.now()
    result = vars(sweeper.sweep(now=now))
    result["approvals_expired"] = approval_expire_due(now=now)
    result["decisions_deleted"] = decision_sweep(now=now)
    result["outages_deleted"] = outage_sweep(now=now)
    objectives = objective_sweep(now=now)  # at most every HARNESS_OBJECTIVE_SECONDS
    if objectives is not None:
        result["objectives"] = vars(objectives)
        result["objectives_pruned"] = objective_prune(now=now)
    return result
