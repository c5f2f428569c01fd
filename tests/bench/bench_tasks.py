"""The bare Celery no-op task for the baseline of tests/bench/benchmark.py.

The worker imports this module with ``--include scripts.bench_tasks`` (``scripts`` is a namespace
package, importable because the worker's cwd is the project root).
"""

import os
import time
from functools import cache

import redis
from celery import shared_task
from django.conf import settings

from harness_site.celery import app


@cache
def _redis() -> redis.Redis:
    # Created lazily in each pool child, after the fork.
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


@shared_task(name="bench.noop", ignore_result=True)
def bench_noop(counter: str, target: int) -> None:
    """Count one execution; the one that reaches `target` stamps the end time."""
    client = _redis()
    if client.incr(counter) >= target:
        client.set(f"{counter}:done", repr(time.time()), nx=True)


def _apply_db_reuse_experiment() -> None:
    """Experiment only (benchmark --db-reuse-max): emulate CELERY_DB_REUSE_MAX without editing settings.

    Celery's Django fixup closes every database connection before and after each task unless
    CELERY_DB_REUSE_MAX is set, so each run pays a new PostgreSQL connection.
    """
    value = int(os.environ.get("BENCH_DB_REUSE_MAX") or 0)
    if value:
        for fixup in getattr(app, "_fixups", []):
            if hasattr(fixup, "worker_fixup"):
                fixup.worker_fixup.db_reuse_max = value


_apply_db_reuse_experiment()
