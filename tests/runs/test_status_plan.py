"""The status board probes each rule's newest runs by run_rule_recent_idx, whatever the planner
believes of the rules (runs/desk/status.py _runs_of_rule_newest_first). With few distinct rules among
many runs it expected thousands of runs per rule, walked run_recent_idx instead, and for a rule
without runs read that whole index once per rule: minutes at a million runs and 1,000 rules."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.desk.status import board_build
from runs.models import TaskRun
from tests.support.rules import make_rule

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL planner's choice"),
]


def test_every_per_rule_probe_of_the_board_uses_the_rules_index():
    now = timezone.now()
    busy = [make_rule(f"busy-{i}") for i in range(2)]
    make_rule("new")  # no runs yet
    TaskRun.objects.bulk_create(
        TaskRun(
            biz_key=f"plan:{i}",
            rule=busy[i % 2],
            skill="harness.noop",
            source="scheduler",
            trigger_at=now - timedelta(seconds=i),
            run_after=now,
            state="succeeded",
        )
        for i in range(20_000)
    )
    with connection.cursor() as cur:
        cur.execute("ANALYZE runs_taskrun")
    with CaptureQueriesContext(connection) as queries:
        board_build(now=now)
    probes = [
        q["sql"] for q in queries.captured_queries if "tasks_triggerrule" in q["sql"] and "runs_taskrun" in q["sql"]
    ]
    assert len(probes) == 2  # the last finished run (1), where each strip begins (4)
    for sql in probes:
        with connection.cursor() as cur:
            cur.execute("EXPLAIN " + sql)
            plan = "\n".join(row[0] for row in cur.fetchall())
        assert "run_rule_recent_idx" in plan and "run_recent_idx" not in plan, plan
