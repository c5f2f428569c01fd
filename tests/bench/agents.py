"""Runs that wait on a model: how many one worker holds in flight, on how many connections.

    .venv/bin/python tests/bench/agents.py [--runs 100,1000] [--seconds 10] [--pool-max 0,10]

PostgreSQL + Redis (DATABASE_URL, CELERY_BROKER_URL; the database is created and migrated if needed,
the broker's Redis database flushed). For each number of runs N and each pool size M: one worker in
the threads pool with N threads (HARNESS_DB_POOL_MAX=M; 0 is one connection per thread), N runs of
`harness.sleep` for --seconds (a stand-in for a model call) claimed at once; sampled every 0.25 s
until all have finished: peak runs in flight, peak connections to the database (all but this
process's), the worker's peak RSS, and the drain time as a ratio to the ideal (--seconds, every run
in flight at once). Prints figures and asserts nothing; not part of the test suite.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench import benchmark as bench


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default="100,1000", help="runs in flight per case, comma-separated")
    p.add_argument("--seconds", type=float, default=10.0, help="how long each run waits")
    p.add_argument("--pool-max", default="0,10", help="HARNESS_DB_POOL_MAX per case, comma-separated (0: no pool)")
    p.add_argument("--database-url", default=os.environ.get("DATABASE_URL", bench.DEFAULT_DATABASE_URL))
    p.add_argument("--broker-url", default=os.environ.get("CELERY_BROKER_URL", bench.DEFAULT_BROKER_URL))
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--db-reuse-max", type=int, default=0)
    return p.parse_args()


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def sessions() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def case(n: int, pool_max: int, args: argparse.Namespace, log_dir: Path) -> dict:
    from django.db import connection
    from django.utils import timezone

    from runs.claims import run_claim
    from runs.models import TaskRun
    from tests.support.runs import api_work

    tag = f"agents:{pool_max}:{n}:{time.time_ns()}"
    os.environ["HARNESS_DB_POOL_MAX"] = str(pool_max)
    worker = bench.Proc(
        f"agents-{pool_max}-{n}",
        bench.celery_argv(
            "worker", "--pool=threads", f"--concurrency={n}", "--loglevel=WARNING", "--queues=celery,harness_control"
        ),
        log_dir,
    )
    os.environ.pop("HARNESS_DB_POOL_MAX")
    try:
        bench.wait_for(
            lambda: "ready" in worker.tail().lower() or sessions() > 0, timeout=60, what="worker", procs=[worker]
        )
        time.sleep(2)
        now = timezone.now()
        started = time.monotonic()
        for i in range(n):
            run_claim(api_work(f"{tag}:{i}", skill="harness.sleep", params={"seconds": args.seconds}), now=now)
        claimed = time.monotonic() - started
        runs = TaskRun.objects.filter(biz_key__startswith=f"{tag}:")
        peak = {"in_flight": 0, "connections": 0, "rss_mb": 0.0}
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            peak["connections"] = max(peak["connections"], sessions())
            peak["rss_mb"] = max(peak["rss_mb"], rss_mb(worker.popen.pid))
            peak["in_flight"] = max(peak["in_flight"], runs.filter(state=TaskRun.State.RUNNING).count())
            if not runs.exclude(state__in=TaskRun.FINISHED).exists():
                break
            time.sleep(0.25)
        drained = time.monotonic() - started
        succeeded = runs.filter(state=TaskRun.State.SUCCEEDED).count()
        connection.close()
        return {**peak, "succeeded": succeeded, "claim_s": claimed, "drain_ratio": drained / args.seconds}
    finally:
        worker.stop()


def main() -> None:
    args = parse_args()
    bench.configure_env(args)
    bench.ensure_database(args.database_url)
    bench.flush_broker(args.broker_url)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    log_dir = Path(tempfile.mkdtemp(prefix="harness-agents-"))
    print(f"waiting runs: harness.sleep {args.seconds:g} s, one threads-pool worker, cpus={os.cpu_count()}")
    print(
        f"{'runs':>6} {'pool max':>8} {'in flight':>9} {'connections':>11} {'RSS MB':>7} {'succeeded':>9} "
        f"{'claim s':>7} {'drain / ideal':>13}"
    )
    for n in (int(x) for x in args.runs.split(",")):
        for pool_max in (int(x) for x in args.pool_max.split(",")):
            r = case(n, pool_max, args, log_dir)
            print(
                f"{n:>6} {pool_max or '-':>8} {r['in_flight']:>9} {r['connections']:>11} {r['rss_mb']:>7.0f} "
                f"{r['succeeded']:>9} {r['claim_s']:>7.1f} {r['drain_ratio']:>13.2f}",
                flush=True,
            )
    print(f"logs in {log_dir}")


if __name__ == "__main__":
    main()
