"""Report SQL is named once (runs/engine/store/reports.sql): database.report takes a name, never a
statement, and every named report runs on the database it is written for (issue 39)."""

import re
from datetime import timedelta

import pytest
from django.db import connection

from runs.desk.metrics import LATENCY_BUCKETS, QUEUE_DELAY_BUCKETS, latency_params
from runs.engine import rollup
from runs.engine.store import database
from runs.engine.store.postgres import parse_queries
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

NOW = rollup.EPOCH + timedelta(days=9000)


def report_params() -> dict[str, dict[str, object]]:
    """Each report's parameters, as its caller builds them: one entry per name in reports.sql."""
    first, last = rollup.rolled_buckets(NOW)
    return {
        "run_latency": latency_params(),
        "rollup_summaries": rollup.summaries_params([(first, last), (last, rollup.OPEN_END)], 100),
    }


def names() -> set[str]:
    return {name.split(".")[0] for name in database.reports()}


def placeholders(sql: str) -> set[str]:
    return set(re.findall(r"%\((\w+)\)s", sql))


def test_an_unknown_report_or_a_statement_is_refused():
    with pytest.raises(KeyError):
        database.report("no_such_report", {})
    with pytest.raises(KeyError):
        database.report("SELECT 1", {})
    # A report written for one database only has no statement on the other.
    with pytest.raises(KeyError):
        database.report_sql("rollup_summaries", "sqlite")


def test_every_report_has_its_parameters_and_only_those_on_each_database():
    assert names() == set(report_params())
    for name, params in report_params().items():
        for vendor in ("postgresql", "sqlite"):
            try:
                sql = database.report_sql(name, vendor)
            except KeyError:
                continue
            assert placeholders(sql) == set(params), (name, vendor)
    # One placeholder per histogram bound, so a bound added to a tuple needs one in the SQL too.
    sql = database.report_sql("run_latency", "sqlite")
    assert sum(p.startswith("delay_") for p in placeholders(sql)) == len(QUEUE_DELAY_BUCKETS)
    assert sum(p.startswith("latency_") for p in placeholders(sql)) == len(LATENCY_BUCKETS)


def test_every_named_report_runs_on_this_database():
    make_rule(name="reports-smoke")
    ran = set()
    for name, params in report_params().items():
        try:
            database.report_sql(name)
        except KeyError:
            continue
        database.report(name, params)
        ran.add(name)
    assert "run_latency" in ran
    assert ("rollup_summaries" in ran) is (connection.vendor == "postgresql")


def test_a_variant_name_is_read_by_the_same_loader():
    parsed = parse_queries("-- q.postgresql --\nSELECT 1\n-- q.sqlite --\nSELECT 2\n-- r --\nSELECT 3\n")
    assert parsed == {"q.postgresql": "SELECT 1", "q.sqlite": "SELECT 2", "r": "SELECT 3"}
