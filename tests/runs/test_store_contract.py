"""The run store's contract, on whichever database the suite runs (./harness test runs it on SQLite
and on PostgreSQL): every backend answers each call the same way. The PostgreSQL statements are
also checked against the models they write, so a new column cannot be left out of an INSERT.
"""

import os
import re
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.db import IntegrityError, transaction

from runs.claims import Work, run_claim
from runs.leases import lease_acquire
from runs.models import Attempt, Decision, ExternalCall, PoolSlot, PoolWaiter, RunStep, TaskRun
from runs.store import NotPlain, store
from runs.store.postgres import QUERIES_FILE, parse_queries, queries
from tasks.agents.budgets import Spend
from tasks.models import GLOBAL_POOL, Agent, Pool, TriggerRule
from tasks.rules import keys
from tests.support.desk import daily_report as make_rule
from tests.support.runs import run_policy

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]


def claim(key: str, **over) -> TaskRun:
    fields = {"biz_key": key, "skill": "harness.noop", "source": "api", "triggered_by": "tests", "payload": {}}
    return run_claim(Work(**{**fields, **over}), now=T0, dispatch=False).run


def fresh(run: TaskRun) -> TaskRun:
    return TaskRun.objects.get(id=run.id)


# --- the statements file ---------------------------------------------------------------------


def test_every_statement_the_postgres_store_runs_is_named_in_the_file():
    source = (ROOT / "runs/store/postgres.py").read_text()
    used = set(re.findall(r'_(?:execute|one)\(\s*"([a-z_]+)"', source))
    used |= set(re.findall(r'"(runs_insert_one|runs_insert_many|decisions_insert_many)"', source))
    used |= set(re.findall(r'"(run_succeed|run_succeed_release|lease_claim|lease_claim_plain)"', source))
    assert used and used <= set(queries()), used - set(queries())


@pytest.mark.parametrize(
    ("statement", "model"),
    [
        ("runs_insert_one", TaskRun),
        ("runs_insert_many", TaskRun),
        ("decisions_insert_many", Decision),
        ("step_insert", RunStep),
        ("step_checkpoint", RunStep),
        ("call_insert", ExternalCall),
        ("call_insert_counting", ExternalCall),
    ],
)
def test_each_insert_names_every_column_of_its_model(statement, model):
    text = queries()[statement]
    listed = re.search(r"INSERT INTO \w+ \(([^()]*)\)", text).group(1)
    columns = [c.strip() for c in listed.split(",")]
    assert columns == [f.column for f in model._meta.concrete_fields if not f.primary_key]
    for column in columns:
        assert f"%({column})s" in text, column


def stars(text: str) -> list[str]:
    """The lines of a statement that select or return `*` (count(*) aside)."""
    return [line for line in text.splitlines() if "*" in line.replace("count(*)", "")]


def test_no_statement_selects_or_returns_star():
    """A prepared statement's result type is fixed when prepared: one selecting `*` from a table a
    migration adds a column to fails on every later call ("cached plan must not change result type")."""
    found = {name: stars(text) for name, text in queries().items() if stars(text)}
    assert not found, found
    ours = (ROOT / "runs/store/postgres.py").read_text() + (ROOT / "runs/store/base.py").read_text()
    assert not re.search(r"(SELECT|RETURNING) \*|\b\w\.\*", ours)


def test_the_star_check_finds_a_planted_star():
    planted = parse_queries("-- q --\nUPDATE runs_taskrun SET fence = fence + 1\n RETURNING r.*\n")
    assert stars(planted["q"]) == [" RETURNING r.*"]
    assert stars("SELECT count(*) FROM runs_taskrun") == []


@pytest.mark.parametrize(("fragment", "model"), [("step_row", RunStep), ("agent_row", Agent), ("run_row", TaskRun)])
def test_each_row_a_statement_reads_names_every_column_of_its_model(fragment, model):
    """Rows become models by column name (runs/store/postgres.py): each must name all of its model's."""
    probe = {"run_row": "id, {run_columns}"}.get(fragment, "{" + fragment + "}")
    text = parse_queries(QUERIES_FILE.read_text() + f"\n-- probe --\n{probe}\n")["probe"]
    assert [c.strip() for c in text.split(",")] == [f.column for f in model._meta.concrete_fields]


def test_the_state_literals_in_the_statements_are_the_models():
    text = "\n".join(queries().values())
    for state in re.findall(r"state (?:=|IN \() ?'([a-z_]+)'", text) + re.findall(r"'([a-z_]+)', '[a-z_]+'\)", text):
        assert state in TaskRun.State.values, state
    assert "'running'" in text and Attempt.Outcome.RUNNING == "running" and Attempt.Outcome.SUCCEEDED == "succeeded"
    assert set(TaskRun.CLAIMABLE) == {"pending", "waiting_retry"}
    assert PoolWaiter.Reason.CONCURRENCY == "concurrency"


def test_a_fragment_is_included_and_an_unknown_one_refused():
    text = "-- fragment f --\nx AS (SELECT 1)\n-- q --\n-- a comment\nWITH {f} SELECT 2\n"
    assert parse_queries(text) == {"q": "WITH x AS (SELECT 1) SELECT 2"}
    with pytest.raises(ValueError, match="unknown fragment"):
        parse_queries("-- q --\nWITH {nope} SELECT 1\n")


# --- the contract, on this backend -----------------------------------------------------------

pytestmark_db = pytest.mark.django_db


@pytestmark_db
def test_runs_insert_skips_a_taken_key_and_keeps_the_first_of_two():
    claim("c:taken")
    runs = [
        TaskRun(biz_key=k, skill="harness.noop", source="api", triggered_by="t", trigger_at=T0, run_after=T0)
        for k in ("c:taken", "c:new", "c:new")
    ]
    created = store().runs_insert(runs)
    assert created == [runs[1]] and runs[1].pk is not None and runs[0].pk is None and runs[2].pk is None
    assert TaskRun.objects.filter(biz_key="c:new").count() == 1


@pytestmark_db
def test_decisions_insert_keeps_one_per_rule_and_slot():
    rule = make_rule()
    first = Decision(rule=rule, slot=T0, reason=Decision.Reason.MISSED, details={}, created_at=T0)
    assert store().decisions_insert([first]) == [first]
    again = Decision(rule=rule, slot=T0, reason=Decision.Reason.PAUSED, details={}, created_at=T0)
    other = Decision(rule=rule, slot=T0 + timedelta(hours=1), reason=Decision.Reason.PAUSED, details={}, created_at=T0)
    assert store().decisions_insert([again, other]) == [other]
    assert Decision.objects.get(rule=rule, slot=T0).reason == Decision.Reason.MISSED


@pytestmark_db
def test_dedupe_hits_are_counted_on_the_run_holding_the_key():
    run = claim("c:dedupe")
    assert store().dedupe_hit("c:dedupe").id == run.id
    assert store().dedupe_hit("c:nobody") is None
    store().dedupe_hits_add({"c:dedupe": 3, "c:nobody": 2})
    assert fresh(run).dedupe_hits == 4


@pytestmark_db
def test_a_run_keeps_the_policy_it_was_claimed_with():
    policy = run_policy({"max_attempts": 7, "jitter_max": 2.0, "lease_ttl_seconds": 42}, agent="writer")
    run = claim("c:policy", policy=policy, start_by=T0 + timedelta(minutes=5))
    read = store().run_read(run.id)
    assert read.retry_policy() == policy.retry and read.lease_ttl_seconds == 42 and read.agent == "writer"
    assert read.start_by == T0 + timedelta(minutes=5) and "policy" not in read.payload


@pytestmark_db
def test_run_take_reads_the_run_and_claims_it_only_where_the_store_can():
    run = claim("c:take")
    taken = store().run_take(run.id, worker="w1", now=T0)
    assert taken.run.id == run.id
    if store().plain_admission:
        assert taken.attempt is not None and taken.run.fence == 1 and taken.plain is True
        assert taken.run.lease_expires_at == T0 + timedelta(seconds=run.lease_ttl_seconds)
    else:
        assert taken.attempt is None and taken.run.fence == 0 and taken.plain is None
    assert store().run_take(10**12, worker="w1", now=T0).run is None


@pytestmark_db
@pytest.mark.parametrize("plain", [False, True])
def test_the_lease_claim_is_a_compare_and_set_on_what_was_read(plain):
    run = claim(f"c:lease:{plain}")
    stale = fresh(run)
    if plain and not store().plain_admission:
        with pytest.raises(NotPlain):
            store().lease_claim(run, worker="w1", now=T0, plain=True)
        return
    attempt = store().lease_claim(run, worker="w1", now=T0, plain=plain)
    assert attempt is not None and attempt.number == 1 and attempt.fence == 1 and run.fence == 1
    try:  # read before the claim: not ours (a plain claim defers to pool_admit: the run holds slots now)
        assert store().lease_claim(stale, worker="w2", now=T0, plain=plain) is None
    except NotPlain:
        assert plain
    row = fresh(run)
    assert (row.state, row.lease_owner, row.fence, row.attempts) == (TaskRun.State.RUNNING, "w1", 1, 1)
    assert Attempt.objects.get(run=run).worker == "w1"


@pytestmark_db
def test_a_plain_claim_refuses_a_limited_pool_and_writes_nothing():
    if not store().plain_admission:
        pytest.skip("this store admits in pool_admit only")
    rule = make_rule(name="limited")
    Pool.objects.get_or_create(name=GLOBAL_POOL, defaults={"reason": "every run"})
    rule.pools.set([Pool.objects.create(name="one", reason="test", max_concurrency=1)])
    run = claim(keys.scoped(rule.pk, keys.MANUAL_KEY, "x"), rule=rule)
    with pytest.raises(NotPlain):
        store().lease_claim(run, worker="w1", now=T0, plain=True)
    assert fresh(run).fence == 0 and not Attempt.objects.filter(run=run).exists()


@pytestmark_db
def test_renewal_and_fenced_writes_hold_only_while_the_fence_does():
    run = claim("c:fence")
    attempt = store().lease_claim(run, worker="w1", now=T0, plain=False)
    PoolSlot.objects.create(
        pool=Pool.objects.get_or_create(name=GLOBAL_POOL, defaults={"reason": "r"})[0],
        key="",
        run=run,
        fence=run.fence,
        worker="w1",
        acquired_at=T0,
        expires_at=T0,
    )
    later = T0 + timedelta(minutes=10)
    assert store().run_leases_renew([(run.id, run.fence, later), (10**12, 1, later)]) == {run.id}
    assert PoolSlot.objects.get(run=run).expires_at == later
    with transaction.atomic():
        assert store().fence_holds(run_id=run.id, fence=run.fence)
    TaskRun.objects.filter(id=run.id).update(fence=run.fence + 1)  # taken by the sweeper
    assert store().run_leases_renew([(run.id, run.fence, later)]) == set()
    with transaction.atomic():
        assert not store().fence_holds(run_id=run.id, fence=run.fence)
    assert not store().run_fenced_update(run, last_error="late")
    done = store().run_succeed(run, attempt, {"ok": 1}, now=later, release_worker=None)
    assert not done.written and fresh(run).state == TaskRun.State.RUNNING


@pytestmark_db
def test_keyed_leases_are_renewed_only_for_their_owner_and_token_until_they_expire():
    held = lease_acquire(key="object:c", owner="w1", ttl=timedelta(seconds=30), now=T0)
    later = T0 + timedelta(seconds=10)
    leases = [("object:c", "w1", held.token, later, later + timedelta(seconds=30))]
    assert store().keyed_leases_renew(leases) == {"object:c"}
    assert store().keyed_leases_renew([("object:c", "w2", held.token, later, later)]) == set()
    assert store().keyed_leases_renew([("object:c", "w1", held.token + 1, later, later)]) == set()
    expired = later + timedelta(seconds=31)
    assert store().keyed_leases_renew([("object:c", "w1", held.token, expired, expired)]) == set()


@pytestmark_db
def test_success_writes_the_result_and_gives_back_the_slots_where_the_store_can():
    run = claim("c:succeed")
    pool = Pool.objects.create(name="two", reason="test", max_concurrency=2)
    attempt = store().lease_claim(run, worker="w1", now=T0, plain=False)
    PoolSlot.objects.create(pool=pool, key="", run=run, fence=run.fence, worker="w1", acquired_at=T0, expires_at=T0)
    waiting = claim("c:waits")
    PoolWaiter.objects.create(
        run=waiting, pool=pool, key="", fair_key="f", reason=PoolWaiter.Reason.CONCURRENCY, since=T0, checked_at=T0
    )
    done = store().run_succeed(run, attempt, {"ok": 1}, now=T0, release_worker="w1")
    assert done.written
    row = fresh(run)
    assert (row.state, row.result, row.lease_owner) == (TaskRun.State.SUCCEEDED, {"ok": 1}, "")
    assert Attempt.objects.get(id=attempt.id).outcome == Attempt.Outcome.SUCCEEDED
    if done.waiting is None:  # the slots are the caller's to give back (SQLite)
        assert store().slots_release(run_id=run.id, fence=run.fence, worker="w1") == [(pool.id, "")]
    else:
        assert done.waiting == [(pool.id, "")]
    assert not PoolSlot.objects.filter(run=run).exists()


@pytestmark_db
def test_slots_release_frees_only_the_named_worker_s_and_names_only_pairs_runs_wait_for():
    run = claim("c:release")
    for worker in ("w1", "w2"):
        pool = Pool.objects.create(name=f"free-{worker}", reason="test")
        PoolSlot.objects.create(pool=pool, key="", run=run, fence=1, worker=worker, acquired_at=T0, expires_at=T0)
    assert store().slots_release(run_id=run.id, fence=1, worker="w1") == []  # nobody waits for it
    assert list(PoolSlot.objects.filter(run=run).values_list("worker", flat=True)) == ["w2"]
    assert store().slots_release(run_id=run.id, fence=1, worker=None) == []
    assert not PoolSlot.objects.filter(run=run).exists()


def checkpoint(run: TaskRun, name: str, output, *, attempt: int = 1) -> RunStep:
    return RunStep(run_id=run.id, name=name, attempt=attempt, output=output, digest="d" * 64, completed_at=T0)


@pytestmark_db
def test_a_step_checkpoint_is_written_only_while_the_fence_holds_and_read_back_as_written():
    run = claim("c:steps")
    store().lease_claim(run, worker="w1", now=T0, plain=False)
    assert store().step_read(run.id, "fetch") is None
    assert store().step_checkpoint(checkpoint(run, "fetch", {"a": [1, "b"]}), fence=run.fence)
    assert not store().step_checkpoint(checkpoint(run, "late", {"a": 1}), fence=run.fence - 1)
    done = store().step_read(run.id, "fetch")
    assert (done.name, done.attempt, done.output, done.skipped, done.completed_at) == (
        "fetch",
        1,
        {"a": [1, "b"]},
        False,
        T0,
    )
    assert store().step_read(run.id, "late") is None
    skipped = checkpoint(run, "none", None)
    skipped.skipped = True
    assert store().step_checkpoint(skipped, fence=run.fence)
    assert store().step_read(run.id, "none").output is None and store().step_read(run.id, "none").skipped

    TaskRun.objects.filter(id=run.id).update(fence=run.fence + 1)  # taken by the sweeper
    assert not store().step_checkpoint(checkpoint(run, "write", 1), fence=run.fence)
    assert not RunStep.objects.filter(run=run, name="write").exists()


@pytestmark_db
def test_a_write_step_reads_its_checkpoint_and_the_fence_in_its_transaction():
    run = claim("c:write-step")
    store().lease_claim(run, worker="w1", now=T0, plain=False)
    with transaction.atomic():
        assert store().step_fence(run_id=run.id, fence=run.fence, name="write") == (None, True)
        store().step_insert(checkpoint(run, "write", {"id": 7}))
    with transaction.atomic():
        assert store().step_fence(run_id=run.id, fence=run.fence, name="other") == (None, True)
        assert store().step_fence(run_id=run.id, fence=run.fence - 1, name="other") == (None, False)
        done, _holds = store().step_fence(run_id=run.id, fence=run.fence - 1, name="write")
        assert (done.name, done.output) == ("write", {"id": 7})  # a done step is found whatever the fence
    with pytest.raises(IntegrityError), transaction.atomic():
        store().step_insert(checkpoint(run, "write", {"id": 8}, attempt=2))
    assert RunStep.objects.get(run=run, name="write").output == {"id": 7}


def call(agent: Agent, run: TaskRun, at: datetime, **over) -> ExternalCall:
    fields = {"agent_name": agent.name, "provider": "echo", "endpoint": "echo:", "model": "m", "input_sha256": "0" * 64}
    return ExternalCall(run=run, attempt=1, step="call", agent=agent, started_at=at, **{**fields, **over})


@pytestmark_db
def test_call_records_are_inserted_finished_marked_and_counted_in_their_window():
    agent = Agent.objects.create(name="c-agent", provider="echo", model="m", max_calls_per_hour=5)
    run = claim("c:calls")
    start, end = T0, T0 + timedelta(hours=1)
    assert store().agent_read("c-agent") == agent and store().agent_read("nobody") is None
    with transaction.atomic():
        assert store().agent_limits_lock(agent.id) == (5, None)
    assert store().agent_limits_lock(10**12) == (None, None)

    before = call(agent, run, T0 - timedelta(seconds=1), prompt_tokens=100)  # the hour before: not counted
    store().call_record(before)
    first = call(agent, run, T0, status=200, prompt_tokens=3, completion_tokens=4)
    store().call_record(first)
    assert first.pk is not None and store().agent_spend(agent_id=agent.id, start=start, end=end) == Spend(1, 7)

    counted = call(agent, run, T0 + timedelta(minutes=1))
    assert store().call_insert_counting(counted, start=start, end=end) == Spend(1, 7)  # the spend before it
    assert counted.pk is not None
    counted.status, counted.prompt_tokens, counted.completion_tokens, counted.latency_ms = 200, 10, 1, 12
    store().call_record(counted)  # what the call returned, on the row counted before it
    store().call_mark_output(counted.pk, valid=False)
    row = ExternalCall.objects.get(pk=counted.pk)
    assert (row.status, row.total_tokens, row.latency_ms, row.output_valid) == (200, 11, 12, False)
    assert store().agent_spend(agent_id=agent.id, start=start, end=end) == Spend(2, 18)
    store().call_delete(counted.pk)
    assert store().agent_spend(agent_id=agent.id, start=start, end=end) == Spend(1, 7)


@pytestmark_db
def test_rules_advance_writes_each_rule_s_slots():
    rules = [make_rule(name=f"adv-{i}") for i in range(3)]
    for i, rule in enumerate(rules):
        rule.last_slot_at, rule.next_fire_at = T0 + timedelta(hours=i), T0 + timedelta(hours=i + 1)
    store().rules_advance(rules)
    got = dict(TriggerRule.objects.filter(name__startswith="adv-").values_list("name", "next_fire_at"))
    assert got == {r.name: r.next_fire_at for r in rules}


@pytestmark_db
def test_report_reads_answer_on_both_backends():
    claim("c:report")
    assert store().biz_key_unique_valid() is store().summarizes_in_sql  # PostgreSQL's catalog says so
    estimate = store().table_estimate(TaskRun._meta.db_table)
    assert estimate is None if not store().summarizes_in_sql else estimate >= 0
    [(seconds,)] = store().rows(f"SELECT {store().seconds_between('finish_at', 'trigger_at')} FROM runs_taskrun", [])
    assert seconds is None  # not finished


# --- only the store touches the connection ---------------------------------------------------


def test_the_import_contract_fails_on_a_planted_use_of_the_connection(tmp_path):
    package = tmp_path / "pkg"
    (package / "store").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "store" / "__init__.py").write_text("from django.db import connection\n")
    (package / "planted.py").write_text("from django.db import (\n    transaction,\n    connections,\n)\n")
    (package / "fine.py").write_text("from django.db import transaction\n")
    (tmp_path / "setup.cfg").write_text(
        textwrap.dedent(
            """
            [importlinter]
            root_package = pkg
            include_external_packages = True
            contract_types =
                forbidden_names: tests.support.importnames.ForbiddenNamesContract

            [importlinter:contract:connection]
            name = only the store touches the connection
            type = forbidden_names
            module = django.db
            names =
                connection
                connections
            allowed_importers =
                pkg.store
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--config", "setup.cfg"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "pkg.planted:1 imports django.db.connections" in done.stdout
    assert "pkg.store" not in done.stdout.split("Broken contracts")[-1] and "pkg.fine" not in done.stdout
