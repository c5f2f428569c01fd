# ruff: noqa: F811  (pytest fixtures imported from tests.support.desk are redefined as arguments)
"""How many SQL statements the hot paths cost: the claim, one execution, the tick per due
slot, and every operator page. Counts, not timings: a regression shows up here, on both databases.

Transaction control (BEGIN/COMMIT) is not a statement Django captures; savepoints are.
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from deadletters.models import Alert
from harness_site.broker import DISPATCHED_HEADER, RUN_HEADER, SENT_AT_HEADER
from runs.engine import executor
from runs.engine.claims import Work, run_claim
from runs.engine.leases import LeaseRenewer, _renewals
from runs.engine.store import store
from runs.models import Decision, TaskRun
from tasks.models import TriggerRule
from tasks.triggers.scheduler import scheduler_tick
from tests.support.desk import make_failed_run, oncall, oncall_client  # noqa: F401
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def work(key: str, **over) -> Work:
    fields = {"skill": "harness.noop", "source": "api", "triggered_by": "tests", "payload": {"params": {}}}
    return Work(biz_key=key, **{**fields, **over})


def statements(fn) -> int:
    with CaptureQueriesContext(connection) as queries:
        fn()
    return len(queries)


# --- claim ------------------------------------------------------------------------------------------


def test_a_claim_is_one_statement_with_its_dispatch_mark_and_a_dedupe_hit_two():
    # INSERT ... ON CONFLICT (biz_key) DO NOTHING RETURNING, dispatched_at written by the INSERT itself.
    assert statements(lambda: run_claim(work("q:1"), now=T0)) == 1
    run = TaskRun.objects.get(biz_key="q:1")
    assert run.dispatched_at == T0
    # The INSERT that conflicts, then one UPDATE ... RETURNING counting the hit and reading the run.
    with CaptureQueriesContext(connection) as queries:
        hit = run_claim(work("q:1"), now=T0 + timedelta(seconds=1))
    assert len(queries) == 2
    assert not hit.created and hit.run.id == run.id and hit.run.dedupe_hits == 1
    assert TaskRun.objects.get(biz_key="q:1").dedupe_hits == 1


def statements_with_their_transaction(fn) -> list[tuple[str, bool]]:
    """Each statement fn runs, with whether it ran inside a transaction (Django's execute_wrapper)."""
    seen = []

    def record(execute, sql, params, many, context):
        seen.append((sql.split()[0].upper(), not connection.get_autocommit()))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        fn()
    return seen


@pytest.mark.django_db(transaction=True)
def test_a_claim_outside_any_transaction_is_one_committed_insert_and_its_message(purged_broker):
    """A caller with nothing else to write (`harness fire`, the benchmark) needs no transaction: the
    INSERT commits on its own and the message goes once it has."""
    from harness_site.celery import app

    assert statements_with_their_transaction(lambda: run_claim(work("q:bare"), now=T0)) == [("INSERT", False)]
    run = TaskRun.objects.get(biz_key="q:bare")
    assert [h[RUN_HEADER] for h in queued_messages(app)] == [run.id]


@pytest.mark.django_db(transaction=True)
def test_a_coalescing_claim_outside_any_transaction_writes_its_rows_in_one_of_its_own(purged_broker):
    """Replacing an object's pending run is several writes (the new run, the old one coalesced, its
    decision): they must stand or fall together, so the claim opens the transaction itself."""
    from harness_site.celery import app

    rule = make_rule("q-coalesce", kind="event")
    over = {"rule": rule, "object_key": "order:1", "coalesce_window": timedelta(0)}
    key = f"rule/{rule.pk}/event/order-1:"
    first = run_claim(work(key + "v1", **over), now=T0)
    seen = statements_with_their_transaction(lambda: run_claim(work(key + "v2", **over), now=T0))
    writes = [(verb, inside) for verb, inside in seen if verb != "BEGIN"]  # SQLite's BEGIN IMMEDIATE opens it
    assert len(writes) > 2 and all(inside for _verb, inside in writes), seen
    survivor = TaskRun.objects.get(biz_key=key + "v2")
    assert TaskRun.objects.get(pk=first.run.pk).state == TaskRun.State.COALESCED
    assert Decision.objects.filter(reason=Decision.Reason.COALESCED, survivor=survivor).exists()
    assert [h[RUN_HEADER] for h in queued_messages(app)] == [first.run.id, survivor.id]


# --- execute ----------------------------------------------------------------------------------------

# PostgreSQL: the run read (one prebuilt SELECT); the claim, which in the same statement locks the
# run's pools (none limits anything), inserts the attempt and the global pool's slot and clears the
# waiter; the success with the attempt's outcome and the slot released. No transaction around them.
# SQLite: the read; one transaction (a savepoint pair here, inside the test's transaction) for
# admission and the lease (its pools, the slot rows already there, the global pool's slot, the
# waiter cleared, the claim and its attempt row); the success (a savepoint pair and two); the slot
# released with its waiter check (three).
EXECUTE_STATEMENTS = {"postgresql": 2, "sqlite": 16}


def test_one_execution_of_a_noop_run_costs_a_fixed_number_of_statements():
    run = run_claim(work("q:exec"), now=timezone.now(), dispatch=False).run

    with CaptureQueriesContext(connection) as queries:
        outcome = executor.run_execute(run_id=run.id, worker="w", clock=timezone.now)

    assert outcome.status == "succeeded"
    assert len(queries) == EXECUTE_STATEMENTS[connection.vendor], "\n".join(q["sql"][:150] for q in queries)
    run.refresh_from_db()
    [attempt] = run.attempt_set.all()
    assert (run.state, run.attempts, run.fence, run.lease_owner) == ("succeeded", 1, 1, "")
    assert (attempt.outcome, attempt.fence, attempt.finished_at) == ("succeeded", 1, run.finish_at)


def test_a_run_starts_no_thread_of_its_own_for_its_lease():
    import threading

    run = run_claim(work("q:thread"), now=timezone.now(), dispatch=False).run
    before = {t.name for t in threading.enumerate()}
    executor.run_execute(run_id=run.id, worker="w", clock=timezone.now)
    started = {t.name for t in threading.enumerate()} - before
    assert started <= {"lease-renewals"}, started  # the process's one renewal thread, at most


def test_one_renewal_pass_renews_every_lease_the_process_holds_in_one_statement():
    now = timezone.now()
    renewers = []
    for i in range(50):
        run = run_claim(work(f"q:renew:{i}"), now=now, dispatch=False).run
        assert store().lease_claim(run, worker="w", now=now, plain=False) is not None
        renewers.append(LeaseRenewer(run_id=run.id, fence=run.fence, ttl=timedelta(seconds=60), clock=lambda: now))

    with CaptureQueriesContext(connection) as queries:
        _renewals.renew(renewers)

    assert len(queries) == {"postgresql": 1, "sqlite": 2 + 2 * 50}[connection.vendor]  # SQLite: one transaction
    assert not any(r.lost.is_set() for r in renewers)
    expires = set(TaskRun.objects.filter(biz_key__startswith="q:renew:").values_list("lease_expires_at", flat=True))
    assert expires == {now + timedelta(seconds=60)}


# --- tick -------------------------------------------------------------------------------------------


def due_rules(n: int, *, prefix: str, due: datetime) -> None:
    for i in range(n):
        make_rule(f"{prefix}-{i}", interval_seconds=86400, due=due)


def tick_statements(now: datetime) -> tuple[int, int]:
    with transaction.atomic():
        with CaptureQueriesContext(connection) as queries:
            result = scheduler_tick(now=now)
    return len(queries), result.claimed


def test_a_tick_costs_the_same_statements_for_one_due_slot_as_for_thirty():
    tick_statements(T0 - timedelta(hours=1))  # the tick's own row exists from now on
    due_rules(1, prefix="one", due=T0)
    one, claimed = tick_statements(T0 + timedelta(milliseconds=10))
    assert claimed == 1
    due_rules(30, prefix="many", due=T0 + timedelta(hours=2))
    many, claimed = tick_statements(T0 + timedelta(hours=2, milliseconds=10))
    assert claimed == 30
    # Per batch of rules: select them, one INSERT for every slot, one next_fire_at UPDATE; then the
    # holds and the tick's own row. The rules' own first slots dedupe nothing.
    assert many == one
    assert TaskRun.objects.filter(rule__name__startswith="many-", dispatched_at__isnull=False).count() == 30


def test_a_ticks_missed_slots_are_written_in_one_insert_whatever_their_number():
    # 30 rules, each with three slots missed beyond the catch-up window (catch-up "none"): 90 decisions.
    due_rules(30, prefix="late", due=T0 - timedelta(days=2))
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        result = scheduler_tick(now=T0 + timedelta(milliseconds=10))
    inserts = [q["sql"] for q in queries if q["sql"].replace('"', "").startswith("INSERT INTO runs_decision")]
    assert len(inserts) == 1, "one INSERT for the batch's decisions"
    assert (result.decisions, result.claimed) == (90, 0)
    assert Decision.objects.filter(reason=Decision.Reason.MISSED, rule__name__startswith="late-").count() == 90
    # Every missed slot's alert went with its decision (the outbox), none for a slot decided before.
    assert Alert.objects.filter(kind="slot_missed").count() == 90
    with transaction.atomic():
        TriggerRule.objects.filter(name__startswith="late-").update(next_fire_at=T0 - timedelta(days=2))
        again = scheduler_tick(now=T0 + timedelta(milliseconds=20))
    assert again.decisions == 0 and Alert.objects.filter(kind="slot_missed").count() == 90


def queued_messages(app) -> list[dict]:
    """Take every message off the execute queue of the configured broker; their headers."""
    out = []
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue("celery")
        try:
            while True:
                try:
                    message = queue.get(block=False)
                except queue.Empty:
                    return out
                out.append(message.headers)
                message.ack()
        finally:
            queue.close()


def test_a_ticks_messages_leave_through_one_producer_with_the_same_statements_for_one_slot_as_thirty(
    purged_broker, django_capture_on_commit_callbacks, monkeypatch
):
    from harness_site.celery import app

    # A spy on the real pool: counts the producers taken from it (send_task passes ours on as given).
    acquired = []
    real_acquire = app.producer_or_acquire

    def acquire(producer=None):
        if producer is None:
            acquired.append(1)
        return real_acquire(producer)

    monkeypatch.setattr(app, "producer_or_acquire", acquire)

    def tick(now: datetime) -> tuple[int, int, list[dict]]:
        acquired.clear()
        with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as queries:
            with transaction.atomic():
                scheduler_tick(now=now)
        return len(queries), len(acquired), queued_messages(app)

    tick(T0 - timedelta(hours=1))  # the tick's own row exists from now on
    due_rules(1, prefix="one", due=T0)
    one, producers_one, sent_one = tick(T0 + timedelta(milliseconds=10))
    due_rules(30, prefix="many", due=T0 + timedelta(hours=2))
    many, producers_many, sent_many = tick(T0 + timedelta(hours=2, milliseconds=10))

    assert many == one
    assert (producers_one, producers_many) == (1, 1), "one producer for the batch's messages"
    assert len(sent_one) == 1 and len(sent_many) == 30
    # Delivered on the real broker, each with its run, its dispatched_at and its own trace.
    runs = {r.id: r for r in TaskRun.objects.filter(rule__name__startswith="many-")}
    assert {h[RUN_HEADER] for h in sent_many} == set(runs)
    for headers in sent_many:
        run = runs[headers[RUN_HEADER]]
        assert headers[DISPATCHED_HEADER] == run.dispatched_at.timestamp()
        assert headers["traceparent"].split("-")[1] == run.trace_id
        assert SENT_AT_HEADER in headers


# --- operator pages ---------------------------------------------------------------------------------


def runs_in_bulk(n: int, *, start: int = 0) -> None:
    now = timezone.now()
    states = ["succeeded", "succeeded", "failed", "pending", "cancelled"]
    TaskRun.objects.bulk_create(
        TaskRun(
            biz_key=f"bulk:{i}",
            rule_name=f"rule-{i % 3}",
            skill="harness.noop",
            source="scheduler",
            trigger_at=now - timedelta(minutes=i),
            run_after=now - timedelta(minutes=i),
            state=states[i % len(states)],
            last_error_kind="timeout" if i % 5 == 2 else "",
        )
        for i in range(start, start + n)
    )


PAGES = [
    ("admin:index", {}),
    ("harness-dashboard", {}),
    ("admin:runs_taskrun_changelist", {}),
    ("admin:runs_taskrun_changelist", {"state__exact": "failed"}),
    ("admin:runs_taskrun_changelist", {"q": "bulk:7"}),  # a whole key: its run alone
    ("admin:runs_taskrun_changelist", {"q": "ulk:1"}),  # part of keys: every key containing it
    ("admin:runs_taskrun_changelist", {"q": "RUN_ID"}),
    ("admin:deadletters_deadletter_changelist", {}),
]


def page_statements(client, name: str, params: dict) -> int:
    params = {k: (str(TaskRun.objects.get(biz_key="bulk:7").id) if v == "RUN_ID" else v) for k, v in params.items()}
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse(name), params)
    assert response.status_code == 200, (name, params, response.status_code)
    return len(queries)


@pytest.mark.parametrize(("name", "params"), PAGES, ids=[f"{n}{p}" for n, p in PAGES])
def test_an_operator_page_costs_the_same_statements_with_ten_times_the_runs(oncall_client, name, params):
    runs_in_bulk(20)
    for i in range(3):
        make_failed_run(f"dl:{i}", now=timezone.now())
    oncall_client.get(reverse(name))  # warm: session, permissions, content types
    few = page_statements(oncall_client, name, params)
    runs_in_bulk(180, start=20)
    for i in range(3, 30):
        make_failed_run(f"dl:{i}", now=timezone.now())
    assert page_statements(oncall_client, name, params) == few
