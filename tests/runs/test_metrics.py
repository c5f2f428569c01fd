"""Prometheus /metrics (runs/desk/metrics.py): read back with prometheus_client's own parser, the values
match the database after a known workload; a scrape costs a fixed number of queries; the endpoint
is off without a token and refuses a wrong one."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from deadletters.models import Alert, DeadLetter
from runs.desk.metrics import LATENCY_BUCKETS, QUEUE_DELAY_BUCKETS, SCRAPE_QUERIES, metrics_registry
from runs.engine.claims import run_claim
from runs.engine.executor import run_execute
from runs.engine.retention import decision_sweep
from runs.models import Attempt, Decision, PoolSlot, PoolWaiter, SchedulerTick, TaskRun
from tasks.models import EventMetric, Pool, TriggerRule
from tasks.triggers.events import event_metric_count
from tasks.triggers.scheduler import scheduler_tick
from tasks.triggers.work import work_for_operator
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(minutes=10)
TOKEN = "metrics-token-0123456789abcdef"
POLICY = {"max_attempts": 1, "lease_ttl_seconds": 60}


def daily_rule(name: str, skill: str = "harness.noop", **params) -> TriggerRule:
    return make_rule(name, kind="cron", cron="0 9 * * *", skill=skill, params=params, max_attempts=1)


def claim(rule: TriggerRule, minute: int, *, now: datetime = T0) -> TaskRun:
    work = work_for_operator(rule, actor="tests", now=now, slot=T0 + timedelta(minutes=minute))
    return run_claim(work, now=now, dispatch=False).run


def execute(run: TaskRun, at: datetime) -> str:
    return run_execute(run_id=run.id, worker="w1", clock=lambda: at, rand=lambda: 0.5).status


def workload() -> None:
    """3 succeeded runs (2 s, 2 s, 40 s from trigger), a dedupe hit, a run failed for good, a due one."""
    ok = daily_rule("metrics-ok")
    bad = daily_rule("metrics-bad", skill="harness.fail", error_kind="invalid_param")
    runs = [claim(ok, minute) for minute in range(3)]
    claim(ok, 0)  # a dedupe hit on the first
    assert [execute(r, T0 + timedelta(seconds=s)) for r, s in zip(runs, (2, 2, 40), strict=True)] == ["succeeded"] * 3
    assert execute(claim(bad, 0), T0 + timedelta(seconds=0.3)) == "failed"
    claim(ok, 5, now=NOW - timedelta(seconds=30))  # due, waiting 30 s
    SchedulerTick.objects.create(name="scheduler", last_tick_at=NOW - timedelta(seconds=4))
    for outcome in ("accepted", "accepted", "bad_signature"):
        event_metric_count("orders", outcome, now=NOW)
    pool = Pool.objects.create(name="gpu", reason="tests", max_concurrency=2)
    PoolSlot.objects.create(
        pool=pool, run=runs[0], fence=9, worker="w9", acquired_at=NOW, expires_at=NOW + timedelta(minutes=1)
    )


def scrape(clock=lambda: NOW) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label items: value}} as Prometheus would read the page."""
    text = generate_latest(metrics_registry(clock)).decode()
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def test_the_parsed_page_matches_the_database_after_a_known_workload():
    workload()

    m = scrape()

    for row in TaskRun.objects.values("rule_name", "state").distinct():
        n = TaskRun.objects.filter(**row).count()
        assert m["harness_runs"][(("rule", row["rule_name"]), ("state", row["state"]))] == n
    assert m["harness_runs"][(("rule", "metrics-ok"), ("state", "succeeded"))] == 3
    assert m["harness_dedupe_hits_total"][(("rule", "metrics-ok"),)] == 1
    assert m["harness_runs_due"][()] == 1 and m["harness_oldest_due_run_age_seconds"][()] == 30

    started = TaskRun.objects.filter(start_at__isnull=False)
    delays = [(r.start_at - r.trigger_at).total_seconds() for r in started]
    for bound in QUEUE_DELAY_BUCKETS:
        got = m["harness_run_queue_delay_seconds_bucket"][(("le", repr(float(bound))),)]
        assert got == sum(d <= bound for d in delays), bound
    assert m["harness_run_queue_delay_seconds_count"][()] == len(delays) == 4
    assert m["harness_run_queue_delay_seconds_sum"][()] == pytest.approx(sum(delays)) == 44.3
    latencies = [(r.finish_at - r.trigger_at).total_seconds() for r in started.filter(state="succeeded")]
    for bound in LATENCY_BUCKETS:
        got = m["harness_run_latency_seconds_bucket"][(("le", repr(float(bound))),)]
        assert got == sum(d <= bound for d in latencies), bound
    assert m["harness_run_latency_seconds_bucket"][(("le", "+Inf"),)] == 3
    assert m["harness_run_latency_seconds_sum"][()] == pytest.approx(44.0)

    for row in Attempt.objects.values("outcome", "error_kind").distinct():
        n = Attempt.objects.filter(**row).count()
        assert m["harness_attempts_total"][(("error_kind", row["error_kind"]), ("outcome", row["outcome"]))] == n
    assert m["harness_attempts_total"][(("error_kind", "invalid_param"), ("outcome", "failed"))] == 1

    ticket = DeadLetter.objects.get()
    assert m["harness_deadletters_open"] == {(("error_kind", "invalid_param"), ("rule", "metrics-bad")): 1}
    assert m["harness_deadletters_total"] == {(("rule", "metrics-bad"),): 1}
    assert m["harness_deadletters_new_24h"] == {(("rule", "metrics-bad"),): 1}
    assert ticket.rule_name == "metrics-bad"

    assert m["harness_scheduler_tick_age_seconds"][()] == 4
    assert m["harness_oldest_unclaimed_slot_age_seconds"] == {
        (("rule", r.name),): (NOW - r.next_fire_at).total_seconds()
        for r in TriggerRule.objects.filter(next_fire_at__lte=NOW).order_by("next_fire_at")[:1]
    } or {(("rule", ""),): 0.0}

    assert m["harness_events_total"] == {
        (("outcome", o), ("source", s)): n
        for s, o, n in EventMetric.objects.values_list("source_name", "outcome", "count")
    }
    assert m["harness_event_refusals_total"] == {(("reason", "bad_signature"), ("source", "orders")): 1}

    pending = {
        (("channel", c), ("state", "pending")): Alert.objects.filter(channel__name=c, state="pending").count()
        for c in Alert.objects.filter(channel__isnull=False, state="pending").values_list("channel__name", flat=True)
    }
    assert {k: v for k, v in m.get("harness_alert_outbox", {}).items() if ("state", "pending") in k} == pending

    pools = Pool.objects.all()
    assert m["harness_pool_slots_in_use"] == {
        (("pool", p.name),): PoolSlot.objects.filter(pool=p, expires_at__gt=NOW).count() for p in pools
    }
    assert m["harness_pool_slots_in_use"][(("pool", "gpu"),)] == 1
    assert m["harness_pool_limit"][(("pool", "gpu"),)] == 2
    assert m["harness_pool_saturation"][(("pool", "gpu"),)] == 0.5
    waiting = {(("pool", p.name),): PoolWaiter.objects.filter(pool=p).count() for p in pools}
    assert m["harness_pool_waiting_runs"] == waiting


def test_a_scrape_costs_the_same_few_queries_whatever_the_size_of_the_tables():
    workload()
    with CaptureQueriesContext(connection) as small:
        scrape()
    for i in range(5):
        rule = daily_rule(f"more-{i}")
        for minute in range(4):
            execute(claim(rule, minute), T0 + timedelta(seconds=minute))
        Pool.objects.create(name=f"pool-{i}", reason="tests", max_concurrency=1)
        event_metric_count(f"source-{i}", "stale_timestamp", now=NOW)
    with CaptureQueriesContext(connection) as large:
        scrape()

    assert len(small) == len(large) == SCRAPE_QUERIES, [q["sql"][:120] for q in large.captured_queries]


def test_an_empty_deployment_scrapes_cleanly():
    m = scrape()
    assert m["harness_run_queue_delay_seconds_count"][()] == 0
    assert m["harness_scheduler_tick_age_seconds"][()] == -1
    assert m["harness_oldest_unclaimed_slot_age_seconds"] == {(("rule", ""),): 0.0}


def test_metrics_are_off_without_a_token_and_refuse_a_wrong_one(client, settings):
    settings.HARNESS = {**settings.HARNESS, "METRICS_TOKEN": ""}
    off = client.get("/metrics")
    assert off.status_code == 404 and off.json()["type"].endswith(":metrics-disabled")

    settings.HARNESS = {**settings.HARNESS, "METRICS_TOKEN": TOKEN}
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", headers={"Authorization": "Bearer " + TOKEN[:-1] + "x"})
    assert wrong.status_code == 401 and wrong["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", headers={"Authorization": "Basic " + TOKEN}).status_code == 401
    assert client.post("/metrics", headers={"Authorization": "Bearer " + TOKEN}).status_code == 405

    workload()
    ok = client.get("/metrics", headers={"Authorization": "Bearer " + TOKEN})
    assert ok.status_code == 200 and ok["Content-Type"].startswith("text/plain")
    names = {f.name for f in text_string_to_metric_families(ok.content.decode())}
    assert {"harness_runs", "harness_run_queue_delay_seconds", "harness_pool_saturation"} <= names

    openmetrics = client.get(
        "/metrics", headers={"Authorization": "Bearer " + TOKEN, "Accept": "application/openmetrics-text"}
    )
    assert openmetrics["Content-Type"].startswith("application/openmetrics-text")
    assert openmetrics.content.decode().rstrip().endswith("# EOF")


def test_the_separate_metrics_server_answers_without_a_token(settings):
    from runs.management.commands.metrics_serve import metrics_app

    workload()
    seen = {}

    def start_response(status, headers):
        seen["status"], seen["headers"] = status, dict(headers)

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": ""}
    body = b"".join(metrics_app()(environ, start_response))
    assert seen["status"].startswith("200")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert {s.labels["rule"] for s in families["harness_runs"].samples} == {"metrics-ok", "metrics-bad"}


# Big enough that a per-row query or a scan would show in the printed time; the scale itself is
# tests/bench's job (a scrape of 100,000 runs: about 0.3 s).
BIG = 20_000


def test_a_scrape_of_many_runs_is_the_same_queries_and_prints_its_time():
    now = timezone.now()
    states = ["succeeded"] * 7 + ["failed", "pending", "waiting_retry"]
    runs = []
    for i in range(BIG):
        trigger = now - timedelta(hours=48) * (i / BIG)
        state = states[i % len(states)]
        started = trigger + timedelta(seconds=1 + i % 5) if state in ("succeeded", "failed") else None
        runs.append(
            TaskRun(
                biz_key=f"bulk:{i}",
                rule_name=f"rule-{i % 20}",
                skill="harness.noop",
                source="scheduler",
                trigger_at=trigger,
                run_after=trigger,
                state=state,
                start_at=started,
                finish_at=started + timedelta(seconds=2) if started else None,
                dedupe_hits=1 if i % 4 == 0 else 0,
                attempts=1 if started else 0,
            )
        )
    TaskRun.objects.bulk_create(runs, batch_size=5000)
    scrape(clock=lambda: now)  # warm up (imports, plans), not measured

    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        m = scrape(clock=lambda: now)
        elapsed = time.perf_counter() - started

    assert len(queries) == SCRAPE_QUERIES
    assert sum(m["harness_runs"].values()) == BIG
    assert m["harness_run_queue_delay_seconds_count"][()] == BIG * 8 // 10
    assert m["harness_run_latency_seconds_bucket"][(("le", "+Inf"),)] == BIG * 7 // 10
    print(
        f"\n/metrics scrape with {BIG:,} runs on {connection.vendor}: {elapsed * 1000:.0f} ms, {len(queries)} queries"
    )


def test_decisions_by_reason_and_missed_slots_are_counters_that_retention_never_takes_back():
    # A 3-minute outage of an every-minute rule without catch-up: the tick (in whichever process)
    # records its slots as missed; the counters read the database, so every process answers the same.
    rule = make_rule(
        "every-minute", kind="cron", cron="* * * * *", catchup=TriggerRule.CatchUp.NONE, due=T0 - timedelta(minutes=3)
    )
    scheduler_tick(now=T0 + timedelta(seconds=1))
    missed = Decision.objects.filter(rule=rule, reason=Decision.Reason.MISSED).count()
    assert missed == 3
    Decision.objects.create(
        rule=rule, slot=T0 + timedelta(hours=1), reason=Decision.Reason.OUTSIDE_WINDOW, created_at=T0
    )
    before = scrape()
    assert before["harness_missed_slots_total"] == {(("rule", "every-minute"),): 3.0}
    assert before["harness_decisions_total"][(("reason", "missed"), ("rule", "every-minute"))] == 3.0
    assert before["harness_decisions_total"][(("reason", "outside_window"), ("rule", "every-minute"))] == 1.0

    # Retention deletes the decisions; the counters stay where they were, and keep growing after.
    assert decision_sweep(now=T0 + timedelta(days=400), days=30) == 4
    Decision.objects.create(rule=rule, slot=T0 + timedelta(hours=2), reason=Decision.Reason.MISSED, created_at=NOW)
    after = scrape()
    assert after["harness_missed_slots_total"] == {(("rule", "every-minute"),): 4.0}
    assert after["harness_decisions_total"][(("reason", "outside_window"), ("rule", "every-minute"))] == 1.0
