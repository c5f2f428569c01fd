"""Profile the worker's execute path in process (cProfile): claim N harness.noop runs, then execute
each as a worker would (runs.executor.run_execute), and print where the CPU went: the top functions
by own time, and own time by package (Django, psycopg, the harness, ...). Not part of the suite.

    .venv/bin/python tests/bench/profile_worker.py [--runs 500]

Needs DATABASE_URL (PostgreSQL for the figures that matter); rows are left for inspection.
"""

import argparse
import cProfile
import os
import pstats
import secrets
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def package(filename: str) -> str:
    if "site-packages/" in filename:
        return filename.split("site-packages/")[1].split("/")[0]
    if filename.startswith(str(ROOT)):
        return "harness (" + filename[len(str(ROOT)) + 1 :].split("/")[0] + ")"
    if filename.startswith("~") or filename.startswith("<"):
        return "builtins"
    return "stdlib"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=500)
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args()
    os.environ.setdefault("SECRET_KEY", "profile-" + secrets.token_urlsafe(48))
    os.environ.setdefault("LOG_LEVEL", "ERROR")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import transaction
    from django.utils import timezone

    from runs import executor
    from runs.claims import Work, run_claim

    call_command("migrate", verbosity=0)
    tag = f"profile:{time.time_ns()}"
    ids = []
    for i in range(args.runs):
        with transaction.atomic():
            work = Work(biz_key=f"{tag}:{i}", skill="harness.noop", source="api", triggered_by="profile", payload={})
            ids.append(run_claim(work, now=timezone.now(), dispatch=False).run.id)
    executor.run_execute(run_id=ids.pop(), worker="profile", clock=timezone.now)  # warm
    # CPU time, not wall: the worker is CPU-bound on a busy machine; waits on the server are not ours.
    profiler = cProfile.Profile(time.process_time)
    t0 = time.perf_counter()
    profiler.enable()
    for run_id in ids:
        executor.run_execute(run_id=run_id, worker="profile", clock=timezone.now)
    profiler.disable()
    elapsed = time.perf_counter() - t0
    stats = pstats.Stats(profiler)
    own = defaultdict(float)
    for (filename, _line, _name), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():
        own[package(filename)] += tt
    total = sum(own.values())
    print(
        f"{len(ids)} executions in process: {elapsed / len(ids) * 1000:.2f} ms each (wall), "
        f"{total / len(ids) * 1000:.2f} ms CPU each (this process; profiler overhead included)"
    )
    print("own time by package:")
    for name, tt in sorted(own.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {name:<40} {tt / total:6.1%}")
    print(f"top {args.top} functions by own time:")
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
