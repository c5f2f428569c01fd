"""The "fast at scale" figures, each as a ratio measured side by side in one run.

    .venv/bin/python tests/bench/goals.py [--rounds 3] [--runs 1000] [--only 1,2,3,4]

PostgreSQL + Redis (DATABASE_URL, CELERY_BROKER_URL; the database is created and migrated if needed,
the broker's Redis database is flushed). Prints, for every figure, min / median / max over the
rounds; asserts nothing and is not part of the test suite.

  1. Throughput: bare Celery no-op tasks/s and harness.noop runs/s end to end (claim, dispatch,
     execute, outcome), same broker and worker concurrency, and Procrastinate no-op jobs/s on the
     same PostgreSQL; each round runs the phases in turn, starting one further along than the round
     before (celery, harness, Procrastinate; harness, Procrastinate, celery; ...). Ratios harness /
     Celery (goal >= 0.5) and harness / Procrastinate (goal >= 1), CPU per run, statements.
  2. Tick: one in-process scheduler tick with --tick-slots due interval rules: due slots
     materialized per second (goal >= 1,000). Fixed cost: a tick with one due rule among 100 rules,
     then among --rules-max rules (goal: within 1.5x). No worker runs meanwhile (messages wait).
  3. Lateness: beat + workers, --late-rules interval rules of 1 s for --late-seconds; start - slot
     p50/p99, and p99 of each of --rounds equal windows (goal p99 <= 0.5 s).
  4. Operator pages with --rows-small, then --rows-large runs (generated with INSERT ... SELECT
     generate_series; 1 % failed with a dead-letter ticket): admin index, dashboard, runs
     changelist, filtered by state, exact biz_key, run id, dead-letter desk; each page's time as a
     ratio to the admin index (goal <= 10x), its growth from small to large (goal <= 1.5x), and
     its SQL statement count. Rounds interleave the pages.

Other processes share the machine: compare ratios within one run, not absolute figures across runs.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench import benchmark as bench  # the process helpers and the bare Celery phase

GEN_PREFIX = "gen:"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", default="1,2,3,4", help="comma-separated goals to measure (default all)")
    p.add_argument("--runs", type=int, default=1000, help="tasks/runs per throughput round (default 1000)")
    p.add_argument("--workers", type=int, default=2, help="prefork pool processes (default 2)")
    p.add_argument("--tick-slots", type=int, default=1000, help="due rules in the tick round (default 1000)")
    p.add_argument("--rules-max", type=int, default=100_000, help="rules for the fixed-cost tick (default 100,000)")
    p.add_argument("--late-rules", type=int, default=20)
    p.add_argument("--late-seconds", type=float, default=30)
    p.add_argument("--rows-small", type=int, default=100_000)
    p.add_argument("--rows-large", type=int, default=1_000_000)
    p.add_argument("--database-url", default=os.environ.get("DATABASE_URL", bench.DEFAULT_DATABASE_URL))
    p.add_argument("--broker-url", default=os.environ.get("CELERY_BROKER_URL", bench.DEFAULT_BROKER_URL))
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--log-level", default="WARNING")
    p.add_argument("--db-reuse-max", type=int, default=0)
    p.add_argument(
        "--embedded",
        action="store_true",
        help="goal 1 on the embedded defaults instead: SQLite and the file broker in a fresh folder (no Procrastinate)",
    )
    return p.parse_args()


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"min {min(values):,.2f}  median {statistics.median(values):,.2f}  max {max(values):,.2f}"


def line(name: str, values: list[float], unit: str = "", goal: str = "") -> None:
    print(f"  {name:<44} {spread(values):<50} {unit:<8} {goal}")


# --- goal 1 ---------------------------------------------------------------------------------------


def procrastinate_available() -> bool:
    try:
        import procrastinate  # noqa: F401
    except ImportError:
        return False
    return True


def start_procrastinate(args, log_dir: Path) -> list:
    """Procrastinate workers on the same PostgreSQL: one process per Celery pool process, each
    running one job at a time (the same concurrency as the prefork pool)."""
    from tests.bench import bench_procrastinate

    bench_procrastinate.schema_ensure()
    argv = [sys.executable, "-m", "procrastinate", "--app=tests.bench.bench_procrastinate.app", "--log-level=warning"]
    worker = ["worker", f"--queues={bench_procrastinate.QUEUE}", "--concurrency=1"]
    return [bench.Proc(f"procrastinate-{i}", [*argv, *worker], log_dir) for i in range(args.workers)]


def bench_procrastinate(n: int, procs, timeout: float) -> dict:
    """Jobs/s end to end: deferred one by one from this process (one INSERT each, as a caller would),
    from the first defer to the last job's end; and defers/s, the rate of the deferring loop alone
    (the peer of the harness's claims/s)."""
    import redis
    from django.conf import settings

    from tests.bench.bench_procrastinate import app, noop

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    counter = f"bench:procrastinate:{time.time_ns()}"
    with app.open():
        t0 = time.time()
        for _ in range(n):
            noop.defer(counter=counter, target=n)
        t_defer = time.time()
    done = bench.wait_for(
        lambda: client.get(f"{counter}:done"), timeout=timeout, what="procrastinate jobs", procs=procs
    )
    return {"e2e": n / (float(done) - t0), "defer": n / (t_defer - t0)}


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # ended meanwhile
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


def _process_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


class CpuMeter:
    """CPU seconds spent, per side, while one round runs: this process (the producer: claims, defers,
    publishes), the worker processes with their children, and this database's server backends.
    CPU time, unlike a rate, barely depends on what else runs on the machine."""

    def __init__(self, workers: list) -> None:
        self.workers = workers

    def _backends(self) -> list[int]:
        from django.db import connection

        if connection.vendor != "postgresql":  # SQLite works inside the processes measured already
            return []
        with connection.cursor() as cur:
            cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
            return [pid for (pid,) in cur.fetchall()]

    def snapshot(self) -> dict[str, dict[int, float]]:
        """CPU seconds so far per side, per process (pid 0: this one)."""
        tree = [pid for proc in self.workers for pid in _process_tree(proc.popen.pid)]
        return {
            "producer": {0: time.process_time()},
            "workers": {pid: _cpu_seconds(pid) for pid in tree},
            "postgres": {pid: _cpu_seconds(pid) for pid in self._backends()},
        }

    def measure(self, fn):
        """CPU spent by each side while `fn` runs. Per process: one that started meanwhile counts from
        zero, one that ended meanwhile is left out (its CPU is gone with it), so a backend that
        closes never makes a side negative."""
        before = self.snapshot()
        result = fn()
        after = self.snapshot()
        used = {
            side: sum(max(cpu - before[side].get(pid, 0.0), 0.0) for pid, cpu in after[side].items() if cpu)
            for side in before
        }
        return result, used


def goal_throughput(args, log_dir: Path, tag: str) -> None:
    procs = bench.start_workers(args, log_dir, None)
    pq_procs = start_procrastinate(args, log_dir) if procrastinate_available() and not args.embedded else []
    try:
        bench.bench_celery(args.workers * 10, procs, timeout=60)  # warm-up: forks connect, imports load
        bench.bench_harness(args.workers * 10, f"{tag}-warm", procs, args.timeout)
        if pq_procs:
            bench_procrastinate(args.workers * 10, pq_procs, timeout=60)
        cel, har, pq, ratio, pq_ratio, vs_pq, claim, defer, claim_vs_defer = [], [], [], [], [], [], [], [], []
        cpu: dict[str, list[dict]] = {"bare Celery": [], "harness": [], "Procrastinate": []}
        meter = CpuMeter(procs + pq_procs)
        phases = {
            "bare Celery": lambda r: bench.bench_celery(args.runs, procs, args.timeout),
            "harness": lambda r: bench.bench_harness(args.runs, f"{tag}-r{r}", procs, args.timeout),
        }
        if pq_procs:
            phases["Procrastinate"] = lambda r: bench_procrastinate(args.runs, pq_procs, args.timeout)
        names = list(phases)
        for r in range(args.rounds):
            # Each round starts with the next one: a phase's position (the tables and the queue the
            # one before left, the machine's warmth) favours none of them over the rounds.
            got = {}
            for name in names[r % len(names) :] + names[: r % len(names)]:
                got[name], used = meter.measure(lambda name=name, r=r: phases[name](r))
                cpu[name].append(used)
            c, h = got["bare Celery"]["e2e"], got["harness"]
            cel.append(c)
            har.append(h["e2e"])
            claim.append(h["claim"])
            ratio.append(h["e2e"] / c)
            if pq_procs:
                p = got["Procrastinate"]
                pq.append(p["e2e"])
                defer.append(p["defer"])
                pq_ratio.append(p["e2e"] / c)
                vs_pq.append(h["e2e"] / p["e2e"])
                claim_vs_defer.append(h["claim"] / p["defer"])
        statements = bench.statement_counts(tag)
    finally:
        for proc in reversed(procs + pq_procs):
            proc.stop()
    where = "embedded defaults: SQLite + file broker" if args.embedded else "PostgreSQL + Redis"
    print(
        f"\nGoal 1: throughput on {where}, {args.runs} per round, {args.workers} worker processes, {args.rounds} rounds"
    )
    line("bare Celery no-op, end to end", cel, "tasks/s")
    line("harness.noop, end to end", har, "runs/s")
    line("harness claims (run_claim + dispatch)", claim, "claims/s")
    if pq_procs:
        line("Procrastinate no-op, end to end", pq, "jobs/s")
        line("Procrastinate defers", defer, "defers/s")
    line("ratio harness / bare Celery", ratio, "x", "goal >= 0.5")
    if pq_procs:
        line("ratio Procrastinate / bare Celery", pq_ratio, "x")
        line("ratio harness / Procrastinate", vs_pq, "x", "goal >= 1")
        line("ratio claims / Procrastinate defers", claim_vs_defer, "x", "goal >= 1")
    elif not args.embedded:
        print("  (Procrastinate not installed: pip install -r requirements-bench.txt for its column)")
    print("  CPU per task/run/job, ms (median over rounds): producer + workers + PostgreSQL backends = total")
    for name, rounds in cpu.items():
        if rounds:
            med = {k: statistics.median(r[k] for r in rounds) * 1000 / args.runs for k in rounds[0]}
            print(
                f"    {name:<16} {med['producer']:6.2f} + {med['workers']:6.2f} + {med['postgres']:6.2f}"
                f" = {sum(med.values()):6.2f}"
            )
    if cpu["Procrastinate"]:
        # Each round's harness total over the Procrastinate total of the same round.
        totals = [sum(h.values()) / sum(p.values()) for h, p in zip(cpu["harness"], cpu["Procrastinate"], strict=True)]
        line("ratio CPU per run harness / Procrastinate", totals, "x", "goal <= 1")
        # A claim is a row written and a Celery message sent: a defer's work plus a bare send's. Its
        # producer CPU over the two measured in the same round: 1 means the claim adds nothing of
        # its own, and a claim can be no cheaper than a defer while it publishes synchronously.
        floor = [
            h["producer"] / (p["producer"] + c["producer"])
            for h, p, c in zip(cpu["harness"], cpu["Procrastinate"], cpu["bare Celery"], strict=True)
        ]
        line("ratio claim CPU / (defer + bare send) CPU", floor, "x", "floor 1")
    print(
        f"  SQL statements incl. BEGIN/SAVEPOINT/COMMIT: claim {statements['claim']},"
        f" execution {statements['execute']} ({statements['execute_status']})"
    )


# --- goal 2 ---------------------------------------------------------------------------------------


def _make_rules(prefix: str, n: int, *, next_fire_at: datetime) -> None:
    from tasks.models import TriggerRule

    batch = []
    for i in range(n):
        batch.append(
            TriggerRule(
                name=f"{prefix}{i}",
                reason="benchmark: tick",
                kind=TriggerRule.Kind.INTERVAL,
                interval_seconds=3600,
                timezone="UTC",
                skill="harness.noop",
                next_fire_at=next_fire_at,
            )
        )
        if len(batch) == 5000:
            TriggerRule.objects.bulk_create(batch)
            batch = []
    TriggerRule.objects.bulk_create(batch)


def _timed_tick(now: datetime):
    from django.db import connection

    from tasks.triggers.scheduler import scheduler_tick

    count = [0]

    def counting(execute, sql, params, many, context):
        count[0] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counting):
        t0 = time.perf_counter()
        result = scheduler_tick(now=now)
        seconds = time.perf_counter() - t0
    return seconds, result, count[0]


def goal_tick(args, tag: str) -> None:
    from django.db import connection

    from runs.models import TaskRun
    from tasks.models import TriggerRule

    # Only our rules may be due: others (an earlier, aborted run) are switched off.
    TriggerRule.objects.filter(enabled=True).exclude(name__startswith=f"bench-{tag}").update(enabled=False)
    far = datetime.now(UTC) + timedelta(days=365)
    due_prefix, idle_prefix = f"bench-{tag}-due-", f"bench-{tag}-idle-"
    _make_rules(due_prefix, args.tick_slots, next_fire_at=far)
    _make_rules(idle_prefix, 99, next_fire_at=far)
    due = TriggerRule.objects.filter(name__startswith=due_prefix)
    one = TriggerRule.objects.filter(name=f"{idle_prefix}0")
    rates, per_slot, fixed = [], [], {100: [], args.rules_max: []}
    stmts: dict = {}

    def due_round(r: int) -> None:
        # Every round a new slot instant, so the slots (and their biz_keys) are new.
        slot = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=r + 1, microseconds=time.time_ns() // 1000 % 10**12)
        due.update(next_fire_at=slot)
        seconds, result, n = _timed_tick(slot + timedelta(milliseconds=100))
        rates.append(result.claimed / seconds)
        per_slot.append(n / max(result.claimed, 1))
        stmts["due"] = (result.claimed, n)

    def fixed_round(total: int) -> None:
        samples = []
        for _ in range(5):
            slot = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(microseconds=time.time_ns() // 1000 % 10**12)
            one.update(next_fire_at=slot)
            seconds, _result, n = _timed_tick(slot + timedelta(milliseconds=100))
            samples.append(seconds * 1000)
            stmts[total] = n
        fixed[total].append(statistics.median(samples))

    try:
        for r in range(args.rounds):
            due_round(r)
            fixed_round(100)
        _make_rules(f"bench-{tag}-many-", args.rules_max - 100 - args.tick_slots, next_fire_at=far)
        with connection.cursor() as cur:
            cur.execute("ANALYZE tasks_triggerrule")
        for r in range(args.rounds):
            due_round(args.rounds + r)
            fixed_round(args.rules_max)
    finally:
        TriggerRule.objects.filter(name__startswith=f"bench-{tag}-").update(enabled=False)
        # Their runs got no worker: cancelled, so the sweeper does not feed them to the next phase.
        TaskRun.objects.filter(rule__name__startswith=f"bench-{tag}-", state__in=TaskRun.CLAIMABLE).update(
            state=TaskRun.State.CANCELLED
        )
    small, large = fixed[100], fixed[args.rules_max]
    print(f"\nGoal 2: scheduler tick, {args.tick_slots} due rules per round, {args.rounds} rounds per rule count")
    line("due slots materialized per second", rates, "slots/s", "goal >= 1,000")
    line("SQL statements per due slot", per_slot, "stmts")
    line("fixed cost, 1 due rule among 100", small, "ms")
    line(f"fixed cost, 1 due rule among {args.rules_max:,}", large, "ms")
    line(
        f"ratio {args.rules_max:,} / 100 rules",
        [b / a for a, b in zip(small, large, strict=True)],
        "x",
        "goal <= 1.5",
    )
    print(f"  statements: due tick {stmts.get('due')}, fixed tick {stmts.get(100)} / {stmts.get(args.rules_max)}")


# --- goal 3 ---------------------------------------------------------------------------------------


def goal_lateness(args, log_dir: Path, tag: str) -> None:
    from django.conf import settings

    control_queue = getattr(settings, "CONTROL_QUEUE", None)
    procs = bench.start_workers(args, log_dir, control_queue)
    try:
        bench.bench_celery(args.workers * 10, procs, timeout=60)
        ns = argparse.Namespace(rules=args.late_rules, seconds=args.late_seconds, timeout=args.timeout)
        late = bench_lateness_rows(ns, tag, log_dir, procs)
    finally:
        for proc in reversed(procs):
            proc.stop()
        bench.cleanup_rules(f"bench-{tag}-")
    rows = sorted(late["rows"])
    print(f"\nGoal 3: lateness, {args.late_rules} rules x 1 s for {args.late_seconds:.0f} s, 1 s tick")
    print(
        f"  runs {late['runs']} (succeeded {late['succeeded']}), decisions {late['decisions']},"
        f" unaccounted slots {late['gaps']}, slots with both {late['run_and_decision']}"
    )
    values = [lat for _slot, lat in rows]
    if not values:
        return
    print(
        f"  start - slot over all: p50 {bench.pct(values, 50):.3f}  p95 {bench.pct(values, 95):.3f}"
        f"  p99 {bench.pct(values, 99):.3f}  max {max(values):.3f} s"
    )
    # Where it comes from: the tick claiming late (trigger - slot), or the run waiting for a worker.
    for part, label in (("trigger", "trigger - slot (tick)"), ("queue", "start - trigger (queue)")):
        if late[part]:
            print(f"  {label:<26} p50 {bench.pct(late[part], 50):.3f}  p99 {bench.pct(late[part], 99):.3f} s")
    first, last = rows[0][0], rows[-1][0]
    width = (last - first) / args.rounds
    windows = []
    for r in range(args.rounds):
        lo, hi = first + width * r, first + width * (r + 1)
        chunk = [lat for slot, lat in rows if lo <= slot < hi or (r == args.rounds - 1 and slot == last)]
        if chunk:
            windows.append(bench.pct(chunk, 99))
    line("start - slot p99, per window", windows, "s", "goal <= 0.5")
    line("start - slot p50, all", [bench.pct(values, 50)], "s")


def bench_lateness_rows(args, tag: str, log_dir: Path, procs) -> dict:
    from runs.models import TaskRun

    out = bench.bench_lateness(args, tag, log_dir, procs)
    rows = TaskRun.objects.filter(rule__name__startswith=f"bench-{tag}-", start_at__isnull=False).values_list(
        "slot", "start_at"
    )
    out["rows"] = [(slot, (start - slot).total_seconds()) for slot, start in rows if slot is not None]
    return out


# --- goal 4 ---------------------------------------------------------------------------------------


def _generate_runs(upto: int) -> None:
    """Top the generated runs up to `upto` rows: 1 % failed with a ticket, the rest spread over
    succeeded (most), cancelled, pending; trigger_at over the last 30 days."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM runs_taskrun WHERE biz_key LIKE %s", [GEN_PREFIX + "%"])
        have = cur.fetchone()[0]
        if have >= upto:
            return
        cur.execute(
            f"""
            INSERT INTO runs_taskrun (biz_key, rule_name, skill, source, triggered_by, executed_by, slot,
                trigger_at, start_at, finish_at, state, attempts, run_after, payload, last_error,
                last_error_kind, dedupe_hits, identity, object_key, coalesces, approved_by, is_trial,
                lease_owner, fence, created_at, updated_at, trace_id, dispatches)
            SELECT '{GEN_PREFIX}' || g || ':' || md5(g::text), 'gen-rule-' || (g %% 50), 'harness.noop', 'scheduler',
                'scheduler', 'gen-worker', t, t, t + interval '1 second', t + interval '2 seconds',
                CASE WHEN g %% 100 = 0 THEN 'failed' WHEN g %% 97 = 0 THEN 'cancelled'
                     WHEN g %% 1013 = 0 THEN 'pending' ELSE 'succeeded' END,
                1, t, '{{}}'::jsonb, CASE WHEN g %% 100 = 0 THEN 'TimeoutError' ELSE '' END,
                CASE WHEN g %% 100 = 0 THEN 'timeout' ELSE '' END, 0, '', '', false, '', false, '',
                1, t, t, md5(g::text), 1
            FROM (SELECT g, now() - (g %% 2592000) * interval '1 second' AS t
                  FROM generate_series(%s, %s) AS g) s
            """,
            [have + 1, upto],
        )
        cur.execute(
            """
            INSERT INTO deadletters_deadletter (run_id, biz_key, rule_name, source, raw_payload,
                first_failure_at, last_failure_at, attempts, error_kind, last_error_digest, last_error,
                raw_output, state, note, created_at, updated_at, trace_id)
            SELECT r.id, r.biz_key, r.rule_name, r.source, '{}'::jsonb, r.finish_at, r.finish_at, 1,
                'timeout', 'gen', 'TimeoutError', '', 'pending_manual', '', r.finish_at, r.finish_at, r.trace_id
            FROM runs_taskrun r
            WHERE r.biz_key LIKE %s AND r.state = 'failed'
              AND NOT EXISTS (SELECT 1 FROM deadletters_deadletter d WHERE d.run_id = r.id)
            """,
            [GEN_PREFIX + "%"],
        )
        # What autovacuum would have done by the time an operator looks: statistics and the
        # visibility map (index-only counts), not a table straight out of one bulk INSERT.
        cur.execute("VACUUM (ANALYZE) runs_taskrun")
        cur.execute("VACUUM (ANALYZE) deadletters_deadletter")


def _drop_generated_runs() -> None:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("DELETE FROM deadletters_deadletter WHERE biz_key LIKE %s", [GEN_PREFIX + "%"])
        # A worker of another goal may have executed the few pending ones (the sweeper sent them).
        cur.execute(
            "DELETE FROM runs_attempt WHERE run_id IN (SELECT id FROM runs_taskrun WHERE biz_key LIKE %s)",
            [GEN_PREFIX + "%"],
        )
        cur.execute("DELETE FROM runs_taskrun WHERE biz_key LIKE %s", [GEN_PREFIX + "%"])


def _pages():
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT id, biz_key FROM runs_taskrun WHERE biz_key LIKE %s ORDER BY id DESC LIMIT 1", ["gen:%"])
        run_id, biz_key = cur.fetchone()
    return [
        ("admin index", "/admin/"),
        ("dashboard", "/admin/dashboard/"),
        ("runs changelist", "/admin/runs/taskrun/"),
        ("runs filtered by state", "/admin/runs/taskrun/?state__exact=failed"),
        ("exact biz_key lookup", f"/admin/runs/taskrun/?q={biz_key}"),
        ("run id lookup", f"/admin/runs/taskrun/?q={run_id}"),
        ("dead-letter desk", "/admin/deadletters/deadletter/"),
    ]


def _measure_pages(client, rounds: int) -> tuple[dict, dict]:
    return bench.measure_pages(client, _pages(), rounds)


def goal_pages(args) -> None:
    from django.contrib.auth import get_user_model
    from django.test import Client

    user, _ = get_user_model().objects.get_or_create(username="bench-admin", defaults={"is_staff": True})
    user.is_staff = user.is_superuser = True
    user.save()
    client = Client()
    client.force_login(user)
    from tasks.models import TriggerRule

    _drop_generated_runs()  # an earlier invocation's: the small size must be measured small
    print(f"\n  (pages with {TriggerRule.objects.count():,} rules in the database)")
    results = {}
    for rows in (args.rows_small, args.rows_large):
        t0 = time.perf_counter()
        _generate_runs(rows)
        print(f"  (generated runs up to {rows:,} in {time.perf_counter() - t0:.0f} s)", flush=True)
        t0 = time.perf_counter()
        bench.fill_rollup()
        print(f"  (dashboard rollup filled as the sweeper would in {time.perf_counter() - t0:.0f} s)", flush=True)
        results[rows] = _measure_pages(client, args.rounds)
    print(f"\nGoal 4: operator pages, {args.rounds} interleaved rounds (seconds; ratio to the admin index)")
    small_t, small_q = results[args.rows_small]
    large_t, large_q = results[args.rows_large]
    for name in small_t:
        index_s = [t for t in small_t["admin index"]]
        index_l = [t for t in large_t["admin index"]]
        print(f"  {name}  (queries {small_q[name]} -> {large_q[name]})")
        line(f"    {args.rows_small:,} runs, seconds", small_t[name], "s")
        line(f"    {args.rows_large:,} runs, seconds", large_t[name], "s")
        if name != "admin index":
            line(
                f"    {args.rows_large:,} runs, / admin index",
                [a / b for a, b in zip(large_t[name], index_l, strict=True)],
                "x",
                "goal <= 10",
            )
        line(
            "    growth large / small",
            [statistics.median(large_t[name]) / statistics.median(small_t[name])],
            "x",
            "goal <= 1.5" if name != "admin index" else "",
        )
        del index_s


# --- main -----------------------------------------------------------------------------------------


def main() -> None:
    args = parse_args()
    os.environ.setdefault("LOG_LEVEL", "ERROR")  # the in-process tick's missed-slot alerts are not figures
    only = {int(x) for x in args.only.split(",") if x.strip()}
    if args.embedded:
        if only != {1}:
            sys.exit("--embedded measures goal 1 only (--only 1)")
        place = Path(tempfile.mkdtemp(prefix="harness-embedded-"))
        args.database_url, args.broker_url = f"sqlite:///{place / 'bench.sqlite3'}", "filesystem://"
        os.environ["HARNESS_BROKER_DIR"] = str(place / "broker")
    bench.configure_env(args)
    os.environ.setdefault("ALLOWED_HOSTS", "localhost,127.0.0.1,testserver")
    if not args.embedded:
        bench.ensure_database(args.database_url)
        bench.flush_broker(args.broker_url)

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    bench.cleanup_rules("bench-")
    connection.close()
    load = os.getloadavg()
    print(f"scale goals  rounds={args.rounds}  cpus={os.cpu_count()}  load before {load[0]:.2f} {load[1]:.2f}")
    tag = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    log_dir = Path(tempfile.mkdtemp(prefix="harness-goals-"))
    t0 = time.monotonic()
    # Goal 2 last: it leaves --rules-max (disabled) rules behind, which the pages must not list.
    if 1 in only:
        goal_throughput(args, log_dir, tag)
    if 3 in only:
        goal_lateness(args, log_dir, f"{tag}-late")
    if 4 in only:
        goal_pages(args)
    if 2 in only:
        goal_tick(args, tag)
        bench.flush_broker(args.broker_url)  # the tick's messages had no worker
    load = os.getloadavg()
    print(f"\ntotal {time.monotonic() - t0:.0f} s; load after {load[0]:.2f} {load[1]:.2f}; logs in {log_dir}")


if __name__ == "__main__":
    main()
