"""Runs that wait on a model: how many workers hold in flight, on how many connections.

    .venv/bin/python tests/bench/agents.py [--cases 100x1,1000x1,1000x5] [--seconds 10] [--pool-max 10]
                                            [--skill model,bare,sleep,bare-sleep,bare-sql,bare-sleep-sql]
                                            [--statements 4] [--rounds 3] [--private-postgres]

PostgreSQL + Redis (DATABASE_URL, CELERY_BROKER_URL; the database is created and migrated if needed,
the broker's Redis database flushed). With --private-postgres the bench starts a PostgreSQL server of
its own with max_connections=100 (the default of a new install) and drops it afterwards, so the
connection ceiling is the one a real deployment has.

A case NxK starts K workers in the threads pool with N threads each (HARNESS_DB_POOL_MAX=--pool-max;
0 is one connection per thread) and claims N*K runs. With --skill model (the default) each run is the
`llm_json` skill asking an agent whose provider is a fake model server on loopback (a real HTTP
server, tests/support/fake_model.py) that answers after --seconds, through the agent client as a real
skill would; --skill sleep is `harness.sleep`; bare and bare-sleep are their floors, plain Celery tasks
(tests/bench/bench_tasks.py) making the same call or the same sleep, with no run. bare-sql is bare's
call with --statements one-row statements around it on the worker's pooled connection: the floor of a
run that records itself in that many statements (its ratio to bare is printed too); bare-sleep-sql is
the same around bare-sleep's sleep. Several skills, comma-separated, are measured in turn within each
of --rounds rounds (each round starting one skill further along), and a summary gives each one's
worker CPU per run (min / median / max) and its ratio to its bare peer of the same round. The runs
are claimed first and then dispatched in one go, so the drain measures the workers, not the claiming
client (claim seconds are printed apart).
Sampled every 0.25 s until all have finished: peak runs in flight, peak connections to the database
(all but this process's), the workers' peak RSS (largest one), runs that failed, log lines where the
database refused a connection, and the drain time (dispatch to last finish) as a ratio to the ideal
(--seconds: every run in flight at once). Prints figures and asserts nothing; not part of the suite.
"""

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench import benchmark as bench

KEY_ENV = "HARNESS_SECRET_BENCH_MODEL"
AGENT = "bench-model"
REFUSALS = (
    "too many clients",
    "remaining connection slots",
    "connection refused",
    "couldn't get a connection",
    "database is locked",
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default="100x1,1000x1", help="runs per worker x workers, comma-separated")
    p.add_argument("--seconds", type=float, default=10.0, help="how long each model call takes")
    p.add_argument("--pool-max", default="10", help="HARNESS_DB_POOL_MAX per case, comma-separated (0: no pool)")
    p.add_argument(
        "--skill",
        default="model",
        help="comma-separated, of model, sleep, bare, bare-sleep, bare-sql, bare-sleep-sql. bare: no harness, a "
        "plain Celery task making the same call (tests/bench/bench_tasks.py), the floor; bare-sleep: the same for "
        "sleep; bare-sql and bare-sleep-sql: bare and bare-sleep with --statements one-row statements around the "
        "call or the sleep",
    )
    p.add_argument(
        "--statements", type=int, default=4, help="bare-sql's and bare-sleep-sql's statements per task (default 4)"
    )
    p.add_argument("--rounds", type=int, default=1, help="rounds, each measuring every skill in turn (default 1)")
    p.add_argument(
        "--pool", choices=("threads", "gevent"), default="threads", help="the workers' Celery pool (gevent: installed?)"
    )
    p.add_argument("--queues", default="celery,agents,harness_control", help="the queues the workers consume")
    p.add_argument("--private-postgres", action="store_true", help="a server of the bench's own, max_connections=100")
    p.add_argument(
        "--embedded",
        action="store_true",
        help="the embedded default instead: SQLite and the file broker in a fresh folder, the processes of the "
        "Procfile as ./harness up starts them (honcho), HARNESS_AGENT_CONCURRENCY=N; cases Nx1 only",
    )
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


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (and of its children that have ended)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    from tests.support.servers import free_port as port

    return port()


def pids_of(text: str) -> list[int]:
    """Processes whose command line holds `text` (the agents worker under honcho)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def sessions() -> int:
    from django.db import connection

    if connection.vendor == "sqlite":
        return 0  # a file, not a server: no connections to count
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


SKILLS = ("model", "sleep", "bare", "bare-sleep", "bare-sql", "bare-sleep-sql")
BARE_PEER = {"model": "bare", "sleep": "bare-sleep", "bare-sql": "bare", "bare-sleep-sql": "bare-sleep"}


def work(tag: str, i: int, args: argparse.Namespace, skill: str):
    from dataclasses import replace

    from tests.support.runs import api_work, run_policy

    if skill == "sleep":
        return api_work(f"{tag}:{i}", skill="harness.sleep", params={"seconds": args.seconds})
    w = api_work(f"{tag}:{i}", skill="llm_json", params={"prompt": "Summarise run {i}.", "i": i})
    return replace(w, policy=run_policy({"max_attempts": 1}, agent=AGENT))


def case(n: int, k: int, pool_max: int, args: argparse.Namespace, log_dir: Path, model_env: dict, skill: str) -> dict:
    from django.db import connection, transaction
    from django.db.models import Max
    from django.utils import timezone

    from runs.engine.claims import run_claim
    from runs.engine.dispatch import run_dispatch_on_commit
    from runs.models import TaskRun

    tag = f"agents:{pool_max}:{n}x{k}:{time.time_ns()}"
    saved = dict(os.environ)
    os.environ.update({"HARNESS_DB_POOL_MAX": str(pool_max), **model_env})
    if args.embedded:
        os.environ.update({"HARNESS_AGENT_CONCURRENCY": str(n), "HARNESS_PORT": str(free_port()), "LOG_LEVEL": "INFO"})
        # As ./harness up does: the Procfile's `python` is the virtualenv's.
        os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        workers = [bench.Proc("harness-up", [str(Path(sys.executable).with_name("honcho")), "start"], log_dir)]
    else:
        workers = [
            bench.Proc(
                f"agents-{pool_max}-{n}x{k}-{w}",
                bench.celery_argv(
                    "worker",
                    f"--pool={args.pool}",
                    f"--concurrency={n}",
                    "--loglevel=WARNING",
                    f"--hostname=agents{w}@%h",
                    f"--queues={args.queues}",
                    *(["--include=tests.bench.bench_tasks"] if skill.startswith("bare") else []),
                ),
                log_dir,
            )
            for w in range(k)
        ]
    os.environ.clear()
    os.environ.update(saved)
    try:
        bench.wait_for(
            # A worker at WARNING prints no "ready": it shows by its connection (it reports at start).
            lambda: re.search(r"agents@\S+ ready", workers[0].tail(10**6)) if args.embedded else sessions() >= k,
            timeout=120,
            what="workers",
            procs=workers,
        )
        watched = [*(p.popen.pid for p in workers), *pids_of("--hostname=agents@")]
        time.sleep(2)
        cpu_before = sum(cpu_seconds(pid) for pid in watched)
        if skill.startswith("bare"):
            figures = bare_case(n * k, args, watched, skill=skill)
            cpu = sum(cpu_seconds(pid) for pid in watched) - cpu_before
            return {**figures, "cpu_ms_per_run": cpu * 1000 / (n * k)}
        now = timezone.now()
        started = time.monotonic()
        ids = [run_claim(work(tag, i, args, skill), now=now, dispatch=False).run.id for i in range(n * k)]
        claimed = time.monotonic() - started
        dispatched = timezone.now()
        with transaction.atomic():
            run_dispatch_on_commit(run_ids=ids, now=dispatched)
        runs = TaskRun.objects.filter(biz_key__startswith=f"{tag}:")
        peak = {"in_flight": 0, "connections": 0, "rss_mb": 0.0}
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            peak["connections"] = max(peak["connections"], sessions())
            peak["rss_mb"] = max([peak["rss_mb"], *(rss_mb(pid) for pid in watched)])
            peak["in_flight"] = max(peak["in_flight"], runs.filter(state=TaskRun.State.RUNNING).count())
            if not runs.exclude(state__in=TaskRun.FINISHED).exists():
                break
            time.sleep(0.25)
        cpu = sum(cpu_seconds(pid) for pid in watched) - cpu_before
        last = runs.aggregate(last=Max("finish_at"))["last"] or timezone.now()
        counts = {
            "succeeded": runs.filter(state=TaskRun.State.SUCCEEDED).count(),
            "failed": runs.filter(state__in=TaskRun.FINISHED).exclude(state=TaskRun.State.SUCCEEDED).count(),
            "unfinished": runs.exclude(state__in=TaskRun.FINISHED).count(),
        }
        connection.close()
        refusals = sum(p.tail(10**7).lower().count(r) for p in workers for r in REFUSALS)
        return {
            **peak,
            **counts,
            "refusals": refusals,
            "cpu_ms_per_run": cpu * 1000 / (n * k),
            "claim_s": claimed,
            "drain_ratio": (last - dispatched).total_seconds() / args.seconds,
        }
    finally:
        for p in workers:
            p.stop()


def bare_case(total: int, args: argparse.Namespace, watched: list[int], *, skill: str) -> dict:
    """The same calls (or sleeps) as plain Celery tasks: in flight counted from the tasks' own Redis counters."""
    import redis

    from tests.bench.bench_tasks import bench_call_model, bench_call_model_statements, bench_sleep

    client = redis.Redis.from_url(args.broker_url)
    counter = f"bare:{time.time_ns()}"
    url = os.environ.get("BENCH_MODEL_URL", "") + "/chat/completions"
    dispatched = time.time()
    for _ in range(total):
        if skill in ("bare-sleep", "bare-sleep-sql"):
            statements = args.statements if skill == "bare-sleep-sql" else 0
            bench_sleep.apply_async(args=(args.seconds, counter, total, statements), queue="celery")
        elif skill == "bare-sql":
            call = (url, counter, total, args.seconds + 60, args.statements)
            bench_call_model_statements.apply_async(args=call, queue="celery")
        else:
            bench_call_model.apply_async(args=(url, counter, total, args.seconds + 60), queue="celery")
    peak = {"in_flight": 0, "connections": 0, "rss_mb": 0.0}
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline and client.get(f"{counter}:done") is None:
        started, done = (int(client.get(key) or 0) for key in (f"{counter}:started", counter))
        peak["in_flight"] = max(peak["in_flight"], started - done)
        peak["rss_mb"] = max([peak["rss_mb"], *(rss_mb(pid) for pid in watched)])
        time.sleep(0.25)
    stamp = client.get(f"{counter}:done")
    done = int(client.get(counter) or 0)
    return {
        **peak,
        "succeeded": done,
        "failed": 0,
        "unfinished": total - done,
        "refusals": 0,
        "claim_s": 0.0,
        "drain_ratio": ((float(stamp) if stamp else time.time()) - dispatched) / args.seconds,
    }


def model_server(args: argparse.Namespace) -> tuple[object | None, dict]:
    """The fake provider and the worker environment that grants the bench's key for its URL alone."""
    if not {"model", "bare", "bare-sql"} & set(args.skills):
        return None, {}
    from tasks.models import Agent
    from tests.support.fake_model import FakeModelServer, Reply, json_completion

    server = FakeModelServer().start()
    answer = json_completion({"summary": "ok"})
    server.respond(Reply(answer.status, answer.body, answer.headers, hang=args.seconds))
    Agent.objects.update_or_create(
        name=AGENT,
        defaults={
            "provider": "openai",
            "base_url": server.base_url,
            "model": "fake",
            "api_key_env": KEY_ENV,
            "read_timeout_seconds": args.seconds + 60,
            "max_calls_per_hour": None,
            "max_tokens_per_hour": None,
        },
    )
    os.environ["BENCH_MODEL_URL"] = server.base_url
    return server, {
        KEY_ENV: "sk-bench-0123456789",
        "HARNESS_GRANTS": f"{KEY_ENV}=model@{server.base_url}",
        "HARNESS_AGENT_URL_ALLOW": server.base_url,
    }


def main() -> None:
    args = parse_args()
    private = None
    if args.embedded:
        place = Path(tempfile.mkdtemp(prefix="harness-agents-embedded-"))
        args.database_url, args.broker_url = f"sqlite:///{place / 'harness.sqlite3'}", "filesystem://"
        os.environ["HARNESS_BROKER_DIR"] = str(place / "broker")
    if args.private_postgres:
        from tests.support.servers import PrivatePostgres

        private = PrivatePostgres(settings={"max_connections": 100})
        private.start()
        args.database_url = private.url
    try:
        run(args)
    finally:
        if private:
            private.stop()


def run(args: argparse.Namespace) -> None:
    args.skills = [s.strip() for s in args.skill.split(",") if s.strip()]
    if unknown := set(args.skills) - set(SKILLS):
        sys.exit(f"--skill: unknown {sorted(unknown)}; choose from {', '.join(SKILLS)}")
    bench.configure_env(args)
    if not args.embedded:
        bench.ensure_database(args.database_url)
        bench.flush_broker(args.broker_url)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    ceiling = "-"
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SHOW max_connections")
            ceiling = cursor.fetchone()[0]
    server, model_env = model_server(args)
    log_dir = Path(tempfile.mkdtemp(prefix="harness-agents-"))
    wait = f"{args.seconds:g} s"
    what = {
        "model": f"llm_json, fake provider answering after {wait}",
        "bare": f"no harness: a plain Celery task calling the fake provider, answering after {wait}",
        "sleep": f"harness.sleep {wait}",
        "bare-sleep": f"no harness: a plain Celery task sleeping {wait}",
        "bare-sql": f"bare with {args.statements} one-row statements around the call",
        "bare-sleep-sql": f"bare-sleep with {args.statements} one-row statements around the sleep",
    }
    where = "SQLite + file broker, the Procfile's processes" if args.embedded else "threads-pool workers"
    print(f"waiting runs: {'; '.join(what[s] for s in args.skills)}")
    print(f"{where}; max_connections={ceiling}; cpus={os.cpu_count()}; {args.rounds} round(s)")
    print(
        f"{'skill':>10} {'runs':>10} {'pool max':>8} {'in flight':>9} {'connections':>11} {'RSS MB':>7} "
        f"{'succeeded':>9} {'failed':>6} {'refusals':>8} {'claim s':>7} {'CPU ms/run':>10} {'drain / ideal':>13}"
    )
    results: dict[tuple[str, int, str], list[dict]] = {}
    try:
        for round_ in range(args.rounds):
            # Each round starts one skill further along, so no skill always runs first or last.
            turn = round_ % len(args.skills)
            for spec in args.cases.split(","):
                n, k = (int(x) for x in spec.split("x"))
                for pool_max in (int(x) for x in args.pool_max.split(",")):
                    for skill in args.skills[turn:] + args.skills[:turn]:
                        r = case(n, k, pool_max, args, log_dir, model_env, skill)
                        results.setdefault((spec, pool_max, skill), []).append(r)
                        print(
                            f"{skill:>10} {f'{n}x{k}':>10} {pool_max or '-':>8} {r['in_flight']:>9} "
                            f"{r['connections']:>11} {r['rss_mb']:>7.0f} {r['succeeded']:>9} "
                            f"{r['failed'] + r['unfinished']:>6} {r['refusals']:>8} {r['claim_s']:>7.1f} "
                            f"{r['cpu_ms_per_run']:>10.1f} {r['drain_ratio']:>13.2f}",
                            flush=True,
                        )
    finally:
        if server:
            server.stop()
    summary(results)
    print(f"logs in {log_dir}")


def summary(results: dict[tuple[str, int, str], list[dict]]) -> None:
    """Per case and skill over the rounds: worker CPU per run and drain / ideal, min / median / max,
    and each harness skill's ratio to its bare peer measured in the same round."""

    def spread(values: list[float]) -> str:
        return f"min {min(values):6.2f}  median {statistics.median(values):6.2f}  max {max(values):6.2f}"

    print("\nsummary over rounds")
    for (spec, pool_max, skill), rounds in results.items():
        label = f"{skill} {spec} pool {pool_max or '-'}"
        print(f"  {label:<32} {'CPU ms/run':<18} {spread([r['cpu_ms_per_run'] for r in rounds])}")
        print(f"  {'':<32} {'drain / ideal':<18} {spread([r['drain_ratio'] for r in rounds])}")
        peer = results.get((spec, pool_max, BARE_PEER.get(skill, "")))
        if peer:
            cpu = [r["cpu_ms_per_run"] / b["cpu_ms_per_run"] for r, b in zip(rounds, peer, strict=True)]
            drain = [r["drain_ratio"] / b["drain_ratio"] for r, b in zip(rounds, peer, strict=True)]
            print(f"  {'':<32} {'CPU / ' + BARE_PEER[skill]:<18} {spread(cpu)}   goal <= 1.5")
            print(f"  {'':<32} {'drain / ' + BARE_PEER[skill]:<18} {spread(drain)}   goal <= 1.15")


if __name__ == "__main__":
    main()
