"""Operator pages at 100k and 1M runs, each as a ratio to Django's plain app index in the same run.

    DEBUG=1 .venv/bin/python tests/bench/pages.py [--rounds 7] [--small 100000] [--large 1000000]

PostgreSQL only (the embedded SQLite default is not the target at a million runs). Creates its own
database (--database-url, default h_pages_bench), migrates it, makes --rules rules, generates runs
with INSERT ... SELECT generate_series (1 % failed with a dead-letter ticket, trigger_at over the
last 30 days), and renders every page through Django's test client as a superuser: warm-up (and
its SQL statement count), then --rounds interleaved rounds. Prints each page's median ms, its
ratio to `/admin/auth/` (goal <= 15x) and its growth small -> large (goal <= 1.5x); then the status
board with --rules-many rules. Drops the database at the end unless --keep. Asserts nothing and is
not collected by pytest. Other processes share the machine: compare ratios within one run.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench import benchmark as bench  # configure_env, the database, measure_pages

DEFAULT_DATABASE_URL = "postgres://root@127.0.0.1:5432/h_pages_bench"
INDEX = "app index /admin/auth/"
GOAL_RATIO, GOAL_GROWTH = 15, 1.5


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--small", type=int, default=100_000)
    p.add_argument("--large", type=int, default=1_000_000)
    p.add_argument("--rules", type=int, default=20)
    p.add_argument("--rules-many", type=int, default=1000)
    p.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    p.add_argument("--broker-url", default=os.environ.get("CELERY_BROKER_URL", bench.DEFAULT_BROKER_URL))
    p.add_argument("--keep", action="store_true", help="keep the database (default: dropped at the end)")
    p.add_argument("--db-reuse-max", type=int, default=0)
    return p.parse_args()


def make_rules(n: int, prefix: str) -> list[int]:
    from tasks.models import TriggerRule

    TriggerRule.objects.bulk_create(
        TriggerRule(
            name=f"{prefix}{i:04d}",
            reason="benchmark: pages",
            kind=TriggerRule.Kind.INTERVAL,
            interval_seconds=3600,
            timezone="UTC",
            skill="harness.noop",
            enabled=False,  # nothing fires them; the board still ranks them
        )
        for i in range(n)
    )
    return list(TriggerRule.objects.filter(name__startswith=prefix).order_by("id").values_list("id", flat=True))


def generate_runs(upto: int, rule_ids: list[int]) -> None:
    """Top the runs up to `upto`: keys as rules store them (`rule/<id>/event/order-<n>%3Apaid`), 1 %
    failed with an open ticket, the rest mostly succeeded; trigger_at over the last 30 days."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM runs_taskrun")
        have = cur.fetchone()[0]
        if have >= upto:
            return
        cur.execute(
            """
            INSERT INTO runs_taskrun (biz_key, rule_id, rule_name, skill, source, triggered_by, executed_by, slot,
                trigger_at, start_at, finish_at, state, attempts, run_after, payload, last_error,
                last_error_kind, dedupe_hits, identity, object_key, coalesces, approved_by, is_trial,
                lease_owner, fence, created_at, updated_at, trace_id, dispatches, agent, lease_ttl_seconds,
                retry_backoff_base_seconds, retry_jitter_max, retry_jitter_min, retry_max_attempts,
                retry_max_delay_seconds, retry_window_seconds, queue)
            SELECT 'rule/' || r || '/event/order-' || g || '%%3Apaid%%3A' || left(md5(g::text), 8), r,
                'bench-pages-' || lpad((g %% %s)::text, 4, '0'), 'harness.noop', 'event', 'webhook', 'bench',
                NULL, t, t + interval '1 second', t + interval '2 seconds',
                CASE WHEN g %% 100 = 0 THEN 'failed' WHEN g %% 97 = 0 THEN 'cancelled'
                     WHEN g %% 1013 = 0 THEN 'pending' ELSE 'succeeded' END,
                1, t, '{}'::jsonb, CASE WHEN g %% 100 = 0 THEN 'TimeoutError' ELSE '' END,
                CASE WHEN g %% 100 = 0 THEN 'timeout' ELSE '' END, 0, '', '', false, '', false, '',
                1, t, t, md5(g::text), 1, '', 300, 10, 1.0, 0.5, 3, 3600, 86400, 'celery'
            FROM (SELECT g, (%s::int[])[1 + g %% %s] AS r, now() - (g %% 2592000) * interval '1 second' AS t
                  FROM generate_series(%s, %s) AS g) s
            """,
            [len(rule_ids), rule_ids, len(rule_ids), have + 1, upto],
        )
        cur.execute(
            """
            INSERT INTO deadletters_deadletter (run_id, biz_key, rule_name, source, raw_payload,
                first_failure_at, last_failure_at, attempts, error_kind, last_error_digest, last_error,
                raw_output, state, note, created_at, updated_at, trace_id)
            SELECT r.id, r.biz_key, r.rule_name, r.source, '{}'::jsonb, r.finish_at, r.finish_at, 1,
                'timeout', 'gen', 'TimeoutError', '', 'pending_manual', '', r.finish_at, r.finish_at, r.trace_id
            FROM runs_taskrun r
            WHERE r.state = 'failed' AND NOT EXISTS (SELECT 1 FROM deadletters_deadletter d WHERE d.run_id = r.id)
            """
        )
        # What autovacuum would have done by the time an operator looks.
        cur.execute("VACUUM (ANALYZE) runs_taskrun")
        cur.execute("VACUUM (ANALYZE) deadletters_deadletter")


def clear_rollup() -> None:
    from runs.models import RunRollup

    RunRollup.objects.all().delete()


def pages(upto: int) -> list[tuple[str, str]]:
    """The pages, and the search terms a person would have: a whole stored key, part of a key
    (the order number a client mentions), a run id; all from the middle of the table."""
    from runs.models import TaskRun

    middle = TaskRun.objects.filter(biz_key__contains=f"/order-{upto // 2}%3A").values("id", "biz_key").get()
    part = f"order-{upto // 2 + 7}"
    return [
        (INDEX, "/admin/auth/"),
        ("status board", "/admin/"),
        ("dashboard", "/admin/dashboard/"),
        ("runs list", "/admin/runs/taskrun/"),
        ("search whole key", f"/admin/runs/taskrun/?q={quote(middle['biz_key'])}"),
        ("search part of a key", f"/admin/runs/taskrun/?q={quote(part)}"),
        ("search run id", f"/admin/runs/taskrun/?q={middle['id']}"),
        ("dead-letter desk", "/admin/deadletters/deadletter/"),
    ]


def measure(client, urls: list[tuple[str, str]], rounds: int) -> tuple[dict[str, float], dict[str, int]]:
    """Median ms per page over `rounds` interleaved rounds, and each page's SQL statement count."""
    times, queries = bench.measure_pages(client, urls, rounds)
    return {name: statistics.median(v) * 1000 for name, v in times.items()}, queries


def measure_size(client, rows: int, rule_ids: list[int], rounds: int) -> tuple[dict[str, float], dict[str, int]]:
    t0 = time.perf_counter()
    generate_runs(rows, rule_ids)
    print(f"  (runs up to {rows:,} in {time.perf_counter() - t0:.0f} s)", flush=True)
    urls = pages(rows)
    clear_rollup()  # a new deployment, or a sweeper that has not run yet
    before, q_before = measure(client, [urls[0], ("dashboard before its rollup", "/admin/dashboard/")], rounds)
    bench.fill_rollup()
    ms, queries = measure(client, urls, rounds)
    ms["dashboard before its rollup"] = before["dashboard before its rollup"] * ms[INDEX] / before[INDEX]
    queries["dashboard before its rollup"] = q_before["dashboard before its rollup"]
    return ms, queries


def report(results: dict[int, tuple[dict, dict]], small: int, large: int) -> None:
    """Growth is given twice: of the page's ms, and of its ratio to the app index (the same page
    relative to the same baseline, so a busier machine in one phase does not count as growth)."""
    (s_ms, s_q), (l_ms, l_q) = results[small], results[large]
    print(
        f"\n{'page':<30} {'ms ' + f'{small:,}':>12} {'ms ' + f'{large:,}':>14} {'x index':>9}"
        f" {'growth':>8} {'growth/index':>13}  queries"
    )
    for name in l_ms:
        ratio = l_ms[name] / l_ms[INDEX]
        growth = l_ms[name] / s_ms[name]
        relative = ratio / (s_ms[name] / s_ms[INDEX])
        over = ratio > GOAL_RATIO or min(growth, relative) > GOAL_GROWTH
        flag = "  <-- over goal" if name != INDEX and over else ""
        print(
            f"{name:<30} {s_ms[name]:>12.1f} {l_ms[name]:>14.1f} {ratio:>8.1f}x {growth:>7.2f}x {relative:>12.2f}x"
            f"  {s_q[name]} -> {l_q[name]}{flag}"
        )
    print("(dashboard before its rollup: measured beside the index in its own rounds, scaled to this table's index)")


def main() -> None:
    args = parse_args()
    bench.configure_env(args)
    os.environ.setdefault("ALLOWED_HOSTS", "localhost,127.0.0.1,testserver")
    os.environ.setdefault("LOG_LEVEL", "ERROR")
    bench.drop_database(args.database_url)
    bench.ensure_database(args.database_url)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    try:
        call_command("migrate", verbosity=0)
        user = get_user_model().objects.create_superuser("bench-pages", "bench@example.com", "x")
        client = Client()
        client.force_login(user)
        rule_ids = make_rules(args.rules, "bench-pages-")
        load = os.getloadavg()
        print(f"operator pages  rounds={args.rounds}  rules={args.rules}  load {load[0]:.2f} {load[1]:.2f}")
        results = {rows: measure_size(client, rows, rule_ids, args.rounds) for rows in (args.small, args.large)}
        report(results, args.small, args.large)
        make_rules(args.rules_many - args.rules, "bench-pages-more-")
        with connection.cursor() as cur:
            cur.execute("ANALYZE tasks_triggerrule")
        many, _q = measure(client, [(INDEX, "/admin/auth/"), ("status board", "/admin/")], args.rounds)
        print(
            f"\nstatus board at {args.rules_many:,} rules, {args.large:,} runs: {many['status board']:.1f} ms,"
            f" {many['status board'] / many[INDEX]:.1f}x the app index ({many[INDEX]:.1f} ms)"
        )
        load = os.getloadavg()
        print(f"load after {load[0]:.2f} {load[1]:.2f}")
    finally:
        connection.close()
        if not args.keep:
            bench.drop_database(args.database_url)


if __name__ == "__main__":
    main()
