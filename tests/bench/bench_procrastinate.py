"""Procrastinate's no-op job, for goal 1 of tests/bench/goals.py: what a user might pick instead of
the harness, on the same PostgreSQL. Needs requirements-bench.txt (procrastinate is not a dependency
of the harness); goals.py skips the column when it is not installed.

The job's body is bare Celery's (tests/bench/bench_tasks.py): count one execution in Redis, and the
one that reaches the target stamps the end time. Workers run as

    procrastinate --app=tests.bench.bench_procrastinate.app worker --concurrency=1

one process per Celery pool process, with DATABASE_URL and CELERY_BROKER_URL set.
"""

import os
import time
from functools import cache

import redis
from procrastinate import App, PsycopgConnector

QUEUE = "bench"

app = App(connector=PsycopgConnector(conninfo=os.environ.get("DATABASE_URL", "")))


@cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["CELERY_BROKER_URL"])


@app.task(name="bench.procrastinate_noop", queue=QUEUE)
def noop(counter: str, target: int) -> None:
    client = _redis()
    if client.incr(counter) >= target:
        client.set(f"{counter}:done", repr(time.time()), nx=True)


def schema_ensure() -> None:
    """Procrastinate's tables, once per database (its schema is not a Django migration)."""
    import psycopg

    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()[0] is None:
            with app.open():
                app.schema_manager.apply_schema()
        # Jobs of earlier runs are not work for this one.
        conn.execute("DELETE FROM procrastinate_jobs WHERE queue_name = %s", [QUEUE])
