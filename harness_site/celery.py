import gc
import logging
import logging.config
import os
import time

from celery import Celery
from celery.signals import (
    before_task_publish,
    setup_logging,
    task_postrun,
    task_prerun,
    worker_before_create_process,
    worker_init,
    worker_process_init,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)
from django.conf import settings
from django.db import close_old_connections, connections

from harness_site import forks, tracing  # noqa: F401 - importing forks registers its fork hooks
from harness_site.broker import SENT_AT_HEADER
from harness_site.hub_wakeup import HubWakeup

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")

app = Celery("harness")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Celery task modules are called jobs.py, so "task" means one thing in an app called `tasks`.
app.autodiscover_tasks(related_name="jobs")
# A pool thread that finishes a task wakes the event loop to acknowledge it and fetch the next
# (celery/celery#6941: without it, a busy threads worker runs in waves 10 s apart).
app.steps["consumer"].add(HubWakeup)


# A connection that ended the previous task without an error this recently is not health-checked
# again (CONN_HEALTH_CHECKS is a SELECT 1 round trip before each task's first query; a task of a few
# milliseconds pays it every time). One that died meanwhile fails that task's first query; the task
# fails, the run stays claimable and the sweeper re-sends it, and the broken connection is closed.
HEALTH_CHECK_AFTER_IDLE = 1.0
_connections_ok_at = [float("-inf")]


@task_prerun.connect
def _connections_before(**_kwargs) -> None:
    # With connections reused across tasks, still honour CONN_MAX_AGE and drop broken ones.
    close_old_connections()
    if time.monotonic() - _connections_ok_at[0] < HEALTH_CHECK_AFTER_IDLE:
        for conn in connections.all(initialized_only=True):
            if conn.connection is not None and not conn.errors_occurred:
                # django-stubs do not declare this attribute (Django's own, since 4.1).
                conn.health_check_done = True  # type: ignore[attr-defined]


@task_postrun.connect
def _connections_after(**_kwargs) -> None:
    close_old_connections()  # a connection with errors is checked now, and closed if broken
    _connections_ok_at[0] = time.monotonic()


@task_prerun.connect
def _trace_enter(task=None, **_kwargs) -> None:
    # The traceparent header of the message (runs.engine.dispatch) is the task's context; see tracing.task_enter.
    if task is not None:
        tracing.task_enter(task)


@task_postrun.connect
def _trace_exit(task=None, **_kwargs) -> None:
    if task is not None:
        tracing.task_exit(task)


@setup_logging.connect
def _django_logging(**_kwargs) -> None:
    # Workers and beat log like the web app (LOG_FORMAT, with the trace and run on each line),
    # instead of Celery's own format without them.
    logging.config.dictConfig(settings.LOGGING)


@worker_process_init.connect
def _otel_in_pool_process(**_kwargs) -> None:
    # Only with OTEL_* set (tracing.otel_enabled); after the fork, so the exporter's thread is this process's.
    tracing.otel_configure(celery=True)


@worker_before_create_process.connect
def _freeze_start_up_objects(**_kwargs) -> None:
    # The prefork pool runs a full gc.collect() before each fork (celery/celery#2927), which walks
    # every object the start-up made: about 85 ms per pool process here. Frozen, they are left out of
    # that walk and of the children's collections, whose pages then stay shared with the parent.
    # Once, before the first fork: what the parent makes later may be garbage a freeze would keep.
    if gc.get_freeze_count() == 0:
        gc.freeze()


@before_task_publish.connect
def _stamp_sent_at(headers=None, **_kwargs) -> None:
    # When the message was sent, on every broker: the sweeper and the dashboard read the age of the
    # oldest queued message from it (harness_site/broker.py queue_probe).
    if headers is not None:
        headers.setdefault(SENT_AT_HEADER, time.time())


# Importing harness_site.forks (above) keeps database connections from crossing into pool processes.


@worker_init.connect
def _watch_worker(sender=None, **kwargs) -> None:
    """Worker heartbeats, the stall watchdog and the bounded warm shutdown (harness_site/worker_watch.py)."""
    # Imported here, not at the top: worker_watch reads runs.engine.workers, whose models need the app registry,
    # which is ready at worker_init but not when harness_site/__init__.py imports this module.
    from harness_site import worker_watch

    worker_ready.connect(worker_watch.on_worker_ready)
    worker_shutting_down.connect(worker_watch.on_worker_shutting_down)
    worker_shutdown.connect(worker_watch.on_worker_shutdown)
    worker_watch.on_worker_init(sender, **kwargs)


class OneLineSendErrors(logging.Filter):
    """Beat logs every failed send during a broker outage with the stack, the traceback and the
    error (about 200 lines each, once a second). Keep the error, on one line: the outage itself is
    what on-call needs to see, and /healthz says "broker unreachable"."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith("Message Error") and record.exc_info:
            error = record.exc_info[1]
            record.msg, record.args, record.exc_info, record.exc_text = (
                "Message Error: %s",
                (_one_line(error),),
                None,
                None,
            )
        return True


def _one_line(error: BaseException | None) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"


logging.getLogger("celery.beat").addFilter(OneLineSendErrors())
