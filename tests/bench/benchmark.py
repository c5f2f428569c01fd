"""Throughput and lateness figures for the harness on PostgreSQL + Redis. Prints figures, asserts nothing.

    .venv/bin/python tests/bench/benchmark.py [--runs 2000] [--workers 2] [--rules 5] [--seconds 30]

One invocation, in order (worker processes are the same for every phase):
  0. PostgreSQL baseline: single-client INSERT ... ON CONFLICT DO NOTHING, autocommit.
  1. Bare Celery baseline: N no-op tasks (tests/bench/bench_tasks.py) from first publish to last execution.
  2. Harness: N runs of harness.noop claimed through runs.engine.claims.run_claim (source "api", autocommit: one
     INSERT each, dispatched once it committed), then executed by the workers until all have succeeded.
  3. Pool accounting: N runs claimed without a message, then dispatched at once and drained,
     first with every pool switched off (no admission rows or locks), then drawing from a named pool
     whose limit never binds (slot rows under the Pool row lock, plus the global pool): runs/s of
     each, their ratio and SQL statements per run, the cost of pool accounting per run.
  4. Lateness: beat (DatabaseScheduler) + interval rules of 1 s for --seconds; per scheduled run
     trigger_at - slot, start_at - slot and start_at - trigger_at percentiles.

The database (default postgres://root@127.0.0.1:5432/harness_bench) is created and migrated if needed;
the broker's Redis database (default redis://127.0.0.1:6379/14) is flushed first. Rows are kept for
inspection; each invocation uses its own biz_key and rule-name prefix.
"""

import argparse
import math
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]  # the checkout (this file is tests/bench/benchmark.py)
DEFAULT_DATABASE_URL = "postgres://root@127.0.0.1:5432/harness_bench"
DEFAULT_BROKER_URL = "redis://127.0.0.1:6379/14"
POLL = 0.02  # seconds between completion polls


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=2000, help="tasks/runs per throughput phase (default 2000)")
    p.add_argument("--workers", type=int, default=2, help="prefork pool processes of the worker (default 2)")
    p.add_argument("--rules", type=int, default=5, help="1 s interval rules in the lateness phase (default 5)")
    p.add_argument("--seconds", type=float, default=30, help="length of the lateness phase (default 30)")
    p.add_argument("--database-url", default=os.environ.get("DATABASE_URL", DEFAULT_DATABASE_URL))
    p.add_argument("--broker-url", default=os.environ.get("CELERY_BROKER_URL", DEFAULT_BROKER_URL))
    p.add_argument(
        "--db-reuse-max",
        type=int,
        default=0,
        help="experiment: make the worker's Celery Django fixup keep DB connections (CELERY_DB_REUSE_MAX)",
    )
    p.add_argument("--log-level", default="WARNING", help="worker log level; INFO logs every task (default WARNING)")
    p.add_argument("--timeout", type=float, default=90, help="deadline for each drain (default 90 s)")
    return p.parse_args()


# --- setup ------------------------------------------------------------------------------


def configure_env(args: argparse.Namespace) -> None:
    embedded = getattr(args, "embedded", False)  # goals.py --embedded: SQLite + the file broker
    if not embedded and not args.database_url.startswith(("postgres://", "postgresql://")):
        sys.exit(f"benchmark needs PostgreSQL, got DATABASE_URL={args.database_url!r}")
    if not embedded and not args.broker_url.startswith("redis://"):
        sys.exit(f"benchmark needs Redis, got CELERY_BROKER_URL={args.broker_url!r}")
    os.environ["DATABASE_URL"] = args.database_url
    os.environ["CELERY_BROKER_URL"] = args.broker_url
    os.environ.setdefault("SECRET_KEY", "benchmark-" + secrets.token_urlsafe(48))  # DEBUG is off: a strong one
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")
    os.environ["PYTHONUNBUFFERED"] = "1"
    if args.db_reuse_max:
        os.environ["BENCH_DB_REUSE_MAX"] = str(args.db_reuse_max)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def server_connection(url: str):
    """An autocommit connection to the maintenance database of `url`'s server (CREATE/DROP DATABASE)."""
    import psycopg

    parts = urlsplit(url)
    return psycopg.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5432,
        user=parts.username,
        password=parts.password,
        dbname="postgres",
        autocommit=True,
    )


def ensure_database(url: str) -> None:
    from psycopg import sql

    name = urlsplit(url).path.lstrip("/")
    with server_connection(url) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            print(f"created database {name}")


def drop_database(url: str) -> None:
    from psycopg import sql

    name = urlsplit(url).path.lstrip("/")
    with server_connection(url) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def flush_broker(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


class Proc:
    """A child process in its own session, so that stop() also ends its prefork children."""

    def __init__(self, name: str, argv: list[str], log_dir: Path):
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.popen = subprocess.Popen(
            argv, cwd=ROOT, env=dict(os.environ), stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 10) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
                self.popen.wait(timeout=timeout)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        # Whatever is left of the group (a stuck leader, an orphaned pool child) is killed outright.
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.popen.wait()
        self._log.close()

    def tail(self, n: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-n:]


def celery_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "harness_site", *args]


def start_workers(args: argparse.Namespace, log_dir: Path, control_queue: str | None) -> list[Proc]:
    """The worker setup of the Procfile: a prefork worker for runs (and control, if any), plus a
    one-process control worker for ticks and sweeps when the settings route them to their own queue."""
    common = [
        "--pool=prefork",
        f"--loglevel={args.log_level}",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    queues = "celery" + (f",{control_queue}" if control_queue else "")
    procs = [
        Proc(
            "worker",
            celery_argv(
                "worker",
                f"--concurrency={args.workers}",
                "--hostname=bench-worker@%h",
                f"--queues={queues}",
                "--include=tests.bench.bench_tasks",
                *common,
            ),
            log_dir,
        )
    ]
    if control_queue:
        procs.append(
            Proc(
                "control",
                celery_argv(
                    "worker",
                    "--concurrency=1",
                    "--hostname=bench-control@%h",
                    f"--queues={control_queue}",
                    "--include=tests.bench.bench_tasks",
                    *common,
                ),
                log_dir,
            )
        )
    return procs


def start_beat(log_dir: Path) -> Proc:
    return Proc(
        "beat",
        celery_argv("beat", "--loglevel=INFO", "--pidfile=", f"--schedule={log_dir / 'beat-schedule'}"),
        log_dir,
    )


def wait_for(predicate, *, timeout: float, what: str, procs: list[Proc] = (), poll: float = POLL):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        for proc in procs:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited while waiting for {what}:\n{proc.tail()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(poll)


# --- measurements -----------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def bench_pg_upsert(n: int) -> dict:
    """Single client, autocommit: one INSERT ... ON CONFLICT DO NOTHING (and one commit) per statement."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "CREATE TABLE IF NOT EXISTS bench_upsert (id bigserial PRIMARY KEY, k varchar(255) NOT NULL UNIQUE,"
            " payload jsonb NOT NULL, created_at timestamptz NOT NULL)"
        )
        cur.execute("TRUNCATE bench_upsert")
        stmt = "INSERT INTO bench_upsert (k, payload, created_at) VALUES (%s, %s, now()) ON CONFLICT (k) DO NOTHING"
        rates = {}
        for label in ("new", "conflict"):
            t0 = time.perf_counter()
            for i in range(n):
                cur.execute(stmt, [f"bench:{i}", '{"params": {}}'])
            rates[label] = n / (time.perf_counter() - t0)
    return rates


def bench_celery(n: int, procs: list[Proc], timeout: float) -> dict:
    import redis
    from django.conf import settings

    from tests.bench.bench_tasks import bench_noop, file_stamp

    if settings.CELERY_BROKER_URL.startswith("redis://"):
        client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        counter = f"bench:count:{time.time_ns()}"
        stamp = lambda: client.get(f"{counter}:done")  # noqa: E731
    else:  # the embedded default: no Redis, the count is kept in a file (bench_tasks.py)
        counter = f"file:{settings.BROKER_DIR}/bench-count-{time.time_ns()}"
        stamp = lambda: file_stamp(counter)  # noqa: E731
    t0 = time.time()
    for _ in range(n):
        bench_noop.delay(counter, n)
    t_pub = time.time()
    done = wait_for(stamp, timeout=timeout, what="bare Celery tasks", procs=procs)
    t_end = float(done)
    return {"publish": n / (t_pub - t0), "e2e": n / (t_end - t0), "seconds": t_end - t0}


def harness_claim(tag: str, i: int, *, dispatch: bool = True, rule=None):
    """One run claimed as a caller with nothing else to commit claims it (`harness fire`, a Python
    caller): in autocommit, one INSERT, and the message sent once it has committed. Celery's delay
    and Procrastinate's defer are measured the same way, outside any transaction."""
    from django.utils import timezone

    from runs.engine.claims import Work, run_claim
    from runs.models import TaskRun
    from tasks.rules import keys

    # A rule's runs are keyed in its namespace (run_claim refuses any other key).
    prefix = keys.namespace(rule.pk, keys.MANUAL_KEY) if rule is not None else ""
    work = Work(
        biz_key=f"{prefix}bench:{tag}:{i}",
        skill="harness.noop",
        source=TaskRun.Source.API,
        triggered_by="benchmark",
        payload={"params": {}},
        rule=rule,
    )
    return run_claim(work, now=timezone.now(), dispatch=dispatch)


def bench_harness(n: int, tag: str, procs: list[Proc], timeout: float, rule=None) -> dict:
    from django.db.models import Max, Min

    from runs.models import TaskRun

    t0 = time.time()
    ids = [harness_claim(tag, i, rule=rule).run.id for i in range(n)]
    t_claim = time.time()
    runs = TaskRun.objects.filter(id__gte=min(ids), id__lte=max(ids), biz_key__startswith=f"bench:{tag}:")
    # The figure ends at the last finish_at, not when this loop notices: a slow, cheap poll keeps
    # the watching out of the CPU that the workers and the database compete for.
    wait_for(
        lambda: _finished(min(ids), max(ids), f"bench:{tag}:") >= n,
        timeout=timeout,
        what=f"{n} harness runs to finish",
        procs=procs,
        poll=0.2,
    )
    agg = runs.aggregate(first_start=Min("start_at"), last_finish=Max("finish_at"))
    succeeded = runs.filter(state=TaskRun.State.SUCCEEDED).count()
    # Runs finished after the last claim: the workers' rate without the claiming client competing for CPU.
    claims_done = datetime.fromtimestamp(t_claim, UTC)
    drained = runs.filter(finish_at__gt=claims_done).count()
    in_worker = [(f - s).total_seconds() for s, f in runs.values_list("start_at", "finish_at")]
    t_end = agg["last_finish"].timestamp()
    return {
        "claim": n / (t_claim - t0),
        "e2e": n / (t_end - t0),
        "exec": n / (t_end - agg["first_start"].timestamp()),
        "seconds": t_end - t0,
        "claim_seconds": t_claim - t0,
        "drain": drained / (t_end - t_claim) if t_end > t_claim else None,
        "drained": drained,
        "in_worker_p50_ms": pct(in_worker, 50) * 1000,
        "succeeded": succeeded,
    }


def _finished(lo: int, hi: int, prefix: str) -> int:
    from django.db import connection

    from runs.models import TaskRun

    with connection.cursor() as cur:
        states = ", ".join(["%s"] * len(TaskRun.FINISHED))
        cur.execute(
            f"SELECT count(*) FROM runs_taskrun WHERE id BETWEEN %s AND %s AND biz_key LIKE %s AND state IN ({states})",
            [lo, hi, prefix + "%", *TaskRun.FINISHED],
        )
        return cur.fetchone()[0]


def bench_pools(n: int, tag: str, procs: list[Proc], timeout: float) -> dict:
    """Runs/s without any pool accounting, then drawing from a pool whose limit never binds.

    Claimed first without a message, then all dispatched at once, so the figure is the workers'
    execution rate alone (admission, lease, skill, outcome, release), not the claiming client's."""
    from tasks.models import GLOBAL_POOL, Pool, TriggerRule

    rule = TriggerRule.objects.create(
        name=f"bench-{tag}-pooled",
        reason="benchmark: pool accounting",
        kind=TriggerRule.Kind.INTERVAL,
        interval_seconds=3600,
        enabled=False,
        timezone="UTC",
        skill="harness.noop",
    )
    pool = Pool.objects.create(name=f"bench-{tag}", reason="benchmark: never binds", max_concurrency=100_000)
    rule.pools.set([pool])
    Pool.objects.update(enabled=False)
    try:
        without = _bench_drain(n, f"{tag}-nopool", procs, timeout, rule=rule)
        without["statements"] = _execute_statements(f"{tag}-nopool-count", rule)
    finally:
        Pool.objects.filter(name__in=[GLOBAL_POOL, pool.name]).update(enabled=True)
    pooled = _bench_drain(n, f"{tag}-pool", procs, timeout, rule=rule)
    pooled["statements"] = _execute_statements(f"{tag}-pool-count", rule)
    pool.delete()
    return {"without": without, "with": pooled}


def _bench_drain(n: int, tag: str, procs: list[Proc], timeout: float, *, rule) -> dict:
    from celery import current_app
    from django.db.models import Max, Min

    from runs.engine.dispatch import EXECUTE_TASK
    from runs.models import TaskRun

    ids = [harness_claim(tag, i, dispatch=False, rule=rule).run.id for i in range(n)]
    for run_id in ids:
        current_app.send_task(EXECUTE_TASK, args=[run_id])
    runs = TaskRun.objects.filter(id__in=ids)
    wait_for(
        lambda: runs.filter(state__in=TaskRun.FINISHED).count() >= n,
        timeout=timeout,
        what=f"{n} runs ({tag}) to finish",
        procs=procs,
    )
    agg = runs.aggregate(first_start=Min("start_at"), last_finish=Max("finish_at"))
    in_worker = [(f - s).total_seconds() for s, f in runs.values_list("start_at", "finish_at")]
    return {
        "exec": n / (agg["last_finish"] - agg["first_start"]).total_seconds(),
        "in_worker_p50_ms": pct(in_worker, 50) * 1000,
        "succeeded": runs.filter(state=TaskRun.State.SUCCEEDED).count(),
    }


def _execute_statements(tag: str, rule) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from runs.engine import executor

    run = harness_claim(tag, 0, dispatch=False, rule=rule).run
    with CaptureQueriesContext(connection) as queries:
        executor.run_execute(run_id=run.id, worker="bench-inprocess", clock=timezone.now)
    return len(queries)


def bench_claim_variants(n: int, tag: str) -> dict:
    """Claims without the broker publish (DB only), and dedupe hits on existing keys."""
    from runs.models import TaskRun

    t0 = time.perf_counter()
    ids = [harness_claim(f"{tag}-nodispatch", i, dispatch=False).run.id for i in range(n)]
    no_dispatch = n / (time.perf_counter() - t0)
    # Never dispatched: cancel them, so a later sweep does not pick them up during the lateness phase.
    TaskRun.objects.filter(id__in=ids).update(state=TaskRun.State.CANCELLED)
    t0 = time.perf_counter()
    for i in range(n):
        harness_claim(tag, i)  # keys of the main phase: every one is a dedupe hit
    return {"no_dispatch": no_dispatch, "dedupe": n / (time.perf_counter() - t0)}


def statement_counts(tag: str) -> dict:
    """SQL statements for one claim (with dispatch) and one in-process execution of harness.noop."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from runs.engine import executor

    with CaptureQueriesContext(connection) as claim_q:
        harness_claim(f"{tag}-count", 0)
    run = harness_claim(f"{tag}-count", 1, dispatch=False).run
    with CaptureQueriesContext(connection) as exec_q:
        status = executor.run_execute(run_id=run.id, worker="bench-inprocess", clock=timezone.now).status
    return {"claim": len(claim_q), "execute": len(exec_q), "execute_status": status}


def bench_lateness(args: argparse.Namespace, tag: str, log_dir: Path, procs: list[Proc]) -> dict:
    from django.utils import timezone

    from runs.models import Decision, SchedulerTick, TaskRun
    from tasks.models import TriggerRule
    from tasks.rules import schedule

    beat = start_beat(log_dir)
    procs.append(beat)
    started = timezone.now()
    wait_for(
        lambda: SchedulerTick.objects.filter(last_tick_at__gt=started).exists(),
        timeout=30,
        what="the first scheduler tick after beat start",
        procs=procs,
    )
    rules = [
        TriggerRule.objects.create(
            name=f"bench-{tag}-{i}",
            reason="benchmark: trigger-to-start lateness",
            kind=TriggerRule.Kind.INTERVAL,
            interval_seconds=1,
            timezone="UTC",
            skill="harness.noop",
        )
        for i in range(args.rules)
    ]
    firsts = {r.pk: r.next_fire_at for r in rules}
    time.sleep(args.seconds)
    for rule in rules:
        rule.refresh_from_db()
        rule.enabled = False
        rule.save()
    runs = TaskRun.objects.filter(rule__in=rules)
    wait_for(
        lambda: not runs.exclude(state__in=TaskRun.FINISHED).exists(),
        timeout=args.timeout,
        what="scheduled runs to finish",
        procs=procs,
    )
    rows = list(runs.values_list("rule_id", "slot", "trigger_at", "start_at", "state"))
    decisions = list(Decision.objects.filter(rule__in=rules).values_list("rule_id", "slot", "reason"))
    # Invariant 3 spot check: every slot from the first to the last handled one has a run or a decision.
    gaps = both = 0
    for rule in rules:
        seen_runs = [slot for rid, slot, *_ in rows if rid == rule.pk]
        seen_dec = [slot for rid, slot, _ in decisions if rid == rule.pk]
        handled = set(seen_runs) | set(seen_dec)
        both += len(set(seen_runs) & set(seen_dec))
        if handled:
            spec = rule.schedule_spec()
            expected = [firsts[rule.pk], *schedule.slots_between(spec, firsts[rule.pk], max(handled))]
            gaps += len(set(expected) - handled)
    started_rows = [r for r in rows if r[3] is not None]
    return {
        "runs": len(rows),
        "succeeded": sum(1 for r in rows if r[4] == TaskRun.State.SUCCEEDED),
        "decisions": len(decisions),
        "gaps": gaps,
        "run_and_decision": both,
        "trigger": [(r[2] - r[1]).total_seconds() for r in rows],
        "lateness": [(r[3] - r[1]).total_seconds() for r in started_rows],
        "queue": [(r[3] - r[2]).total_seconds() for r in started_rows],
    }


def fill_rollup() -> None:
    """What the sweeper does in its first minute: every bucket of the dashboard's rollup."""
    from django.utils import timezone

    from runs.engine.rollup import BUCKETS, FILL_PER_SWEEP, rollup_refresh

    for _ in range(BUCKETS // FILL_PER_SWEEP + 2):
        rollup_refresh(now=timezone.now())


def measure_pages(client, urls: list[tuple[str, str]], rounds: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Seconds per page in each of `rounds` interleaved rounds, and each page's SQL statement count
    (from a warm-up request, which also fails loudly on anything but HTTP 200)."""
    from django.db import connection

    times: dict[str, list[float]] = {name: [] for name, _ in urls}
    queries: dict[str, int] = {}
    for name, url in urls:
        count = [0]

        def counting(execute, sql, params, many, context, count=count):
            count[0] += 1
            return execute(sql, params, many, context)

        with connection.execute_wrapper(counting):
            response = client.get(url)
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}")
        queries[name] = count[0]
    for _ in range(rounds):
        for name, url in urls:
            t0 = time.perf_counter()
            client.get(url)
            times[name].append(time.perf_counter() - t0)
    return times, queries


def cleanup_rules(prefix: str) -> None:
    """Switch off benchmark rules (this run's, or an aborted earlier run's) so no beat keeps firing them."""
    from tasks.models import TriggerRule

    for rule in TriggerRule.objects.filter(name__startswith=prefix, enabled=True):
        rule.enabled = False
        rule.save()


# --- main -------------------------------------------------------------------------------


def main() -> None:
    args = parse_args()
    configure_env(args)
    t_start = time.monotonic()
    ensure_database(args.database_url)
    flush_broker(args.broker_url)

    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    try:
        call_command("migrate", verbosity=0)
    except Exception as exc:  # a half-edited model or migration: say so plainly
        sys.exit(f"migrate failed on {args.database_url}: {exc!r}")
    cleanup_rules("bench-")
    connection.close()  # children must not inherit an open transaction or socket

    tag = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    log_dir = Path(tempfile.mkdtemp(prefix="harness-bench-"))
    control_queue = getattr(settings, "CONTROL_QUEUE", None)
    procs: list[Proc] = []
    out: dict = {}
    try:
        procs = start_workers(args, log_dir, control_queue)
        out["pg"] = bench_pg_upsert(args.runs)
        # Warm-up: every pool child imports, forks and connects before the clock starts.
        bench_celery(args.workers * 10, procs, timeout=60)
        out["celery"] = bench_celery(args.runs, procs, args.timeout)
        out["harness"] = bench_harness(args.runs, tag, procs, args.timeout)
        out["pools"] = bench_pools(args.runs, tag, procs, args.timeout)
        out["variants"] = bench_claim_variants(min(args.runs, 500), tag)
        out["statements"] = statement_counts(tag)
        out["late"] = bench_lateness(args, tag, log_dir, procs)
    except (RuntimeError, TimeoutError) as exc:
        print(f"\nbenchmark stopped early: {exc}\nlogs: {log_dir}", file=sys.stderr)
    finally:
        for proc in reversed(procs):
            proc.stop()
        cleanup_rules(f"bench-{tag}-")
    report(args, out, control_queue, time.monotonic() - t_start, log_dir)


def report(args: argparse.Namespace, out: dict, control_queue: str | None, elapsed: float, log_dir: Path) -> None:
    workers = f"1 prefork worker x {args.workers} processes" + (
        f" (+1 control worker on {control_queue!r})" if control_queue else ""
    )
    print(f"\nAgent Harness benchmark  runs={args.runs}  {workers}  cpus={os.cpu_count()}")
    print(f"db={args.database_url}  broker={args.broker_url}  db_reuse_max={args.db_reuse_max or 'unset'}")
    rows: list[tuple[str, str, str]] = []

    def row(name: str, value: float | None, unit: str, note: str = "") -> None:
        rows.append((name, f"{value:,.0f} {unit}" if value is not None else "-", note))

    pg, cel, har, var = (out.get(k, {}) for k in ("pg", "celery", "harness", "variants"))
    if pg:
        row("PG INSERT..ON CONFLICT, new keys", pg["new"], "stmt/s", "1 client, autocommit")
        row("PG INSERT..ON CONFLICT, conflicts", pg["conflict"], "stmt/s", "same keys again")
    if har:
        row(
            "harness claim (run_claim + dispatch)",
            har["claim"],
            "claims/s",
            f"{har['claim'] / pg['new']:.2f}x PG insert" if pg else "",
        )
    if var:
        row(
            "harness claim, no dispatch",
            var["no_dispatch"],
            "claims/s",
            f"{var['no_dispatch'] / pg['new']:.2f}x PG insert" if pg else "",
        )
        row("harness claim, dedupe hit", var["dedupe"], "claims/s", "")
    if cel:
        row("bare Celery publish", cel["publish"], "tasks/s", "1 client")
        row("bare Celery end-to-end", cel["e2e"], "tasks/s", f"{args.runs} in {cel['seconds']:.2f}s")
    if har:
        note = f"{har['e2e'] / cel['e2e']:.2f}x bare Celery" if cel else ""
        row("harness end-to-end", har["e2e"], "runs/s", f"{note}; {har['succeeded']}/{args.runs} ok")
        row(
            "harness execution (1st start->last finish)",
            har["exec"],
            "runs/s",
            f"{har['exec'] / cel['e2e']:.2f}x bare Celery" if cel else "",
        )
        row(
            "harness drain (after last claim)",
            har["drain"],
            "runs/s",
            f"{har['drained']} runs; claims took {har['claim_seconds']:.1f}s; "
            f"start->finish p50 {har['in_worker_p50_ms']:.1f} ms",
        )
    pools = out.get("pools")
    if pools:
        off, on = pools["without"], pools["with"]
        row(
            "harness drain, no pool accounting",
            off["exec"],
            "runs/s",
            f"every pool off; {off['statements']} statements/run",
        )
        row(
            "harness drain, with a pool",
            on["exec"],
            "runs/s",
            f"{on['exec'] / off['exec']:.2f}x without; {on['statements']} statements/run (global + 1 named pool)",
        )
    width = max(len(r[0]) for r in rows) if rows else 0
    print()
    for name, value, note in rows:
        print(f"  {name:<{width}}  {value:>16}  {note}")
    if "statements" in out:
        s = out["statements"]
        print(
            f"\n  SQL statements incl. BEGIN/SAVEPOINT/COMMIT: claim {s['claim']},"
            f" execution {s['execute']} ({s['execute_status']})"
        )
    if pools:
        off, on = pools["without"], pools["with"]
        print(
            f"\n  pool accounting: {on['exec']:,.0f} runs/s with a pool / {off['exec']:,.0f} runs/s without"
            f" = {on['exec'] / off['exec']:.2f} ({on['statements']} vs {off['statements']} SQL statements per run;"
            f" start->finish p50 {on['in_worker_p50_ms']:.1f} ms vs {off['in_worker_p50_ms']:.1f} ms)"
        )
    late = out.get("late")
    if late:
        print(
            f"\n  lateness: {args.rules} interval rules x 1 s for {args.seconds:.0f} s -> runs {late['runs']} "
            f"(succeeded {late['succeeded']}), decisions {late['decisions']}, unaccounted slots {late['gaps']}, "
            f"slots with both a run and a decision {late['run_and_decision']}"
        )
        print(f"  {'seconds':<26}{'p50':>8}{'p95':>8}{'p99':>8}{'max':>8}")
        for name, key in (
            ("trigger_at - slot", "trigger"),
            ("start_at - slot (lateness)", "lateness"),
            ("start_at - trigger_at", "queue"),
        ):
            values = late[key]
            if values:
                cells = "".join(f"{pct(values, q):8.3f}" for q in (50, 95, 99)) + f"{max(values):8.3f}"
                print(f"  {name:<26}{cells}")
    print(f"\n  total {elapsed:.0f} s; worker/beat logs in {log_dir}")


if __name__ == "__main__":
    main()
