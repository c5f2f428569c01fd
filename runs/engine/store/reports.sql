-- The report reads (runs/desk/metrics.py, runs/engine/rollup.py), each named once: nothing else
-- runs SQL of its own outside the store (runs.engine.store.database.report takes a name from this
-- file, never a statement; an import-linter contract keeps cursors inside runs.engine.store).
-- Read by the loader of queries.sql (runs.engine.store.postgres.parse_queries): a block
-- "-- name --" holds one statement for every database, "-- name.postgresql --" and
-- "-- name.sqlite --" its variant for one database where the SQL differs (a name with a variant for
-- one database only has no statement on the other: a KeyError there); "-- fragment name --" is text
-- the statements include as {name}. Named parameters; numbers (bucket bounds, bin sizes), states
-- and sources are parameters too, so the code that interprets the rows names them once.
-- Not prepared (a scrape or a dashboard render runs each once), and run on any backend's cursor.

-- fragment started_histograms --
-- Both histograms of run_latency in one pass over the started runs: each bound is a parameter
-- (delay_0.. for runs.desk.metrics.QUEUE_DELAY_BUCKETS, latency_0.. for LATENCY_BUCKETS, in order,
-- one placeholder each: tests/runs/test_reports.py checks the counts against the tuples).
SELECT COUNT(d), COALESCE(SUM(d), 0), COUNT(l), COALESCE(SUM(l), 0),
       SUM(CASE WHEN d <= %(delay_0)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN d <= %(delay_1)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN d <= %(delay_2)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN d <= %(delay_3)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN d <= %(delay_4)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN d <= %(delay_5)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN d <= %(delay_6)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN d <= %(delay_7)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN d <= %(delay_8)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN d <= %(delay_9)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN d <= %(delay_10)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN d <= %(delay_11)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN d <= %(delay_12)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN l <= %(latency_0)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN l <= %(latency_1)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN l <= %(latency_2)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN l <= %(latency_3)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN l <= %(latency_4)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN l <= %(latency_5)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN l <= %(latency_6)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN l <= %(latency_7)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN l <= %(latency_8)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN l <= %(latency_9)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN l <= %(latency_10)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN l <= %(latency_11)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN l <= %(latency_12)s THEN 1 ELSE 0 END)
  FROM started

-- run_latency.postgresql --
-- The queue delay (first start - trigger) and end-to-end latency (finish - trigger, succeeded) of
-- every started run but backfills (paced on purpose), in seconds, to the microsecond. MATERIALIZED:
-- each difference computed once per row, not once per bucket.
WITH started AS MATERIALIZED (
    SELECT EXTRACT(EPOCH FROM (start_at - trigger_at))::float8 AS d,
           CASE WHEN state = %(succeeded)s AND finish_at IS NOT NULL
                THEN EXTRACT(EPOCH FROM (finish_at - trigger_at))::float8 END AS l
      FROM runs_taskrun
     WHERE start_at IS NOT NULL AND source <> %(backfill)s
)
{started_histograms}

-- run_latency.sqlite --
-- run_latency with SQLite's own date arithmetic, to the millisecond (Django's duration arithmetic
-- calls a Python function per row on SQLite). MATERIALIZED: SQLite would otherwise inline the CTE.
WITH started AS MATERIALIZED (
    SELECT ROUND((julianday(start_at) - julianday(trigger_at)) * 86400.0, 3) AS d,
           CASE WHEN state = %(succeeded)s AND finish_at IS NOT NULL
                THEN ROUND((julianday(finish_at) - julianday(trigger_at)) * 86400.0, 3) END AS l
      FROM runs_taskrun
     WHERE start_at IS NOT NULL AND source <> %(backfill)s
)
{started_histograms}

-- rollup_summaries.postgresql --
-- runs.engine.rollup.summarize in SQL, by the same rules (tests/runs/test_rollup.py compares the
-- two): the runs whose trigger_at lies in any of the ranges [starts[i], ends[i]) (disjoint; read by
-- run_recent_idx, range by range), the newest `limit` of them (NULL: all), summarised per bucket
-- (bucket_seconds wide from epoch): one row per (bucket, state) with its dedupe hits and trials
-- ('s'), per (bucket, delay bin) ('d') and (bucket, latency bin) ('l'), and one row 'n' with the
-- oldest bucket read and the runs read. A bin as rollup.bin_of computes it, in the same doubles:
-- 0 below bin_base, else 1 + floor(ln(x / bin_base) / ln(bin_ratio)).
WITH r0 AS (
    SELECT t.trigger_at, t.state, t.dedupe_hits, t.is_trial, t.start_at, t.finish_at, t.source
      FROM unnest(%(starts)s::timestamptz[], %(ends)s::timestamptz[]) AS g(s, e)
     CROSS JOIN LATERAL (
           SELECT trigger_at, state, dedupe_hits, is_trial, start_at, finish_at, source
             FROM runs_taskrun
            WHERE trigger_at >= g.s AND trigger_at < g.e
            ORDER BY trigger_at DESC
            LIMIT %(limit)s
           ) t
     ORDER BY t.trigger_at DESC
     LIMIT %(limit)s
), r AS (
    SELECT floor(extract(epoch FROM trigger_at - %(epoch)s) / %(bucket_seconds)s)::bigint AS b,
           state, dedupe_hits, is_trial,
           CASE WHEN start_at IS NOT NULL AND source <> %(backfill)s
                THEN extract(epoch FROM start_at - trigger_at)::float8 END AS d,
           CASE WHEN start_at IS NOT NULL AND source <> %(backfill)s AND state = %(succeeded)s
                     AND finish_at IS NOT NULL
                THEN extract(epoch FROM finish_at - trigger_at)::float8 END AS l
      FROM r0
)
SELECT b, 's', state, count(*), sum(dedupe_hits), count(*) FILTER (WHERE is_trial) FROM r GROUP BY b, state
 UNION ALL
SELECT b, 'd', (CASE WHEN d < %(bin_base)s::float8 THEN 0
                     ELSE 1 + floor(ln(d / %(bin_base)s::float8) / ln(%(bin_ratio)s::float8))::int END)::text,
       count(*), 0, 0
  FROM r WHERE d IS NOT NULL GROUP BY 1, 3
 UNION ALL
SELECT b, 'l', (CASE WHEN l < %(bin_base)s::float8 THEN 0
                     ELSE 1 + floor(ln(l / %(bin_base)s::float8) / ln(%(bin_ratio)s::float8))::int END)::text,
       count(*), 0, 0
  FROM r WHERE l IS NOT NULL GROUP BY 1, 3
 UNION ALL
SELECT min(b), 'n', '', count(*), 0, 0 FROM r
