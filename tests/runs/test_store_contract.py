"""The run store's contract: one suite, every backend, one answer. Each database test runs once per
store class the database can hold: on SQLite the SQLite store; on PostgreSQL both (the ORM's
SQLite store works there too). Where backends may differ, the test asserts the store class's named
expectation (claims_in_take, plain_admission, releases_on_success), never the vendor. The
PostgreSQL statements are also checked against the models they write, so a new column cannot be
left out of an INSERT.
"""

import os
import re
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, transaction
from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH  # psycopg's own figure, not a copy

from runs.engine.claims import Work, run_claim
from runs.engine.store import (
    BACKENDS,
    Admit,
    AttemptEnd,
    BudgetPark,
    ErrorRecord,
    Failure,
    ForceRelease,
    Gate,
    NotPlain,
    PostgresStore,
    Proposal,
    Replay,
    RunStore,
    SqliteStore,
    Waiting,
    database,
)
from runs.engine.store.postgres import QUERIES_FILE, parse_queries, queries
from runs.models import (
    ActionProposal,
    Attempt,
    Decision,
    ExternalCall,
    Lease,
    PoolSlot,
    PoolWaiter,
    RunStep,
    SlotHold,
    TaskRun,
)
from tasks.agents.budgets import Spend
from tasks.models import GLOBAL_POOL, Agent, Pool, TriggerRule
from tasks.rules import keys
from tests.support.desk import daily_report as make_rule
from tests.support.runs import run_policy

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]


def claim(key: str, state: str | None = None, **over) -> TaskRun:
    fields = {"biz_key": key, "skill": "harness.noop", "source": "api", "triggered_by": "tests", "payload": {}}
    return run_claim(Work(**{**fields, **over}), now=T0, dispatch=False, state=state).run


def fresh(run: TaskRun) -> TaskRun:
    return TaskRun.objects.get(id=run.id)


# --- the statements file ---------------------------------------------------------------------


def test_every_statement_the_postgres_store_runs_is_named_in_the_file():
    source = (ROOT / "runs/engine/store/postgres.py").read_text()
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
    ours = (ROOT / "runs/engine/store/postgres.py").read_text() + (ROOT / "runs/engine/store/orm.py").read_text()
    assert not re.search(r"(SELECT|RETURNING) \*|\b\w\.\*", ours)


def test_every_statement_is_short_enough_for_psycopgs_parse_cache():
    """psycopg converts a statement's %(name)s placeholders with a regex on every execution unless
    the text is at most MAX_CACHED_STATEMENT_LENGTH bytes, when it keeps the conversion: a longer
    one (the worker's take, the hottest statement) costs that parse on every run."""
    over = {
        name: len(text.encode()) for name, text in queries().items() if len(text.encode()) > MAX_CACHED_STATEMENT_LENGTH
    }
    assert not over, over


def test_the_star_check_finds_a_planted_star():
    planted = parse_queries("-- q --\nUPDATE runs_taskrun SET fence = fence + 1\n RETURNING r.*\n")
    assert stars(planted["q"]) == ["RETURNING r.*"]
    assert stars("SELECT count(*) FROM runs_taskrun") == []


@pytest.mark.parametrize(("fragment", "model"), [("step_row", RunStep), ("agent_row", Agent), ("run_row", TaskRun)])
def test_each_row_a_statement_reads_names_every_column_of_its_model(fragment, model):
    """Rows become models by column name (runs/engine/store/postgres.py): each must name all of its model's."""
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

# The store classes this database can hold: the PostgreSQL store needs PostgreSQL's statements.
ON_POSTGRES = connections[DEFAULT_DB_ALIAS].vendor == "postgresql"
STORES = [SqliteStore, PostgresStore] if ON_POSTGRES else [SqliteStore]


@pytest.fixture(params=STORES, ids=lambda cls: cls.__name__)
def backend(request) -> RunStore:
    return request.param()


def protocol_members() -> set[str]:
    names = {n for n, v in vars(RunStore).items() if callable(v) and not n.startswith("_")}
    return names | {n for n in RunStore.__annotations__}


@pytest.mark.parametrize("cls", BACKENDS, ids=lambda cls: cls.__name__)
def test_each_backend_implements_the_whole_protocol_in_its_own_class(cls):
    """No inherited fallback: every operation is named in the backend's own class."""
    assert cls.__mro__ == (cls, object)
    assert protocol_members() - set(vars(cls)) == set()
    assert "retry_later" in protocol_members() and "claims_in_take" in protocol_members()


@pytestmark_db
def test_runs_insert_skips_a_taken_key_and_keeps_the_first_of_two(backend):
    claim("c:taken")
    runs = [
        TaskRun(biz_key=k, skill="harness.noop", source="api", triggered_by="t", trigger_at=T0, run_after=T0)
        for k in ("c:taken", "c:new", "c:new")
    ]
    created = backend.runs_insert(runs)
    assert created == [runs[1]] and runs[1].pk is not None and runs[0].pk is None and runs[2].pk is None
    assert TaskRun.objects.filter(biz_key="c:new").count() == 1


@pytestmark_db
def test_decisions_insert_keeps_one_per_rule_and_slot(backend):
    rule = make_rule()
    first = Decision(rule=rule, slot=T0, reason=Decision.Reason.MISSED, details={}, created_at=T0)
    assert backend.decisions_insert([first]) == [first]
    again = Decision(rule=rule, slot=T0, reason=Decision.Reason.PAUSED, details={}, created_at=T0)
    other = Decision(rule=rule, slot=T0 + timedelta(hours=1), reason=Decision.Reason.PAUSED, details={}, created_at=T0)
    assert backend.decisions_insert([again, other]) == [other]
    assert Decision.objects.get(rule=rule, slot=T0).reason == Decision.Reason.MISSED


@pytestmark_db
def test_dedupe_hits_are_counted_on_the_run_holding_the_key(backend):
    run = claim("c:dedupe")
    assert backend.dedupe_hit("c:dedupe").id == run.id
    assert backend.dedupe_hit("c:nobody") is None
    backend.dedupe_hits_add({"c:dedupe": 3, "c:nobody": 2})
    assert fresh(run).dedupe_hits == 4


@pytestmark_db
def test_a_run_keeps_the_policy_it_was_claimed_with(backend):
    policy = run_policy({"max_attempts": 7, "jitter_max": 2.0, "lease_ttl_seconds": 42}, agent="writer")
    run = claim("c:policy", policy=policy, start_by=T0 + timedelta(minutes=5))
    read = backend.run_read(run.id)
    assert read.retry_policy() == policy.retry and read.lease_ttl_seconds == 42 and read.agent == "writer"
    assert read.start_by == T0 + timedelta(minutes=5) and "policy" not in read.payload


@pytestmark_db
def test_run_take_reads_the_run_and_claims_it_only_where_the_store_can(backend):
    run = claim("c:take")
    taken = backend.run_take(run.id, worker="w1", now=T0)
    assert taken.run.id == run.id
    if backend.claims_in_take:
        assert taken.attempt is not None and taken.run.fence == 1 and taken.plain is True
        assert taken.run.lease_expires_at == T0 + timedelta(seconds=run.lease_ttl_seconds)
    else:
        assert taken.attempt is None and taken.run.fence == 0 and taken.plain is None
    assert backend.run_take(10**12, worker="w1", now=T0).run is None


@pytestmark_db
@pytest.mark.parametrize("plain", [False, True])
def test_the_lease_claim_is_a_compare_and_set_on_what_was_read(backend, plain):
    run = claim(f"c:lease:{plain}")
    stale = fresh(run)
    if plain and not backend.plain_admission:
        with pytest.raises(NotPlain):
            backend.lease_claim(run, worker="w1", now=T0, plain=True)
        return
    attempt = backend.lease_claim(run, worker="w1", now=T0, plain=plain)
    assert attempt is not None and attempt.number == 1 and attempt.fence == 1 and run.fence == 1
    try:  # read before the claim: not ours (a plain claim defers to pool_admit: the run holds slots now)
        assert backend.lease_claim(stale, worker="w2", now=T0, plain=plain) is None
    except NotPlain:
        assert plain
    row = fresh(run)
    assert (row.state, row.lease_owner, row.fence, row.attempts) == (TaskRun.State.RUNNING, "w1", 1, 1)
    assert Attempt.objects.get(run=run).worker == "w1"


@pytestmark_db
def test_a_plain_claim_refuses_a_limited_pool_and_writes_nothing(backend):
    rule = make_rule(name="limited")
    Pool.objects.get_or_create(name=GLOBAL_POOL, defaults={"reason": "every run"})
    rule.pools.set([Pool.objects.create(name="one", reason="test", max_concurrency=1)])
    run = claim(keys.scoped(rule.pk, keys.MANUAL_KEY, "x"), rule=rule)
    # Refused whether the store admits plainly or never does (plain_admission False: always NotPlain).
    with pytest.raises(NotPlain):
        backend.lease_claim(run, worker="w1", now=T0, plain=True)
    assert fresh(run).fence == 0 and not Attempt.objects.filter(run=run).exists()


@pytestmark_db
def test_renewal_and_fenced_writes_hold_only_while_the_fence_does(backend):
    run = claim("c:fence")
    attempt = backend.lease_claim(run, worker="w1", now=T0, plain=False)
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
    assert backend.run_leases_renew([(run.id, run.fence, later), (10**12, 1, later)]) == {run.id}
    assert PoolSlot.objects.get(run=run).expires_at == later
    with transaction.atomic():
        assert backend.fence_holds(run_id=run.id, fence=run.fence)
    TaskRun.objects.filter(id=run.id).update(fence=run.fence + 1)  # taken by the sweeper
    assert backend.run_leases_renew([(run.id, run.fence, later)]) == set()
    with transaction.atomic():
        assert not backend.fence_holds(run_id=run.id, fence=run.fence)
    late = Failure(run_id=run.id, error=ErrorRecord("k", "late"), first_failure_at=later, now=later, fence=run.fence)
    assert not backend.retry_later(late, run_after=later) and not backend.fail(late)
    assert fresh(run).last_error == ""
    done = backend.run_succeed(run, attempt, {"ok": 1}, now=later, release_worker=None)
    assert not done.written and fresh(run).state == TaskRun.State.RUNNING


@pytestmark_db
def test_keyed_leases_are_renewed_only_for_their_owner_and_token_until_they_expire(backend):
    held = backend.keyed_lease_acquire(
        key="object:c", owner="w1", expires_at=T0 + timedelta(seconds=30), now=T0, run_id=None
    )
    later = T0 + timedelta(seconds=10)
    leases = [("object:c", "w1", held.token, later, later + timedelta(seconds=30))]
    assert backend.keyed_leases_renew(leases) == {"object:c"}
    assert backend.keyed_leases_renew([("object:c", "w2", held.token, later, later)]) == set()
    assert backend.keyed_leases_renew([("object:c", "w1", held.token + 1, later, later)]) == set()
    expired = later + timedelta(seconds=31)
    assert backend.keyed_leases_renew([("object:c", "w1", held.token, expired, expired)]) == set()


@pytestmark_db
def test_success_writes_the_result_and_gives_back_the_slots_where_the_store_can(backend):
    run = claim("c:succeed")
    pool = Pool.objects.create(name="two", reason="test", max_concurrency=2)
    attempt = backend.lease_claim(run, worker="w1", now=T0, plain=False)
    PoolSlot.objects.create(pool=pool, key="", run=run, fence=run.fence, worker="w1", acquired_at=T0, expires_at=T0)
    waiting = claim("c:waits")
    PoolWaiter.objects.create(
        run=waiting, pool=pool, key="", fair_key="f", reason=PoolWaiter.Reason.CONCURRENCY, since=T0, checked_at=T0
    )
    done = backend.run_succeed(run, attempt, {"ok": 1}, now=T0, release_worker="w1")
    assert done.written
    row = fresh(run)
    assert (row.state, row.result, row.lease_owner) == (TaskRun.State.SUCCEEDED, {"ok": 1}, "")
    assert Attempt.objects.get(id=attempt.id).outcome == Attempt.Outcome.SUCCEEDED
    if backend.releases_on_success:
        assert done.waiting == [(pool.id, "")]
    else:  # the slots are the caller's to give back
        assert done.waiting is None
        assert backend.slots_release(run_id=run.id, fence=run.fence, worker="w1") == [(pool.id, "")]
    assert not PoolSlot.objects.filter(run=run).exists()


@pytestmark_db
def test_slots_release_frees_only_the_named_worker_s_and_names_only_pairs_runs_wait_for(backend):
    run = claim("c:release")
    for worker in ("w1", "w2"):
        pool = Pool.objects.create(name=f"free-{worker}", reason="test")
        PoolSlot.objects.create(pool=pool, key="", run=run, fence=1, worker=worker, acquired_at=T0, expires_at=T0)
    assert backend.slots_release(run_id=run.id, fence=1, worker="w1") == []  # nobody waits for it
    assert list(PoolSlot.objects.filter(run=run).values_list("worker", flat=True)) == ["w2"]
    assert backend.slots_release(run_id=run.id, fence=1, worker=None) == []
    assert not PoolSlot.objects.filter(run=run).exists()


def checkpoint(run: TaskRun, name: str, output, *, attempt: int = 1) -> RunStep:
    return RunStep(run_id=run.id, name=name, attempt=attempt, output=output, digest="d" * 64, completed_at=T0)


@pytestmark_db
def test_a_step_checkpoint_is_written_only_while_the_fence_holds_and_read_back_as_written(backend):
    run = claim("c:steps")
    backend.lease_claim(run, worker="w1", now=T0, plain=False)
    assert backend.step_read(run.id, "fetch") is None
    assert backend.step_checkpoint(checkpoint(run, "fetch", {"a": [1, "b"]}), fence=run.fence)
    assert not backend.step_checkpoint(checkpoint(run, "late", {"a": 1}), fence=run.fence - 1)
    done = backend.step_read(run.id, "fetch")
    assert (done.name, done.attempt, done.output, done.skipped, done.completed_at) == (
        "fetch",
        1,
        {"a": [1, "b"]},
        False,
        T0,
    )
    assert backend.step_read(run.id, "late") is None
    skipped = checkpoint(run, "none", None)
    skipped.skipped = True
    assert backend.step_checkpoint(skipped, fence=run.fence)
    assert backend.step_read(run.id, "none").output is None and backend.step_read(run.id, "none").skipped

    TaskRun.objects.filter(id=run.id).update(fence=run.fence + 1)  # taken by the sweeper
    assert not backend.step_checkpoint(checkpoint(run, "write", 1), fence=run.fence)
    assert not RunStep.objects.filter(run=run, name="write").exists()


@pytestmark_db
def test_every_checkpoint_of_a_run_is_read_in_one_go_by_name(backend):
    run = claim("c:steps-read")
    other = claim("c:steps-read-other")
    backend.lease_claim(run, worker="w1", now=T0, plain=False)
    backend.lease_claim(other, worker="w1", now=T0, plain=False)
    assert backend.steps_read(run.id) == {}
    assert backend.step_checkpoint(checkpoint(run, "fetch", {"a": [1, "b"]}), fence=run.fence)
    assert backend.step_checkpoint(checkpoint(run, "call", "text", attempt=2), fence=run.fence)
    assert backend.step_checkpoint(checkpoint(other, "fetch", 3), fence=other.fence)
    found = backend.steps_read(run.id)
    assert sorted(found) == ["call", "fetch"]
    assert (found["fetch"].output, found["fetch"].attempt, found["fetch"].completed_at) == ({"a": [1, "b"]}, 1, T0)
    assert (found["call"].output, found["call"].attempt, found["call"].run_id) == ("text", 2, run.id)
    assert found["fetch"].pk == backend.step_read(run.id, "fetch").pk


@pytestmark_db
def test_a_write_step_reads_its_checkpoint_and_the_fence_in_its_transaction(backend):
    run = claim("c:write-step")
    backend.lease_claim(run, worker="w1", now=T0, plain=False)
    with transaction.atomic():
        assert backend.step_fence(run_id=run.id, fence=run.fence, name="write") == (None, True)
        backend.step_insert(checkpoint(run, "write", {"id": 7}))
    with transaction.atomic():
        assert backend.step_fence(run_id=run.id, fence=run.fence, name="other") == (None, True)
        assert backend.step_fence(run_id=run.id, fence=run.fence - 1, name="other") == (None, False)
        done, _holds = backend.step_fence(run_id=run.id, fence=run.fence - 1, name="write")
        assert (done.name, done.output) == ("write", {"id": 7})  # a done step is found whatever the fence
    with pytest.raises(IntegrityError), transaction.atomic():
        backend.step_insert(checkpoint(run, "write", {"id": 8}, attempt=2))
    assert RunStep.objects.get(run=run, name="write").output == {"id": 7}


def call(agent: Agent, run: TaskRun, at: datetime, **over) -> ExternalCall:
    fields = {"agent_name": agent.name, "provider": "echo", "endpoint": "echo:", "model": "m", "input_sha256": "0" * 64}
    return ExternalCall(run=run, attempt=1, step="call", agent=agent, started_at=at, **{**fields, **over})


@pytestmark_db
def test_call_records_are_inserted_finished_marked_and_counted_in_their_window(backend):
    agent = Agent.objects.create(name="c-agent", provider="echo", model="m", max_calls_per_hour=5)
    run = claim("c:calls")
    start, end = T0, T0 + timedelta(hours=1)
    assert backend.agent_read("c-agent") == agent and backend.agent_read("nobody") is None
    with transaction.atomic():
        assert backend.agent_limits_lock(agent.id) == (5, None)
    assert backend.agent_limits_lock(10**12) == (None, None)

    before = call(agent, run, T0 - timedelta(seconds=1), prompt_tokens=100)  # the hour before: not counted
    backend.call_record(before)
    first = call(agent, run, T0, status=200, prompt_tokens=3, completion_tokens=4)
    backend.call_record(first)
    assert first.pk is not None and backend.agent_spend(agent_id=agent.id, start=start, end=end) == Spend(1, 7)

    counted = call(agent, run, T0 + timedelta(minutes=1))
    assert backend.call_insert_counting(counted, start=start, end=end) == Spend(1, 7)  # the spend before it
    assert counted.pk is not None
    counted.status, counted.prompt_tokens, counted.completion_tokens, counted.latency_ms = 200, 10, 1, 12
    backend.call_record(counted)  # what the call returned, on the row counted before it
    backend.call_mark_output(counted.pk, valid=False)
    row = ExternalCall.objects.get(pk=counted.pk)
    assert (row.status, row.total_tokens, row.latency_ms, row.output_valid) == (200, 11, 12, False)
    assert backend.agent_spend(agent_id=agent.id, start=start, end=end) == Spend(2, 18)
    backend.call_delete(counted.pk)
    assert backend.agent_spend(agent_id=agent.id, start=start, end=end) == Spend(1, 7)


@pytestmark_db
def test_runs_marked_dispatched_count_one_more_dispatch_each(backend):
    run = claim("c:dispatch")
    assert backend.runs_mark_dispatched([run.id, 10**12], now=T0) == [(run.id, run.trace_id, run.queue)]
    assert (fresh(run).dispatched_at, fresh(run).dispatches) == (T0, 1)


@pytestmark_db
def test_a_trigger_s_decision_is_recorded_once_and_counts_its_hits(backend):
    rule = make_rule(name="decided")
    shed = Decision(rule=rule, slot=T0, biz_key="", reason=Decision.Reason.SHED, details={"n": 1}, created_at=T0)
    assert backend.decision_record(shed, replace=False).pk is not None
    again = Decision(rule=rule, slot=T0, biz_key="", reason=Decision.Reason.PAUSED, details={"n": 2}, created_at=T0)
    stored = backend.decision_record(again, replace=False)
    assert (stored.id, stored.reason, stored.hits, stored.details) == (shed.id, Decision.Reason.SHED, 2, {"n": 1})

    event = Decision(rule=rule, slot=None, biz_key="e:1", reason=Decision.Reason.SHED, details={}, created_at=T0)
    backend.decision_record(event, replace=False)
    survivor = claim("c:survivor")
    coalesced = Decision(
        rule=rule,
        slot=None,
        biz_key="e:1",
        reason=Decision.Reason.COALESCED,
        details={"run_id": 1},
        survivor=survivor,
        created_at=T0,
    )
    stored = backend.decision_record(coalesced, replace=True)
    assert (stored.id, stored.reason, stored.hits, stored.survivor_id) == (
        event.id,
        Decision.Reason.COALESCED,
        2,
        survivor.id,
    )
    assert backend.decisions_delete([shed.id, 10**12]) == [("decided", Decision.Reason.SHED)]
    assert backend.decisions_delete([shed.id]) == []
    assert list(Decision.objects.values_list("id", flat=True)) == [event.id]


@pytestmark_db
def test_a_slot_is_held_once_rechecked_and_released(backend):
    rule = make_rule(name="held")
    fields = {"rule": rule, "slot": T0, "reason": "dependency", "source": "scheduler", "details": {}, "created_at": T0}
    hold = SlotHold(recheck_at=T0, deadline=T0 + timedelta(hours=1), **fields)
    assert backend.hold_record(hold) and hold.pk is not None
    assert not backend.hold_record(SlotHold(recheck_at=T0, deadline=T0, **fields))  # another tick's stands
    backend.hold_recheck(hold.pk, recheck_at=T0 + timedelta(minutes=1), checks=2, details={"why": "x"})
    row = SlotHold.objects.get(pk=hold.pk)
    assert (row.recheck_at, row.checks, row.details) == (T0 + timedelta(minutes=1), 2, {"why": "x"})
    backend.hold_release(hold.pk)
    assert not SlotHold.objects.exists()


@pytestmark_db
def test_rules_advance_writes_each_rule_s_slots(backend):
    rules = [make_rule(name=f"adv-{i}") for i in range(3)]
    for i, rule in enumerate(rules):
        rule.last_slot_at, rule.next_fire_at = T0 + timedelta(hours=i), T0 + timedelta(hours=i + 1)
    backend.rules_advance(rules)
    got = dict(TriggerRule.objects.filter(name__startswith="adv-").values_list("name", "next_fire_at"))
    assert got == {r.name: r.next_fire_at for r in rules}


@pytestmark_db
def test_report_reads_answer_on_this_database():
    claim("c:report")
    assert database.biz_key_unique_valid() is database.summarizes_in_sql()  # PostgreSQL's catalog says so
    estimate = database.table_estimate(TaskRun._meta.db_table)
    assert estimate is None if not database.summarizes_in_sql() else estimate >= 0


@pytestmark_db
def test_a_coalescing_run_is_created_and_replaced_only_while_pending_and_never_started(backend):
    rule = make_rule(name="coalescing")
    fields = {"skill": "harness.noop", "source": "api", "triggered_by": "t", "trigger_at": T0, "run_after": T0}
    head = TaskRun(biz_key="c:co:1", rule=rule, object_key="o", coalesces=True, **fields)
    backend.run_create(head)
    assert head.pk is not None
    with pytest.raises(IntegrityError):
        backend.run_create(TaskRun(biz_key="c:co:1", rule=rule, **fields))  # the key is taken
    with pytest.raises(IntegrityError):  # one pending run per object of a coalescing rule
        backend.run_create(TaskRun(biz_key="c:co:2", rule=rule, object_key="o", coalesces=True, **fields))
    PoolWaiter.objects.create(
        run=head,
        pool=Pool.objects.create(name="co", reason="t"),
        key="",
        fair_key="f",
        reason=PoolWaiter.Reason.CONCURRENCY,
        since=T0,
        checked_at=T0,
    )
    with transaction.atomic():
        assert backend.coalesce_pending(rule_id=rule.pk, object_key="other", now=T0) is None
        assert backend.coalesce_pending(rule_id=rule.pk, object_key="o", now=T0).id == head.id
    assert fresh(head).state == TaskRun.State.COALESCED and not PoolWaiter.objects.filter(run=head).exists()
    with transaction.atomic():
        assert backend.coalesce_pending(rule_id=rule.pk, object_key="o", now=T0) is None
    backend.run_note(head.pk, last_error="coalesced into run 9")
    assert fresh(head).last_error == "coalesced into run 9"


@pytestmark_db
def test_admission_takes_slots_records_waiters_and_hands_slots_over(backend):
    run = claim("c:admit")
    pool = Pool.objects.create(name="adm", reason="t", max_concurrency=1)
    PoolSlot.objects.create(pool=pool, key="", run=run, fence=0, worker="old", acquired_at=T0, expires_at=T0)
    backend.slots_drop_stale(run_id=run.id, fence=1)
    assert not PoolSlot.objects.filter(run=run).exists()

    waiting = Waiting(
        run_id=run.id,
        fence=0,
        pool_id=pool.id,
        key="k",
        fair_key="f",
        reason=PoolWaiter.Reason.CONCURRENCY,
        in_use=1,
        limit=1,
        until=None,
        run_after=T0 + timedelta(minutes=1),
        now=T0,
    )
    PoolSlot.objects.create(pool=pool, key="k", run=run, fence=1, worker="w1", acquired_at=T0, expires_at=T0)
    assert backend.admission_refused(waiting) == [(pool.id, "k")]
    assert backend.admission_refused(waiting) == []  # one waiter per run, updated
    waiter = PoolWaiter.objects.get(run=run)
    assert (waiter.reason, waiter.in_use, waiter.since) == (PoolWaiter.Reason.CONCURRENCY, 1, T0)
    assert fresh(run).run_after == T0 + timedelta(minutes=1) and not PoolSlot.objects.filter(run=run).exists()

    later = T0 + timedelta(minutes=2)
    backend.hand_over(pool_id=pool.id, key="k", runs=[(run.id, 0)], now=later, expires_at=later + timedelta(seconds=30))
    assert list(PoolSlot.objects.filter(run=run).values_list("fence", "worker")) == [(1, "")]
    assert fresh(run).run_after == later
    admit = Admit(run_id=run.id, fence=1, worker="w1", slots=(), held=True, now=later, expires_at=later + timedelta(5))
    backend.admit(admit)
    assert list(PoolSlot.objects.filter(run=run).values_list("worker", "expires_at")) == [("w1", admit.expires_at)]
    assert not PoolWaiter.objects.filter(run=run).exists()

    other = Pool.objects.create(name="adm2", reason="t")
    backend.admit(Admit(**{**admit.__dict__, "slots": ((other.id, ""),), "held": False}))
    assert PoolSlot.objects.filter(run=run).count() == 2
    assert backend.slots_expired_drop(now=later + timedelta(days=6), limit=1000) == 2


@pytestmark_db
def test_waiters_of_runs_that_no_longer_wait_are_forgotten(backend):
    pool = Pool.objects.create(name="forget", reason="t")
    waits, done = claim("c:waits-still"), claim("c:waits-no-more")
    for run in (waits, done):
        PoolWaiter.objects.create(
            run=run, pool=pool, key="", fair_key="f", reason=PoolWaiter.Reason.CONCURRENCY, since=T0, checked_at=T0
        )
    TaskRun.objects.filter(id=done.id).update(state=TaskRun.State.CANCELLED)
    assert backend.waiters_forget() == 1
    assert list(PoolWaiter.objects.values_list("run_id", flat=True)) == [waits.id]


@pytestmark_db
def test_approvals_move_only_runs_awaiting_approval_and_the_gate_only_unattempted_gated_ones(backend):
    parked = claim("c:parked", state=TaskRun.State.AWAITING_APPROVAL)
    pending = claim("c:not-parked")
    later = T0 + timedelta(minutes=3)
    assert not backend.approve(pending.id, now=later)
    assert backend.approve(parked.id, now=later)
    assert (fresh(parked).state, fresh(parked).run_after) == (TaskRun.State.PENDING, later)
    TaskRun.objects.filter(id=parked.id).update(state=TaskRun.State.AWAITING_APPROVAL)
    assert backend.reject(parked.id, now=later, message="no", kind="rejected")
    assert (fresh(parked).state, fresh(parked).last_error_kind) == (TaskRun.State.CANCELLED, "rejected")

    gated = [claim(f"c:gated:{i}", state=TaskRun.State.AWAITING_APPROVAL) for i in range(3)]
    TaskRun.objects.filter(id=gated[2].id).update(attempts=1)  # parked for an action: not the gate's
    gate = Gate(run_ids=tuple(r.id for r in gated), sources=("api",), approved_by="ops", now=later)
    assert backend.gate_release(Gate(**{**gate.__dict__, "run_ids": (gated[0].id,)}), run_after=later)
    assert not backend.gate_release(Gate(**{**gate.__dict__, "sources": ("scheduler",)}), run_after=later)
    assert (fresh(gated[0]).state, fresh(gated[0]).approved_by) == (TaskRun.State.PENDING, "ops")
    assert backend.gate_reject(gate, message="rejected by ops") == 1
    assert fresh(gated[1]).state == TaskRun.State.CANCELLED and fresh(gated[2]).state == TaskRun.State.AWAITING_APPROVAL


def running(key: str, backend: RunStore) -> tuple[TaskRun, Attempt]:
    run = claim(key)
    attempt = backend.lease_claim(run, worker="w1", now=T0, plain=False)
    assert attempt is not None
    return run, attempt


def failure(run: TaskRun, **over) -> Failure:
    fields = {"run_id": run.id, "error": ErrorRecord("timeout", "slow", "d1"), "first_failure_at": T0, "now": T0}
    return Failure(**{**fields, "fence": run.fence, **over})


@pytestmark_db
def test_retry_later_and_fail_write_only_under_the_fence_and_release_the_lease(backend):
    run, _ = running("c:retry", backend)
    assert not backend.retry_later(failure(run, fence=run.fence - 1), run_after=T0)
    assert backend.retry_later(failure(run), run_after=T0 + timedelta(minutes=1))
    row = fresh(run)
    assert (row.state, row.run_after, row.lease_owner, row.lease_expires_at, row.fence) == (
        TaskRun.State.WAITING_RETRY,
        T0 + timedelta(minutes=1),
        "",
        None,
        1,
    )
    assert (row.last_error, row.last_error_kind, row.first_failure_at) == ("slow", "timeout", T0)
    assert not backend.fail(failure(run))  # no longer running: the fence holds nothing

    taken, _ = running("c:expired", backend)
    assert backend.fail(failure(taken, take_lease=True))
    row = fresh(taken)
    assert (row.state, row.finish_at, row.fence, row.lease_owner) == (TaskRun.State.FAILED, T0, 2, "")


@pytestmark_db
def test_fail_from_a_state_is_a_compare_and_set_on_the_state(backend):
    run = claim("c:fail-from")
    assert not backend.fail(failure(run, fence=None, from_states=(TaskRun.State.AWAITING_APPROVAL,)))
    assert backend.fail(failure(run, fence=None, from_states=(TaskRun.State.PENDING,)))
    assert fresh(run).state == TaskRun.State.FAILED and fresh(run).fence == 0


@pytestmark_db
def test_attempt_end_writes_the_outcome_only_from_the_named_outcomes(backend):
    run, attempt = running("c:attempt-end", backend)
    end = AttemptEnd(run_id=run.id, number=1, outcome=Attempt.Outcome.FENCED, now=T0, error_kind="lease_lost")
    assert not backend.attempt_end(AttemptEnd(**{**end.__dict__, "only_from": (Attempt.Outcome.SUCCEEDED,)}))
    assert backend.attempt_end(AttemptEnd(**{**end.__dict__, "only_from": (Attempt.Outcome.RUNNING,)}))
    row = Attempt.objects.get(id=attempt.id)
    assert (row.outcome, row.finished_at, row.error_kind, row.error) == (Attempt.Outcome.FENCED, T0, "lease_lost", "")
    assert backend.attempt_end(
        AttemptEnd(run_id=run.id, number=1, outcome=Attempt.Outcome.FAILED, now=T0, error=ErrorRecord("k", "m", "d"))
    )
    row = Attempt.objects.get(id=attempt.id)
    assert (row.outcome, row.error_kind, row.error, row.error_digest) == (Attempt.Outcome.FAILED, "k", "m", "d")
    assert not backend.attempt_end(AttemptEnd(run_id=run.id, number=2, outcome=Attempt.Outcome.FAILED, now=T0))


@pytestmark_db
def test_parking_for_approval_records_one_proposal_and_for_budget_takes_the_attempt_back(backend):
    run, attempt = running("c:park", backend)
    proposal = Proposal(step="send", action="email", risk="high", args={"to": "x"}, expires_at=T0 + timedelta(hours=1))
    stale = TaskRun(id=run.id, fence=run.fence - 1)
    assert not backend.park_for_approval(stale, attempt, proposal, now=T0)
    assert backend.park_for_approval(run, attempt, proposal, now=T0)
    assert fresh(run).state == TaskRun.State.AWAITING_APPROVAL and fresh(run).lease_owner == ""
    assert Attempt.objects.get(id=attempt.id).outcome == Attempt.Outcome.PARKED
    assert ActionProposal.objects.get(run=run, step="send").args == {"to": "x"}

    waits, attempt = running("c:budget", backend)
    park = BudgetPark(until=T0 + timedelta(hours=1), message="budget spent", kind="budget")
    assert backend.park_for_budget(waits, attempt, park)
    row = fresh(waits)
    assert (row.state, row.run_after, row.attempts, row.last_error_kind) == (
        TaskRun.State.WAITING_RETRY,
        T0 + timedelta(hours=1),
        0,
        "budget",
    )
    assert not Attempt.objects.filter(run=waits).exists()
    assert not backend.park_for_budget(waits, attempt, park)  # no longer running


@pytestmark_db
def test_cancel_late_and_push_back_touch_only_a_run_not_started(backend):
    run = claim("c:late")
    assert backend.push_back(run.id, run_after=T0 + timedelta(seconds=1))
    assert fresh(run).run_after == T0 + timedelta(seconds=1) and fresh(run).dispatched_at is None
    assert backend.cancel_late(run.id, now=T0, message="too late", kind="start_window")
    assert (fresh(run).state, fresh(run).last_error) == (TaskRun.State.CANCELLED, "too late")
    started, _ = running("c:started", backend)
    assert not backend.cancel_late(started.id, now=T0, message="too late", kind="start_window")
    assert not backend.push_back(started.id, run_after=T0)


@pytestmark_db
def test_an_expiring_lease_is_found_only_under_its_fence_once_expired_and_its_slots_dropped(backend):
    run, _ = running("c:expiring", backend)
    expiry = fresh(run).lease_expires_at
    with transaction.atomic():
        assert backend.expiring(run.id, fence=run.fence, now=expiry) is None  # not yet
        assert backend.expiring(run.id, fence=run.fence + 1, now=expiry + timedelta(seconds=1)) is None
        assert backend.expiring(run.id, fence=run.fence, now=expiry + timedelta(seconds=1)).id == run.id
    pool = Pool.objects.create(name="drop", reason="test")
    PoolSlot.objects.create(pool=pool, key="", run=run, fence=run.fence, worker="w1", acquired_at=T0, expires_at=T0)
    backend.slots_drop(run_id=run.id, fence=run.fence + 1)
    assert PoolSlot.objects.filter(run=run).exists()
    backend.slots_drop(run_id=run.id, fence=run.fence)
    assert not PoolSlot.objects.filter(run=run).exists()


@pytestmark_db
def test_operator_writes_are_compare_and_sets_on_what_was_read(backend):
    failed = claim("c:replay")
    assert backend.fail(failure(failed, fence=None, from_states=(TaskRun.State.PENDING,)))
    later = T0 + timedelta(hours=1)
    assert not backend.replay(Replay(run_id=failed.id, from_state=TaskRun.State.WAITING_RETRY, now=later))
    assert backend.replay(Replay(run_id=failed.id, from_state=TaskRun.State.FAILED, now=later))
    row = fresh(failed)
    assert (row.state, row.run_after, row.finish_at, row.first_failure_at) == (TaskRun.State.PENDING, later, None, None)

    assert not backend.cancel(failed.id, from_state=TaskRun.State.WAITING_RETRY, now=later)
    assert backend.cancel(failed.id, from_state=TaskRun.State.PENDING, now=later)
    assert fresh(failed).state == TaskRun.State.CANCELLED

    run, attempt = running("c:force", backend)
    release = ForceRelease(run_id=run.id, fence=run.fence, now=later, message="stuck", error_kind="lease_lost")
    assert not backend.force_release(ForceRelease(**{**release.__dict__, "fence": run.fence + 1}))
    assert backend.force_release(release)
    row = fresh(run)
    assert (row.state, row.fence, row.lease_owner, row.run_after) == (TaskRun.State.WAITING_RETRY, 2, "", later)
    assert Attempt.objects.get(id=attempt.id).outcome == Attempt.Outcome.FENCED
    assert not backend.force_release(release)


@pytestmark_db
def test_keyed_leases_are_taken_renewed_released_and_forced_by_owner_and_token(backend):
    ttl = timedelta(seconds=30)
    held = backend.keyed_lease_acquire(key="object:k", owner="a", expires_at=T0 + ttl, now=T0, run_id=None)
    assert held is not None and held.token == 1
    assert backend.keyed_lease_acquire(key="object:k", owner="b", expires_at=T0 + ttl, now=T0, run_id=None) is None
    renewed = backend.keyed_lease_renew(held, expires_at=T0 + 2 * ttl, now=T0 + ttl / 2)
    assert renewed is not None and renewed.expires_at == T0 + 2 * ttl
    assert backend.keyed_lease_release(renewed) and not backend.keyed_lease_release(renewed)
    again = backend.keyed_lease_acquire(key="object:k", owner="b", expires_at=T0 + ttl, now=T0, run_id=None)
    assert again is not None and again.token == 2
    lease = Lease.objects.get(key="object:k")
    assert not backend.keyed_lease_force_release(lease.id, owner="a", token=again.token, now=T0)
    assert backend.keyed_lease_force_release(lease.id, owner="b", token=again.token, now=T0)
    assert backend.keyed_lease_renew(again, expires_at=T0 + ttl, now=T0) is None  # fenced out


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


# --- only the store writes run tables --------------------------------------------------------


def test_the_write_contract_fails_on_a_planted_orm_write_outside_the_store(tmp_path):
    package = tmp_path / "pkg"
    (package / "store").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text("TaskRun = Lease = Other = None\n")
    (package / "store" / "__init__.py").write_text(
        "from pkg.models import TaskRun\n\ndef fail():\n    TaskRun.objects.filter(id=1).update(state='failed')\n"
    )
    (package / "planted.py").write_text(
        textwrap.dedent(
            """
            from pkg.models import Other, TaskRun as Run

            def cancel(run_id):
                Run.objects.filter(id=run_id).exclude(state="done").update(state="cancelled")

            def other():
                Other.objects.filter(id=1).delete()  # not a run table

            def kept():
                runs = Run.objects.filter(id=1)
                runs.update(state="x")
            """
        )
    )
    (package / "fine.py").write_text("from pkg.models import TaskRun\n\ndef read():\n    return TaskRun.objects\n")
    (package / "listed.py").write_text("from pkg.models import Lease\n\ndef take():\n    Lease.objects.create()\n")
    (tmp_path / "setup.cfg").write_text(
        textwrap.dedent(
            """
            [importlinter]
            root_package = pkg
            contract_types =
                forbidden_writes: tests.support.ormwrites.ForbiddenWritesContract

            [importlinter:contract:writes]
            name = only the store writes run tables
            type = forbidden_writes
            models_module = pkg.models
            models =
                TaskRun
                Lease
            allowed_importers =
                pkg.store
            ignore =
                pkg.listed:Lease
                pkg.fine:TaskRun
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--config", "setup.cfg"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stdout + done.stderr
    broken = done.stdout.split("Broken contracts")[-1]
    assert "pkg.planted:5 writes TaskRun" in broken and "pkg.planted:12 writes TaskRun" in broken
    assert "ignored pkg.fine:TaskRun, which writes nothing now" in broken  # the list only shrinks
    assert "pkg.store" not in broken and "pkg.listed" not in broken and "Other" not in broken
