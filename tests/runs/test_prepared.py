"""The hot path's statements are prepared once per PostgreSQL connection (runs/engine/store/postgres.py):
planning those CTEs cost more than running them. What is checked here is what the server says it
holds (pg_prepared_statements), that a statement is planned once and then reused, that the switch
turns it off, and that a rollback (which makes psycopg drop every prepared statement) loses nothing.
"""

import logging
from datetime import UTC, timedelta

import psycopg
import pytest
from django.conf import settings
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone
from psycopg.pq import Format

from runs.engine import executor
from runs.engine.claims import Work, run_claim
from runs.engine.store import StatementsStale, store
from runs.engine.store.postgres import _execute, _prepared_cursor_classes, queries
from runs.jobs import DB_UNAVAILABLE, run_execute_task
from runs.models import TaskRun

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements are PostgreSQL's"),
]

# The named statements of the claim and of one execution (tests/runs/test_query_counts.py), by the
# first line of their text in runs/engine/store/queries.sql.
HOT = {
    name: queries()[statement].splitlines()[0]
    for name, statement in {"claim": "runs_insert_one", "take": "run_take", "success": "run_succeed_release"}.items()
}


def work(key: str) -> Work:
    return Work(biz_key=key, skill="harness.noop", source="api", triggered_by="tests", payload={"params": {}})


def claim_and_execute(key: str) -> str:
    run = run_claim(work(key), now=timezone.now(), dispatch=False).run
    return executor.run_execute(run_id=run.id, worker="w", clock=timezone.now).status


def prepared() -> dict[str, int]:
    """Each hot statement this connection holds prepared, with how many times it was executed."""
    with connection.cursor() as cur:
        cur.execute("SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements")
        rows = cur.fetchall()
    return {name: sum(n for text, n in rows if text.startswith(start)) for name, start in HOT.items()}


def test_the_claim_and_execute_statements_are_prepared_once_and_then_reused():
    assert claim_and_execute("prep:1") == "succeeded"
    first = prepared()
    assert all(first[name] >= 1 for name in HOT), first
    with CaptureQueriesContext(connection) as queries:
        assert claim_and_execute("prep:2") == "succeeded"
    again = prepared()
    # Same statements, executed once more each: nothing new was prepared for the second run.
    assert {name: again[name] - first[name] for name in HOT} == dict.fromkeys(HOT, 1)
    # The log still shows each statement with its values, as for the ORM's statements.
    assert any(q["sql"].startswith(HOT["claim"]) and "'prep:2'" in q["sql"] for q in queries.captured_queries)
    assert TaskRun.objects.get(biz_key="prep:2").state == TaskRun.State.SUCCEEDED


@pytest.mark.django_db(transaction=True)  # it reconnects
def test_a_claim_and_an_execution_open_no_cursor_of_their_own(monkeypatch):
    """Every named statement on a connection runs on the one cursor it keeps: a cursor per statement
    cost psycopg its adapters and column loaders each time. A new connection keeps a new one."""
    cursor_class = _prepared_cursor_classes()[0]
    opened = []
    monkeypatch.setattr(
        cursor_class,
        "__init__",
        lambda self, *a, **k: (opened.append(1), super(cursor_class, self).__init__(*a, **k))[1],
    )
    assert claim_and_execute("prep:kept:1") == "succeeded"
    before = len(opened)
    assert claim_and_execute("prep:kept:2") == "succeeded"
    assert len(opened) == before  # three statements, no cursor opened
    connection.close()
    assert claim_and_execute("prep:kept:3") == "succeeded"  # a reconnected connection keeps its own
    assert len(opened) == before + 1


def test_with_prepared_statements_off_nothing_is_prepared_and_runs_still_succeed():
    with connection.cursor() as cur:
        cur.execute("DEALLOCATE ALL")  # what this connection held from earlier tests (psycopg notices it too)
    with override_settings(HARNESS={**settings.HARNESS, "PREPARED_STATEMENTS": False}):
        assert claim_and_execute("prep:off") == "succeeded"
    assert prepared() == dict.fromkeys(HOT, 0)


def test_a_rollback_drops_the_prepared_statements_and_the_next_run_prepares_them_again():
    assert claim_and_execute("prep:before") == "succeeded"
    with pytest.raises(RuntimeError), transaction.atomic():
        run_claim(work("prep:rolled-back"), now=timezone.now(), dispatch=False)
        raise RuntimeError("the caller fails after its claim")
    assert not TaskRun.objects.filter(biz_key="prep:rolled-back").exists()
    assert claim_and_execute("prep:after") == "succeeded"
    assert all(n >= 1 for n in prepared().values())


# --- a stale prepared statement (issue 36: a migration while the worker runs) ---


def forget_behind_psycopgs_back() -> None:
    """Deallocate this connection's prepared statements one by one: psycopg notices only
    DEALLOCATE ALL, so it still believes them prepared (as behind a pooler that reset a session)."""
    with connection.cursor() as cur:
        cur.execute("SELECT name FROM pg_prepared_statements")
        for (name,) in cur.fetchall():
            cur.execute(f'DEALLOCATE "{name}"')


@pytest.mark.django_db(transaction=True)  # autocommit, as a worker's reads
def test_a_statement_gone_from_the_server_is_prepared_again_and_answers():
    run = run_claim(work("prep:gone"), now=timezone.now(), dispatch=False).run
    assert store().run_read(run.id).biz_key == "prep:gone"  # prepared now
    forget_behind_psycopgs_back()
    assert store().run_read(run.id).biz_key == "prep:gone"
    assert prepared_texts() & {queries()["run_read"].splitlines()[0]}


def test_inside_a_transaction_a_stale_statement_raises_statements_stale_and_the_rollback_clears_them():
    run = run_claim(work("prep:gone-in-tx"), now=timezone.now(), dispatch=False).run
    store().run_read(run.id)
    forget_behind_psycopgs_back()
    with pytest.raises(StatementsStale, match="run_read: prepared statement stale"), transaction.atomic():
        store().run_read(run.id)
    assert store().run_read(run.id).biz_key == "prep:gone-in-tx"  # the rollback made psycopg forget them


def prepared_texts() -> set[str]:
    with connection.cursor() as cur:
        cur.execute("SELECT statement FROM pg_prepared_statements")
        return {text.splitlines()[0] for (text,) in cur.fetchall()}


@pytest.mark.django_db(transaction=True)
def test_a_plan_whose_result_type_a_migration_changed_is_prepared_again(monkeypatch):
    """The failure of issue 36 itself, on a statement of its own that selects `*` (ours no longer
    do): another session adds a column, PostgreSQL refuses the prepared plan (0A000), the store
    prepares it again and the answer has the new column."""
    monkeypatch.setitem(queries(), "test_star", "SELECT * FROM test_stale_plan")
    other = psycopg.connect(**connection.get_connection_params(), autocommit=True)
    try:
        other.execute("CREATE TABLE test_stale_plan (a int)")
        other.execute("INSERT INTO test_stale_plan VALUES (1)")
        with _execute("test_star", {}) as cur:
            assert cur.fetchall() == [(1,)]
        other.execute("ALTER TABLE test_stale_plan ADD COLUMN b int")
        with _execute("test_star", {}) as cur:
            assert cur.fetchall() == [(1, None)]
    finally:
        other.execute("DROP TABLE IF EXISTS test_stale_plan")
        other.close()


def test_a_run_whose_statements_stay_stale_is_handed_back_with_one_line(monkeypatch, caplog):
    """Inside the skill's write step, or stale twice: the run is handed back like a lost worker's,
    with one log line and no traceback from Celery's trace."""
    run = run_claim(work("prep:handback"), now=timezone.now(), dispatch=False).run

    def stale(**_):
        raise StatementsStale("run_take: prepared statement stale twice")

    monkeypatch.setattr(executor, "run_execute", stale)
    with caplog.at_level(logging.WARNING, logger="harness.executor"):
        assert run_execute_task.run(run.id) == DB_UNAVAILABLE
    lines = [r.getMessage() for r in caplog.records if r.name == "harness.executor"]
    assert lines == [f"run {run.id} handed back: prepared statements stale (run_take: prepared statement stale twice)"]
    assert all(r.exc_info is None for r in caplog.records)


def test_the_kept_cursor_reads_the_instants_the_orm_reads_with_psycopgs_c_loader():
    """Timestamps on the kept cursor are loaded by psycopg's C loader, not Django's Python subclass
    of psycopg's Python one (a seventh of a take's CPU), and are the same aware UTC instants."""
    run = run_claim(work("prep:tz"), now=timezone.now(), dispatch=False).run
    instants = ["2026-03-29 00:59:59.999999+00", "2026-03-29 01:30:00+01", "2026-10-25 01:30:00-05"]
    for text in instants:
        TaskRun.objects.filter(pk=run.pk).update(run_after=text)
        orm = TaskRun.objects.get(pk=run.pk).run_after
        read = store().run_read(run.pk).run_after
        assert read == orm and read.tzinfo is UTC and read.utcoffset() == timedelta(0), (text, read, orm)
    loader = _execute("run_read", {"run_id": run.pk}).cursor.adapters.get_loader(
        psycopg.postgres.types["timestamptz"].oid, Format.TEXT
    )
    assert loader.__module__.startswith(("psycopg_binary", "psycopg_c")), loader
