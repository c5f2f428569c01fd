"""No redundant index on the harness's tables. Each index is written on every insert and
every non-HOT update; a run is one insert and two such updates of its row, plus an attempt and a pool
slot. A plain b-tree index whose columns (and operator classes) lead another index of the same table
serves no lookup the other does not: Django's foreign-key index beside a composite that starts with
the key is the usual case (runs/models.py, tasks/models/event.py and deadletters/models.py set db_index=False there).
"""

import pytest
from django.apps import apps
from django.db import connection

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="reads PostgreSQL's catalog"),
]

INDEXES = """
SELECT c.relname, i.indexrelid::regclass::text, string_to_array(i.indkey::text, ' '),
       string_to_array(i.indclass::text, ' '), i.indisunique, i.indpred IS NULL, am.amname
FROM pg_index i
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_class ic ON ic.oid = i.indexrelid
JOIN pg_am am ON am.oid = ic.relam
WHERE c.relname = ANY(%s)
"""


def redundant(rows) -> list[str]:
    out = []
    for table, name, cols, classes, unique, full, am in rows:
        if am != "btree" or unique or not full:
            continue
        for table2, name2, cols2, classes2, _unique2, full2, am2 in rows:
            # A partial index (one open dead letter per run) serves only the rows it holds.
            if table2 != table or name2 == name or am2 != "btree" or not full2:
                continue
            if len(cols2) >= len(cols):
                if cols2[: len(cols)] == cols and classes2[: len(classes)] == classes:
                    out.append(f"{table}: {name} leads {name2}")
    return out


def test_no_index_of_the_harness_tables_is_led_by_another():
    # Django's own M2M tables (a rule's pools) keep the index Django gives them: not ours to drop.
    tables = [
        m._meta.db_table
        for app in ("runs", "tasks", "deadletters")
        for m in apps.get_app_config(app).get_models(include_auto_created=False)
        if m._meta.managed
    ]
    with connection.cursor() as cur:
        cur.execute(INDEXES, [tables])
        rows = cur.fetchall()
    assert {r[0] for r in rows} >= {"runs_taskrun", "runs_attempt", "runs_poolslot", "runs_decision"}
    assert redundant(rows) == []


def test_the_check_finds_a_foreign_key_index_beside_its_composite():
    # The shape runs/models.py removed, on a table of this test's own.
    with connection.cursor() as cur:
        cur.execute("CREATE TEMP TABLE idx_probe (a int, b int, c text)")
        cur.execute("CREATE INDEX idx_probe_a ON idx_probe (a)")
        cur.execute("CREATE INDEX idx_probe_a_b ON idx_probe (a, b DESC)")
        cur.execute("CREATE INDEX idx_probe_c_like ON idx_probe (c text_pattern_ops)")
        cur.execute("CREATE UNIQUE INDEX idx_probe_c ON idx_probe (c)")
        cur.execute("CREATE INDEX idx_probe_b ON idx_probe (b)")
        cur.execute("CREATE UNIQUE INDEX idx_probe_b_open ON idx_probe (b, c) WHERE a IS NULL")
        cur.execute(INDEXES, [["idx_probe"]])
        rows = cur.fetchall()
    assert redundant(rows) == ["idx_probe: idx_probe_a leads idx_probe_a_b"]
