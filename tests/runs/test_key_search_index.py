"""A partial business-key search stays an index probe at a million runs (runs/desk/key_search.py).

PostgreSQL's trigram index (run_biz_key_trgm_idx on UPPER(biz_key)) reads the whole posting list
of every trigram in its condition, so the condition names the term's rare part (its digits), and
the whole term is checked on the matches. Same results on both databases.
"""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from runs.desk.key_search import contains, indexed_part, key_search
from runs.models import TaskRun


@pytest.mark.parametrize(
    ("text", "part"),
    [
        ("order-500007", "500007"),  # the template's word is left to the check
        ("rule/5/event/order-500007%3Apaid", "500007"),
        ("inv-20261201-0042", "20261201"),
        ("2026-12-01", "2026-12-01"),  # short numbers: the whole text
        ("report:2026-12-01:email", "report:2026-12-01:email"),
        ("callback:order-7", "callback:order-7"),
        ("invoice:acme:send", "invoice:acme:send"),  # no digits
        ("500007", "500007"),
    ],
)
def test_the_index_is_asked_for_the_digits_of_a_term(text, part):
    assert indexed_part(text) == part


def _runs(n: int) -> None:
    now = timezone.now()
    TaskRun.objects.bulk_create(
        TaskRun(
            biz_key=f"rule/{1 + i % 3}/event/order-{100_000 + i}%3Apaid",
            skill="harness.noop",
            source="event",
            trigger_at=now - timedelta(seconds=i),
            run_after=now,
            state="succeeded",
        )
        for i in range(n)
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ("order-101234", ["rule/2/event/order-101234%3Apaid"]),
        ("ORDER-101234%3apaid", ["rule/2/event/order-101234%3Apaid"]),  # any case
        ("der-10123", [f"rule/{1 + i % 3}/event/order-{100_000 + i}%3Apaid" for i in range(1230, 1240)]),
        ("other-101234", []),  # the digits match, the whole text does not
        ("event/order", "all"),
    ],
)
def test_a_partial_key_finds_every_key_containing_it_and_no_other(term, expected):
    _runs(1500)
    found, whole = key_search(TaskRun.objects.all(), term)
    keys = sorted(found.values_list("biz_key", flat=True))
    assert not whole
    assert keys == (
        sorted(TaskRun.objects.values_list("biz_key", flat=True)) if expected == "all" else sorted(expected)
    )


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the trigram index is PostgreSQL's")
def test_postgresql_serves_a_partial_key_from_the_trigram_index_with_the_digits_only():
    _runs(3000)
    with connection.cursor() as cur:
        cur.execute("ANALYZE runs_taskrun")
    # The count the changelist runs first (no order: at a million runs the page's ORDER BY ... LIMIT
    # takes the same bitmap and sorts its few matches).
    query = TaskRun.objects.filter(contains("biz_key", "order-101234")).order_by().values("pk")
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")  # a small table: make the planner show its index path
        cur.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cur.fetchall())
    index_line = next((line for line in plan.splitlines() if "Index Cond" in line), plan)
    assert "run_biz_key_trgm_idx" in plan, plan
    assert "'%101234%'" in index_line and "ORDER" not in index_line  # the common word is not read from the index
    assert "strpos" in plan.lower()  # the whole term is checked on the matches
