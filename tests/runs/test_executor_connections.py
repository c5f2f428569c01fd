"""What one execution costs the database: statements, and on PostgreSQL with a connection pool
(a threads worker's HARNESS_DB_POOL_MAX), connection checkouts. Counts, not timings, for a plain run,
a run with a write step, and a run with a model call (a real HTTP server on loopback), so connection
use per run cannot creep back: a run that waits must hold no connection, and each give-back costs a
checkout.

On SQLite there is no pool: the thread keeps its one connection (no new connection per run).
"""

from dataclasses import replace

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.signals import connection_created
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.engine import executor
from runs.engine.claims import run_claim
from runs.models import TaskRun
from tasks.models import Agent, DiagnosticRecord
from tests.support.fake_model import FakeModelServer, json_completion
from tests.support.runs import api_work, run_policy

pytestmark = pytest.mark.django_db(transaction=True)

KEY_ENV = "HARNESS_SECRET_H9_TEST_MODEL"  # granted to loopback models by tests/support/settings.py
SCHEMA = {"type": "object", "required": ["summary"], "properties": {"summary": {"type": "string"}}}

# Statements per run once its kind has run in the process, by database (BEGIN and COMMIT are
# captured). PostgreSQL: a plain run is the prebuilt read-and-claim and the success. A write step
# adds its fenced transaction (BEGIN, the checkpoint's look-up with the fence check, the row, the
# checkpoint, COMMIT). llm_json (an agent without a budget or a pool that limits it: claimed as a
# plain run) adds two read steps (a fenced checkpoint each; the claim said the run has none to look
# up), the agent's read, the call's record (written "sent" before the request,
# completed after with its output's validity), and a write step. SQLite writes admission, the
# lease and each checkpoint's fence check through the ORM.
STATEMENTS = {
    "postgresql": {"plain": 2, "steps": 7, "model": 12},
    "sqlite": {"plain": 18, "steps": 24, "model": 37},
}
CHECKOUTS = {"plain": 2, "steps": 2, "model": 4}


@pytest.fixture
def pooled():
    """This thread's connection drawn from a psycopg pool, as on a threads worker (PostgreSQL only)."""
    if connection.vendor != "postgresql":
        yield None
        return
    original = connection.settings_dict
    connection.close()
    options = {**original.get("OPTIONS", {}), "pool": {"min_size": 1, "max_size": 2, "timeout": 10}}
    connection.settings_dict = {**original, "CONN_MAX_AGE": 0, "OPTIONS": options}
    try:
        yield connection.pool
    finally:
        connection.close()
        connection.close_pool()
        connection.settings_dict = original


@pytest.fixture
def model(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-query-counts")
    server = FakeModelServer().start()
    yield server
    server.stop()


def claimed(kind: str, n: int, model: FakeModelServer | None = None) -> TaskRun:
    if kind == "plain":
        return run_claim(api_work(f"qc:plain:{n}"), now=timezone.now(), dispatch=False).run
    if kind == "steps":
        return run_claim(api_work(f"qc:steps:{n}", skill="harness.record"), now=timezone.now(), dispatch=False).run
    assert model is not None
    agent, _new = Agent.objects.get_or_create(
        name="qc-writer",
        defaults={"provider": "openai", "base_url": model.base_url, "model": "gpt-test", "api_key_env": KEY_ENV},
    )
    model.respond(json_completion({"summary": "quiet"}))
    work = api_work(f"qc:model:{n}", skill="llm_json", params={"prompt": "Summarise.", "action": "harness.record"})
    work = replace(
        work,
        payload={**work.payload, "output_schema": SCHEMA},
        policy=run_policy({"max_attempts": 1}, agent=agent.name),
    )
    return run_claim(work, now=timezone.now(), dispatch=False).run


def measure(run: TaskRun, pool) -> tuple[int, int, int, int]:
    """(statements, pool checkouts, new connections, connection checks) of one execution of `run`.
    A connection check (is_usable: a SELECT 1 round trip on PostgreSQL) is not a captured query."""
    opened, checks = [], []

    def count(**_kwargs):
        opened.append(1)

    wrapper = type(connections[DEFAULT_DB_ALIAS])  # the backend class, not the thread-local proxy
    usable = wrapper.is_usable

    def checked(db) -> bool:
        checks.append(1)
        return usable(db)

    before = pool.get_stats().get("requests_num", 0) if pool is not None else 0
    connection_created.connect(count)
    try:
        with pytest.MonkeyPatch.context() as spy, CaptureQueriesContext(connection) as queries:
            spy.setattr(wrapper, "is_usable", checked)
            outcome = executor.run_execute(run_id=run.id, worker="w", clock=timezone.now)
    finally:
        connection_created.disconnect(count)
    assert outcome.status == "succeeded", outcome
    checkouts = pool.get_stats().get("requests_num", 0) - before if pool is not None else 0
    return len(queries), checkouts, len(opened), len(checks)


@pytest.mark.parametrize("kind", ["plain", "steps", "model"])
def test_one_execution_costs_fixed_statements_and_checkouts(kind, pooled, model):
    # A first run of its kind pays once-per-process costs (the agent's pool row, caches): not counted.
    assert measure(claimed(kind, 1, model), pooled)
    run = claimed(kind, 2, model)
    connection.close()  # a pooled connection goes back; a kept one is reopened before the count

    executor_statements, checkouts, opened, checks = measure(run, pooled)

    assert TaskRun.objects.get(pk=run.pk).state == TaskRun.State.SUCCEEDED
    if kind != "plain":
        assert DiagnosticRecord.objects.filter(run_id=run.pk).count() == 1  # the write step ran once
    assert executor_statements == STATEMENTS[connection.vendor][kind]
    # Every wait here is short (the provider answers at once): no connection is checked. A pooled
    # connection is fresh from the pool after each wait; a kept one was used a moment ago.
    assert checks == 0
    if pooled is not None:
        assert checkouts == CHECKOUTS[kind]
        assert opened == checkouts  # every connection the run used came from the pool
    else:
        assert opened <= 1  # SQLite: the thread's one connection, kept across the run's waits


def test_a_connection_kept_through_a_long_wait_is_checked_once_before_the_next_write():
    """Without a pool the thread keeps its connection while the skill runs; after a wait of a second
    or more the server may have closed it, so it is checked (and replaced if gone) before the outcome."""
    run = run_claim(
        api_work("qc:sleep", skill="harness.sleep", params={"seconds": 1.1}), now=timezone.now(), dispatch=False
    ).run
    _statements, _checkouts, _opened, checks = measure(run, None)
    assert checks == 1
