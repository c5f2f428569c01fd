"""Profile the worker's execute path in process (cProfile): claim N harness.noop runs (or, with
--skill llm_json, runs asking an agent whose provider is a fake model server on loopback that answers
at once), then execute each as a worker would (runs.engine.executor.run_execute), and print where the CPU
went: the top functions by own time, and own time by package (Django, psycopg, the harness, ...).
Not part of the suite.

    .venv/bin/python tests/bench/profile_worker.py [--runs 500] [--skill harness.noop|llm_json] [--no-profile]

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
from dataclasses import replace
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
    p.add_argument("--skill", choices=("harness.noop", "llm_json"), default="harness.noop")
    p.add_argument("--save", help="also write the profile here (pstats), to read by cumulative time")
    p.add_argument(
        "--no-profile",
        action="store_true",
        help="no profiler: only this thread's CPU per execution, to compare two versions (A/B)",
    )
    args = p.parse_args()
    server = None
    if args.skill == "llm_json":
        from tests.support.fake_model import FakeModelServer, json_completion

        server = FakeModelServer().start()
        server.respond(json_completion({"summary": "ok"}))
        os.environ.update(
            {
                "HARNESS_SECRET_PROFILE_MODEL": "sk-profile-0123456789",
                "HARNESS_GRANTS": f"HARNESS_SECRET_PROFILE_MODEL=model@{server.base_url}",
                "HARNESS_AGENT_URL_ALLOW": server.base_url,
            }
        )
    os.environ.setdefault("SECRET_KEY", "profile-" + secrets.token_urlsafe(48))
    os.environ.setdefault("LOG_LEVEL", "ERROR")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import transaction
    from django.utils import timezone

    from runs.engine import executor
    from runs.engine.claims import Work, run_claim
    from tasks.models import Agent
    from tests.support.runs import api_work, run_policy

    call_command("migrate", verbosity=0)
    tag = f"profile:{time.time_ns()}"
    if server is not None:
        Agent.objects.update_or_create(
            name="profile-model",
            defaults={
                "provider": "openai",
                "base_url": server.base_url,
                "model": "fake",
                "api_key_env": "HARNESS_SECRET_PROFILE_MODEL",
                "max_calls_per_hour": None,
                "max_tokens_per_hour": None,
            },
        )
    ids = []
    for i in range(args.runs):
        with transaction.atomic():
            work = Work(biz_key=f"{tag}:{i}", skill=args.skill, source="api", triggered_by="profile", payload={})
            if server is not None:
                work = replace(
                    api_work(f"{tag}:{i}", skill="llm_json", params={"prompt": "Summarise run {i}.", "i": i}),
                    policy=run_policy({"max_attempts": 1}, agent="profile-model"),
                )
            ids.append(run_claim(work, now=timezone.now(), dispatch=False).run.id)
    executor.run_execute(run_id=ids.pop(), worker="profile", clock=timezone.now)  # warm
    # CPU time of this thread, not wall: the worker is CPU-bound on a busy machine; waits on the server
    # (and the fake model server's own thread, in this process) are not ours.
    if args.no_profile:
        c0, t0 = time.thread_time(), time.perf_counter()
        for run_id in ids:
            executor.run_execute(run_id=run_id, worker="profile", clock=timezone.now)
        cpu, elapsed = time.thread_time() - c0, time.perf_counter() - t0
        print(
            f"{len(ids)} executions in process: {elapsed / len(ids) * 1000:.2f} ms each (wall), "
            f"{cpu / len(ids) * 1000:.3f} ms CPU each (this thread, no profiler)"
        )
        return
    profiler = cProfile.Profile(time.thread_time)
    t0 = time.perf_counter()
    profiler.enable()
    for run_id in ids:
        executor.run_execute(run_id=run_id, worker="profile", clock=timezone.now)
    profiler.disable()
    elapsed = time.perf_counter() - t0
    stats = pstats.Stats(profiler)
    if args.save:
        stats.dump_stats(args.save)
    own = defaultdict(float)
    for (filename, _line, _name), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():
        own[package(filename)] += tt
    total = sum(own.values())
    print(
        f"{len(ids)} executions in process: {elapsed / len(ids) * 1000:.2f} ms each (wall), "
        f"{total / len(ids) * 1000:.2f} ms CPU each (this thread; profiler overhead included)"
    )
    print("own time by package:")
    for name, tt in sorted(own.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {name:<40} {tt / total:6.1%}")
    print(f"top {args.top} functions by own time:")
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
