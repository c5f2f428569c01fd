-- The PostgreSQL run store's statements (runs/engine/store/postgres.py), each named once, with named
-- parameters. A block "-- name --" holds one statement; a block "-- fragment name --" is text that
-- statements include as {name} (the plain admission is part of two claims). Prepared once per
-- connection (runs/engine/store/postgres.py): these CTEs cost PostgreSQL more to plan than to run.
-- Every statement names its columns, never `*`: a prepared statement's result type is fixed when it
-- is prepared, and PostgreSQL refuses to run it once a migration has added a column to a table it
-- selects `*` from ("cached plan must not change result type"), which would stop every worker of
-- the running release until restarted. tests/runs/test_store_contract.py refuses a `*`.
-- States and reasons are written as literals: they are code constants (runs/models.py), and a
-- literal is one parameter less; tests/runs/test_store_contract.py checks them against the models.

-- fragment plain_admission --
-- Lock the pools the run draws from (the global pool, its rule's and its agent's provider pool;
-- FOR KEY SHARE, in id order: pool rows before the run row, the order pool_wake and pool_admit use)
-- and find whether they all limit nothing. "admit" is false when one limits something (an agent's
-- pool with a rate or a pause included), the run holds slots already, or there is no global pool:
-- then runs.engine.admission.pool_admit decides, under the pool row locks.
plain AS MATERIALIZED (
    SELECT id, max_concurrency IS NULL AND coalesce(rate_count, 0) = 0
               AND (paused_until IS NULL OR paused_until <= %(now)s) AND key_template = '' AS free
      FROM tasks_pool
     WHERE enabled
       AND (name = %(global_pool)s
            OR id IN (SELECT pool_id FROM tasks_triggerrule_pools
                       WHERE triggerrule_id = (SELECT rule_id FROM runs_taskrun WHERE id = %(run_id)s))
            OR id IN (SELECT a.pool_id FROM tasks_agent a JOIN runs_taskrun r ON a.name = r.agent
                       WHERE r.id = %(run_id)s AND r.agent <> ''))
     ORDER BY id
       FOR KEY SHARE
),
admit AS MATERIALIZED (
    SELECT coalesce(bool_and(free), true)
           AND EXISTS (SELECT 1 FROM tasks_pool WHERE name = %(global_pool)s)
           AND NOT EXISTS (SELECT 1 FROM runs_poolslot WHERE run_id = %(run_id)s) AS plain
      FROM plain
)

-- fragment plain_slots --
-- After a claim (CTE "claimed"): a slot in each plain pool for the new fence, as long as the lease,
-- and the run's waiter row cleared; both only when it claimed.
slots AS (
    INSERT INTO runs_poolslot (pool_id, key, run_id, fence, worker, acquired_at, expires_at)
    SELECT p.id, '', c.id, c.fence, c.lease_owner, %(now)s, c.lease_expires_at
      FROM claimed c, plain p
),
waiter AS (
    DELETE FROM runs_poolwaiter w USING claimed c WHERE w.run_id = c.id
)

-- fragment slots_freed --
-- Give back an attempt's slots (only the worker's own, when one is named) ...
freed AS (
    DELETE FROM runs_poolslot
     WHERE run_id = %(run_id)s AND fence = %(fence)s
       AND (%(worker)s::varchar IS NULL OR worker = %(worker)s::varchar)
 RETURNING pool_id, key
)

-- fragment freed_waiting --
-- ... and the freed (pool, key) pairs that a run waits for, as JSON: runs.engine.admission wakes them.
coalesce((SELECT json_agg(json_build_array(f.pool_id, f.key))
            FROM freed f
           WHERE EXISTS (SELECT 1 FROM runs_poolwaiter w
                          WHERE w.reason = 'concurrency' AND w.pool_id = f.pool_id AND w.key = f.key)),
         '[]')

-- fragment attempt_started --
-- After a claim (CTE "claimed"): the attempt it starts, numbered and fenced as the claimed row.
attempt AS (
    INSERT INTO runs_attempt (run_id, number, fence, worker, started_at, finished_at, outcome, error_kind,
                              error_digest, error)
    SELECT c.id, c.attempts, c.fence, %(worker)s, %(now)s, NULL, 'running', '', '', ''
      FROM claimed c
 RETURNING id
)

-- fragment claimed_as_read --
-- The lease claim, compare-and-set on the state, fence and attempt count the caller read, and only
-- where the CTE "admit" says the admission is plain (lease_claim: always).
claimed AS (
    UPDATE runs_taskrun
       SET state = 'running', attempts = attempts + 1, fence = fence + 1, lease_owner = %(worker)s,
           lease_expires_at = %(expires_at)s, start_at = %(start_at)s, executed_by = %(worker)s
     WHERE id = %(run_id)s AND state IN ('pending', 'waiting_retry') AND run_after <= %(now)s
       AND fence = %(fence)s AND attempts = %(attempts)s AND (SELECT plain FROM admit)
 RETURNING id, attempts, fence, lease_owner, lease_expires_at
)

-- fragment succeeded --
-- The run done with its result and its lease released, only while the attempt's fence holds it;
-- the attempt's outcome only then (a fenced-out attempt keeps its own).
done AS (
    UPDATE runs_taskrun
       SET state = 'succeeded', finish_at = %(now)s, result = %(result)s, last_error = '', last_error_kind = '',
           lease_owner = '', lease_expires_at = NULL
     WHERE id = %(run_id)s AND fence = %(fence)s AND state = 'running'
 RETURNING id
),
attempt AS (
    UPDATE runs_attempt SET outcome = 'succeeded', finished_at = %(now)s
     WHERE id = %(attempt_id)s AND EXISTS (SELECT 1 FROM done)
 RETURNING id
)

-- fragment step_row --
-- A step checkpoint's columns, its id first (the contract suite checks them against the model).
id, run_id, name, attempt, output, digest, skipped, completed_at

-- fragment agent_row --
-- An agent's columns, its id first (the contract suite checks them against the model).
id, name, provider, base_url, model, api_key_env, system_prompt, allowed_tools, connect_timeout_seconds,
    read_timeout_seconds, max_calls_per_hour, max_tokens_per_hour, pool_id, store_prompts, created_at, updated_at

-- fragment run_columns --
-- Every column of a run but its id, in the model's order (the contract suite checks it).
biz_key, rule_id, rule_name, rule_version, skill, source, triggered_by, executed_by, slot, trigger_at,
    start_at, finish_at, state, attempts, run_after, first_failure_at, payload, lease_ttl_seconds, start_by,
    agent, retry_max_attempts, retry_backoff_base_seconds, retry_max_delay_seconds, retry_window_seconds,
    retry_jitter_min, retry_jitter_max, result, last_error, last_error_kind, dedupe_hits, identity, object_key,
    coalesces, approved_by, approved_at, is_trial, dispatched_at, dispatches, lease_owner, lease_expires_at,
    fence, trace_id, queue, created_at, updated_at

-- run_read --
-- The run row an attempt works from.
SELECT id, {run_columns} FROM runs_taskrun WHERE id = %(run_id)s

-- run_take --
-- Read the run and, when nothing stands in its way, claim it in the same statement: claimable and
-- due, no object (the object gate comes first), no start window (run_cancel_late checks it), and
-- every pool it draws from limits nothing (its agent's provider pool among them). Returns the
-- attempt's id (NULL: not claimed), whether the admission was plain, whether the run has any step
-- checkpoint (a first attempt then reads none), and the run row (as claimed, or as read when not
-- claimed). Compare-and-set: no row claimed means another worker got there first.
WITH {plain_admission},
claimed AS (
    UPDATE runs_taskrun r
       SET state = 'running', attempts = r.attempts + 1, fence = r.fence + 1,
           lease_owner = %(worker)s,
           lease_expires_at = %(now)s::timestamptz + make_interval(secs => r.lease_ttl_seconds),
           start_at = coalesce(r.start_at, %(now)s), executed_by = %(worker)s
     WHERE r.id = %(run_id)s AND r.state IN ('pending', 'waiting_retry') AND r.run_after <= %(now)s
       AND r.object_key = '' AND r.start_by IS NULL
       AND (SELECT plain FROM admit)
 RETURNING id, {run_columns}
),
{attempt_started},
{plain_slots}
SELECT (SELECT id FROM attempt) AS attempt_id, (SELECT plain FROM admit) AS plain,
       EXISTS (SELECT 1 FROM runs_runstep WHERE run_id = %(run_id)s) AS checkpoints, id, {run_columns}
  FROM claimed
 UNION ALL
SELECT NULL, (SELECT plain FROM admit), EXISTS (SELECT 1 FROM runs_runstep WHERE run_id = %(run_id)s), id,
       {run_columns}
  FROM runs_taskrun
 WHERE id = %(run_id)s AND NOT EXISTS (SELECT 1 FROM claimed)

-- lease_claim --
-- Take the run's lease and start its next attempt, compare-and-set on the state, fence and attempt
-- count the caller read: NULL means another worker got there first, or the run is not due.
WITH admit AS (SELECT true AS plain),
{claimed_as_read},
{attempt_started}
SELECT (SELECT id FROM attempt), true

-- lease_claim_plain --
-- lease_claim with the plain admission in the same statement: the run's UPDATE matches only when
-- every pool it draws from limits nothing. (NULL, false): a pool limits something, nothing written.
WITH {plain_admission},
{claimed_as_read},
{attempt_started},
{plain_slots}
SELECT (SELECT id FROM attempt), (SELECT plain FROM admit)

-- run_leases_renew --
-- The process's renewal pass: extend each run lease while its fence holds it, and the attempt's pool
-- slots with it (they live as long as the lease). Returns the runs renewed; a missing one was lost.
WITH renewed AS (
    UPDATE runs_taskrun t
       SET lease_expires_at = v.expires_at
      FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[], %(expires_at)s::timestamptz[]) AS v(id, fence, expires_at)
     WHERE t.id = v.id AND t.fence = v.fence AND t.state = 'running'
 RETURNING t.id, t.fence, t.lease_expires_at
),
slots AS (
    UPDATE runs_poolslot s SET expires_at = r.lease_expires_at
      FROM renewed r
     WHERE s.run_id = r.id AND s.fence = r.fence
)
SELECT id FROM renewed

-- keyed_leases_renew --
-- Extend each keyed lease ("object:<key>") still held by its owner and token and not expired.
UPDATE runs_lease l
   SET expires_at = v.expires_at
  FROM unnest(%(keys)s::varchar[], %(owners)s::varchar[], %(tokens)s::bigint[], %(nows)s::timestamptz[],
              %(expires_at)s::timestamptz[]) AS v(key, owner, token, now, expires_at)
 WHERE l.key = v.key AND l.owner = v.owner AND l.token = v.token AND l.expires_at > v.now
RETURNING l.key

-- run_succeed --
-- The attempt succeeded: the run is done with its result and its lease released, only while the
-- attempt's fence holds it; the attempt's outcome only then (a fenced-out attempt keeps its own).
-- Returns the rows written (0: fenced out) and the freed pairs runs wait for (none here).
WITH {succeeded}
SELECT (SELECT count(*) FROM done), '[]'::json

-- run_succeed_release --
-- run_succeed, and the worker's slots for the attempt given back in the same statement (fenced or not).
WITH {succeeded},
{slots_freed}
SELECT (SELECT count(*) FROM done), {freed_waiting}

-- slots_release --
-- An attempt ended (any outcome): its slots given back; the freed pairs that runs wait for.
WITH {slots_freed}
SELECT {freed_waiting}

-- step_read --
-- A run's checkpoint of one step; no row: not done yet (runstep_unique_name).
SELECT {step_row} FROM runs_runstep WHERE run_id = %(run_id)s AND name = %(name)s

-- steps_read --
-- Every checkpoint of a run, read once by an attempt at its first read step (runstep_unique_name).
SELECT {step_row} FROM runs_runstep WHERE run_id = %(run_id)s ORDER BY id

-- step_fence --
-- Inside a write step's transaction, one statement: the step's checkpoint (NULL columns: not done)
-- and whether the attempt's fence still holds the run, with the run's row locked until commit (as
-- fence_holds), so the sweeper cannot take the lease between the check and the step's writes.
SELECT EXISTS (SELECT 1 FROM runs_taskrun
                WHERE id = %(run_id)s AND fence = %(fence)s AND state = 'running' FOR UPDATE) AS holds, {step_row}
  FROM (SELECT 1 AS one) AS one
  LEFT JOIN runs_runstep ON run_id = %(run_id)s AND name = %(name)s

-- step_insert --
-- Inside a write step's fenced transaction: its checkpoint (a second one for the run and name raises).
INSERT INTO runs_runstep (run_id, name, attempt, output, digest, skipped, completed_at)
VALUES (%(run_id)s, %(name)s, %(attempt)s, %(output)s, %(digest)s, %(skipped)s, %(completed_at)s)

-- step_checkpoint --
-- A step's checkpoint alone, in one statement: written only while the attempt's fence holds the
-- run, whose row is locked for it (as fence_holds). No row written: fenced out.
INSERT INTO runs_runstep (run_id, name, attempt, output, digest, skipped, completed_at)
SELECT id, %(name)s, %(attempt)s, %(output)s, %(digest)s, %(skipped)s, %(completed_at)s
  FROM runs_taskrun
 WHERE id = %(run_id)s AND fence = %(fence)s AND state = 'running'
   FOR UPDATE

-- agent_read --
-- The agent a skill calls, by name.
SELECT {agent_row} FROM tasks_agent WHERE name = %(name)s

-- fragment call_columns --
-- Every column of a call record but its id, in the model's order (the contract suite checks it).
run_id, attempt, step, agent_id, agent_name, provider, endpoint, model, input_sha256, status, error_kind,
    error_digest, latency_ms, prompt_tokens, completion_tokens, output_valid, prompt_text, started_at, state

-- fragment call_values --
%(run_id)s, %(attempt)s, %(step)s, %(agent_id)s, %(agent_name)s, %(provider)s, %(endpoint)s, %(model)s,
    %(input_sha256)s, %(status)s, %(error_kind)s, %(error_digest)s, %(latency_ms)s, %(prompt_tokens)s,
    %(completion_tokens)s, %(output_valid)s, %(prompt_text)s, %(started_at)s, %(state)s

-- call_insert --
-- A model call's record.
INSERT INTO runs_externalcall ({call_columns}) VALUES ({call_values}) RETURNING id

-- call_finish --
-- What a call returned, on the record inserted before it was sent.
UPDATE runs_externalcall
   SET status = %(status)s, error_kind = %(error_kind)s, error_digest = %(error_digest)s,
       latency_ms = %(latency_ms)s, prompt_tokens = %(prompt_tokens)s, completion_tokens = %(completion_tokens)s,
       output_valid = %(output_valid)s, state = %(state)s
 WHERE id = %(id)s

-- call_delete --
DELETE FROM runs_externalcall WHERE id = %(call_id)s

-- call_mark_output --
UPDATE runs_externalcall SET output_valid = %(valid)s WHERE id = %(call_id)s

-- agent_limits_lock --
-- Inside the budget's transaction: the agent's limits, its row locked until commit, so the budget
-- counts of concurrent calls run one at a time (each sees the rows the ones before it inserted).
SELECT max_calls_per_hour, max_tokens_per_hour FROM tasks_agent WHERE id = %(agent_id)s FOR UPDATE

-- fragment window_spend --
-- Calls and tokens an agent used in the window [start, end) (call_agent_window_idx).
spend AS (
    SELECT count(*) AS calls, coalesce(sum(prompt_tokens), 0) + coalesce(sum(completion_tokens), 0) AS tokens
      FROM runs_externalcall
     WHERE agent_id = %(agent_id)s AND started_at >= %(start)s AND started_at < %(end)s
)

-- agent_spend --
WITH {window_spend}
SELECT calls, tokens FROM spend

-- call_insert_counting --
-- Under agent_limits_lock, a new statement (so its snapshot holds every call counted before the
-- lock was granted): the call's record inserted, and the spend before it (a statement does not
-- see its own insert). The caller rolls back when the spend refuses the call.
WITH {window_spend},
inserted AS (
    INSERT INTO runs_externalcall ({call_columns}) VALUES ({call_values}) RETURNING id
)
SELECT (SELECT id FROM inserted), calls, tokens FROM spend

-- runs_insert_one --
-- One run, unless its biz_key is taken (invariant 1: the unique index decides, never a read first).
INSERT INTO runs_taskrun ({run_columns}) VALUES (
    %(biz_key)s, %(rule_id)s, %(rule_name)s, %(rule_version)s, %(skill)s, %(source)s, %(triggered_by)s,
    %(executed_by)s, %(slot)s, %(trigger_at)s, %(start_at)s, %(finish_at)s, %(state)s, %(attempts)s,
    %(run_after)s, %(first_failure_at)s, %(payload)s, %(lease_ttl_seconds)s, %(start_by)s, %(agent)s,
    %(retry_max_attempts)s, %(retry_backoff_base_seconds)s, %(retry_max_delay_seconds)s,
    %(retry_window_seconds)s, %(retry_jitter_min)s, %(retry_jitter_max)s, %(result)s, %(last_error)s,
    %(last_error_kind)s, %(dedupe_hits)s, %(identity)s, %(object_key)s, %(coalesces)s, %(approved_by)s,
    %(approved_at)s, %(is_trial)s, %(dispatched_at)s, %(dispatches)s, %(lease_owner)s, %(lease_expires_at)s,
    %(fence)s, %(trace_id)s, %(queue)s, %(created_at)s, %(updated_at)s
)
ON CONFLICT (biz_key) DO NOTHING
RETURNING id, biz_key

-- runs_insert_many --
-- Several runs in one statement, one array per column (the text is the same for any number of
-- rows); of two runs with one key the first is inserted. A varchar is cast without its length: a
-- cast to varchar(255) would cut a longer key, which the column must refuse instead.
INSERT INTO runs_taskrun ({run_columns})
SELECT {run_columns} FROM unnest(
    %(biz_key)s::varchar[], %(rule_id)s::bigint[], %(rule_name)s::varchar[], %(rule_version)s::integer[],
    %(skill)s::varchar[], %(source)s::varchar[], %(triggered_by)s::varchar[], %(executed_by)s::varchar[],
    %(slot)s::timestamptz[], %(trigger_at)s::timestamptz[], %(start_at)s::timestamptz[],
    %(finish_at)s::timestamptz[], %(state)s::varchar[], %(attempts)s::integer[], %(run_after)s::timestamptz[],
    %(first_failure_at)s::timestamptz[], %(payload)s::jsonb[], %(lease_ttl_seconds)s::float8[],
    %(start_by)s::timestamptz[], %(agent)s::varchar[], %(retry_max_attempts)s::integer[],
    %(retry_backoff_base_seconds)s::float8[], %(retry_max_delay_seconds)s::float8[],
    %(retry_window_seconds)s::float8[], %(retry_jitter_min)s::float8[], %(retry_jitter_max)s::float8[],
    %(result)s::jsonb[], %(last_error)s::text[], %(last_error_kind)s::varchar[], %(dedupe_hits)s::integer[],
    %(identity)s::varchar[], %(object_key)s::varchar[], %(coalesces)s::boolean[], %(approved_by)s::varchar[],
    %(approved_at)s::timestamptz[], %(is_trial)s::boolean[], %(dispatched_at)s::timestamptz[],
    %(dispatches)s::integer[], %(lease_owner)s::varchar[], %(lease_expires_at)s::timestamptz[],
    %(fence)s::bigint[], %(trace_id)s::varchar[], %(queue)s::varchar[], %(created_at)s::timestamptz[],
    %(updated_at)s::timestamptz[]
) AS v({run_columns})
ON CONFLICT (biz_key) DO NOTHING
RETURNING id, biz_key

-- decisions_insert_many --
-- Slot decisions, one per (rule, slot): decision_one_per_slot decides; another tick's decision stands.
INSERT INTO runs_decision (rule_id, slot, biz_key, reason, details, survivor_id, hits, created_at)
SELECT rule_id, slot, biz_key, reason, details, survivor_id, hits, created_at FROM unnest(
    %(rule_id)s::bigint[], %(slot)s::timestamptz[], %(biz_key)s::varchar[], %(reason)s::varchar[],
    %(details)s::jsonb[], %(survivor_id)s::bigint[], %(hits)s::integer[], %(created_at)s::timestamptz[]
) AS v(rule_id, slot, biz_key, reason, details, survivor_id, hits, created_at)
ON CONFLICT (rule_id, slot) DO NOTHING
RETURNING id, rule_id, slot

-- dedupe_hits_add --
-- Count dedupe hits on the runs holding these keys, n each.
UPDATE runs_taskrun AS t
   SET dedupe_hits = t.dedupe_hits + v.n
  FROM unnest(%(keys)s::text[], %(counts)s::int[]) AS v(k, n)
 WHERE t.biz_key = v.k

-- dedupe_hit --
-- Count one dedupe hit on the run holding the key and return it.
UPDATE runs_taskrun SET dedupe_hits = dedupe_hits + 1 WHERE biz_key = %(biz_key)s RETURNING id, {run_columns}

-- rules_advance --
-- Each rule's last handled slot and next fire time, one statement for a tick's batch of rules.
UPDATE tasks_triggerrule AS r
   SET last_slot_at = v.last_slot_at, next_fire_at = v.next_fire_at
  FROM unnest(%(ids)s::bigint[], %(last_slot_at)s::timestamptz[], %(next_fire_at)s::timestamptz[])
       AS v(id, last_slot_at, next_fire_at)
 WHERE r.id = v.id

-- biz_key_unique_valid --
-- Whether the unique index behind run_unique_biz_key is valid: then no two runs share a key.
SELECT i.indisunique AND i.indisvalid
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE c.relname = 'run_unique_biz_key' AND i.indrelid = 'runs_taskrun'::regclass

-- table_estimate --
-- The planner's row estimate of a table (a large list's count without scanning it).
SELECT reltuples::bigint FROM pg_class WHERE oid = %(table)s::regclass
