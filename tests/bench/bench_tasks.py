"""Bare Celery tasks, the baselines of the benchmarks: a no-op (tests/bench/benchmark.py) and a model
call (tests/bench/agents.py --skill bare, and with statements around it, --skill bare-sql).

The worker imports this module with ``--include tests.bench.bench_tasks`` (importable because the
worker's cwd is the project root).
"""

import json
import os
import time
from functools import cache

import redis
from celery import shared_task
from django.conf import settings
from django.db import connection

from harness_site.celery import app
from runs.engine.store import database
from tasks.agents.client import http_client


@cache
def _redis() -> redis.Redis:
    # Created lazily in each pool child, after the fork.
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


@shared_task(name="bench.noop", ignore_result=True)
def bench_noop(counter: str, target: int) -> None:
    """Count one execution; the one that reaches `target` stamps the end time."""
    if counter.startswith("file:"):
        _count_in_file(counter.removeprefix("file:"), target)
        return
    client = _redis()
    if client.incr(counter) >= target:
        client.set(f"{counter}:done", repr(time.time()), nx=True)


@shared_task(name="bench.call_model", ignore_result=True)
def bench_call_model(url: str, counter: str, target: int, timeout: float) -> None:
    """Bare Celery's floor for a run that waits on a model (tests/bench/agents.py --skill bare): one
    chat-completions POST on the harness's own per-thread HTTP client, and its answer parsed; no run,
    no statement, no step. Counts starts and ends in Redis."""
    client = _redis()
    client.incr(f"{counter}:started")
    body = {"model": "fake", "messages": [{"role": "user", "content": "Summarise."}]}
    response = http_client().post(url, json=body, headers={"Authorization": "Bearer sk-bench"}, timeout=timeout)
    json.loads(json.loads(response.text)["choices"][0]["message"]["content"])
    if client.incr(counter) >= target:
        client.set(f"{counter}:done", repr(time.time()), nx=True)


@shared_task(name="bench.call_model_statements", ignore_result=True)
def bench_call_model_statements(url: str, counter: str, target: int, timeout: float, statements: int) -> None:
    """The floor of a recorded run (tests/bench/agents.py --skill bare-sql): bench.call_model's call
    with `statements` one-row statements on the worker's database connection, half before the call
    and half after, the pooled connection given back for the wait as a run gives it back; no run,
    no step, no model. What a run's statements cost a threads worker, apart from what they write."""
    client = _redis()
    client.incr(f"{counter}:started")
    _statements(statements // 2)
    body = {"model": "fake", "messages": [{"role": "user", "content": "Summarise."}]}
    response = http_client().post(url, json=body, headers={"Authorization": "Bearer sk-bench"}, timeout=timeout)
    json.loads(json.loads(response.text)["choices"][0]["message"]["content"])
    _statements(statements - statements // 2)
    if client.incr(counter) >= target:
        client.set(f"{counter}:done", repr(time.time()), nx=True)


def _statements(n: int) -> None:
    if not n:  # bare-sleep touches no connection
        return
    for _ in range(n):
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    database.connection_release()


@shared_task(name="bench.sleep", ignore_result=True)
def bench_sleep(seconds: float, counter: str, target: int, statements: int = 0) -> None:
    """Bare Celery's floor for a sleeping run (tests/bench/agents.py --skill bare-sleep): the sleep of
    harness.sleep, and no run. With `statements` (--skill bare-sleep-sql), that many one-row
    statements around the sleep, as bench.call_model_statements puts them around the call: the floor
    of a sleeping run that records itself. Counts starts and ends in Redis."""
    client = _redis()
    client.incr(f"{counter}:started")
    _statements(statements // 2)
    time.sleep(seconds)
    _statements(statements - statements // 2)
    if client.incr(counter) >= target:
        client.set(f"{counter}:done", repr(time.time()), nx=True)


def _count_in_file(path: str, target: int) -> None:
    """The embedded default has no Redis: one byte appended per execution (appends do not interleave);
    the first to see `target` bytes links its stamp into place (a link, unlike a write, is atomic)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, b".")
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if size >= target:
        tmp = f"{path}.{os.getpid()}.{time.time_ns()}"
        with open(tmp, "w") as f:
            f.write(repr(time.time()))
        try:
            os.link(tmp, f"{path}:done")
        except FileExistsError:
            pass
        os.unlink(tmp)


def file_stamp(counter: str) -> str | None:
    try:
        with open(counter.removeprefix("file:") + ":done") as f:
            return f.read()
    except FileNotFoundError:
        return None


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
