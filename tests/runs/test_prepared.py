"""The hot path's statements are prepared once per PostgreSQL connection (runs/sql.py):
planning those CTEs cost more than running them. What is checked here is what the server says it
holds (pg_prepared_statements), that a statement is planned once and then reused, that the switch
turns it off, and that a rollback (which makes psycopg drop every prepared statement) loses nothing.
"""

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone

from runs import executor
from runs.claims import Work, run_claim
from runs.models import TaskRun

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements are PostgreSQL's"),
]

# The first words of each statement of the claim and of one execution (tests/runs/test_query_counts.py).
HOT = {
    "claim": 'INSERT INTO "runs_taskrun"',
    "take": "WITH plain AS MATERIALIZED",  # the read and the lease claim (runs.leases.run_take)
    "success": 'WITH done AS (UPDATE "runs_taskrun"',
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
