"""Broker and database restarts with runs in flight (invariants 1-3): every process (a prefork and
a threads-pool worker, and beat) survives and recovers on its own, every slot ends in one run or one
decision, no side effect happens twice, nothing is left stuck. The Redis and PostgreSQL servers here
are the test's own, restarted by it."""

import json
import time
from collections import Counter

import pytest
from django.db import connection

from tests.e2e.helpers import private_env
from tests.support.processes import wait_for
from tests.support.servers import PG_BIN

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.backend,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="production parts: run in the PostgreSQL pass"),
    pytest.mark.skipif(PG_BIN is None, reason="needs PostgreSQL's server binaries"),
]

RULE = {
    "name": "restart-soak",
    "reason": "end-to-end restart test",
    "kind": "interval",
    "interval_seconds": 2,
    "timezone": "UTC",
    "skill": "harness.record",
    "params": {"seconds": 1.5},
    "dedupe_key_template": "{rule}:{slot}",
    "lease_ttl_seconds": 6,
    "max_attempts": 5,
    "backoff_base_seconds": 1,
    "max_delay_seconds": 2,
}


def _running(pg) -> int:
    return pg.rows("SELECT count(*) FROM runs_taskrun WHERE state = 'running'")[0][0]


def test_workers_and_beat_survive_a_redis_and_a_postgres_restart_with_runs_in_flight(harness, servers, tmp_path):
    pg, rd = servers
    env = private_env(harness, pg, rd)
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"rules": [RULE]}))
    imported = harness.manage("harness", "rules", "import", str(rules), extra_env=env)
    assert imported.returncode == 0, imported.stderr
    procs = [
        harness.worker("w1", concurrency=2, extra_env=env),
        # A threads-pool worker too (the Procfile's agents worker): its threads share the broker
        # channel's one Redis client (harness_site/broker.py kept_client) through the restart.
        harness.worker("w2", concurrency=2, extra_env=env, args=("--pool=threads",)),
        harness.beat("beat1", extra_env=env),
    ]
    wait_for(lambda: _running(pg) > 0, timeout=60, what="a run in flight")

    time.sleep(4)
    wait_for(lambda: _running(pg) > 0, timeout=10, what="a run in flight before the Redis restart")
    rd.restart(down=2)
    time.sleep(10)
    wait_for(lambda: _running(pg) > 0, timeout=30, what="a run in flight before the PostgreSQL restart")
    pg.restart(down=2)
    restarted = time.monotonic()
    # Recovered: new runs succeed after both restarts.
    wait_for(
        lambda: (
            pg.rows(
                "SELECT count(*) FROM runs_taskrun WHERE state = 'succeeded' AND finish_at > now() - "
                "interval '3 seconds'",
            )[0][0]
            > 0
        ),
        timeout=60,
        what="runs succeeding again after the restarts",
    )
    time.sleep(max(0.0, 8 - (time.monotonic() - restarted)))
    # Freeze: no new slots, then everything in flight must finish on its own.
    with pg.connect() as conn:
        conn.execute("UPDATE tasks_triggerrule SET enabled = false, next_fire_at = NULL")
    wait_for(
        lambda: (
            pg.rows("SELECT count(*) FROM runs_taskrun WHERE state NOT IN ('succeeded','failed','cancelled')")[0][0]
            == 0
        ),
        timeout=90,
        what="every run to finish (nothing stuck)",
    )

    alive = [p.name for p in procs if p.popen.poll() is None]
    crashed = [p.name for p in procs if "Unrecoverable error" in p.log()]
    runs = pg.rows("SELECT slot, biz_key, state, attempts FROM runs_taskrun")
    decisions = pg.rows("SELECT slot, reason FROM runs_decision")
    records = Counter(b for (b,) in pg.rows("SELECT biz_key FROM tasks_diagnosticrecord"))
    states = Counter(state for _, _, state, _ in runs)
    print(
        f"\n[e2e restarts] slots {len(runs) + len(decisions)}: runs {dict(states)}, decisions "
        f"{dict(Counter(r for _, r in decisions))}, retried runs {sum(1 for r in runs if r[3] > 1)}, "
        f"records {sum(records.values())}, processes alive {alive}"
    )
    assert alive == [p.name for p in procs], f"processes died: {set(p.name for p in procs) - set(alive)}"
    assert not crashed, f"unrecoverable errors in {crashed}"
    # Every slot from the first to the last handled one: exactly one run or one decision.
    run_slots, decision_slots = {r[0] for r in runs}, {d[0] for d in decisions}
    assert len(run_slots) == len(runs) and not run_slots & decision_slots
    handled = sorted(run_slots | decision_slots)
    step = handled[1] - handled[0]
    assert handled == [handled[0] + i * step for i in range(len(handled))], "a slot is not accounted for"
    # No side effect twice: one record per succeeded run, none for a run that did not succeed.
    succeeded = {b for _, b, state, _ in runs if state == "succeeded"}
    assert set(records) == succeeded and set(records.values()) == {1}
    assert states["succeeded"] >= 10
    # Both kinds of worker took part (executed_by is "<name>@<host>:<pid>").
    executors = {name.split("@")[0] for (name,) in pg.rows("SELECT DISTINCT executed_by FROM runs_taskrun")}
    assert {"w1", "w2"} <= executors, executors
