"""Every trigger kind assembles its run the same way (tasks/triggers/work.py): the run carries the
rule's executing identity, its object key and its snapshot, whoever or whatever triggered it
(invariant 8, and per-object serialization). One test per trigger kind, through its real entry point."""

import json
import os
import time
from datetime import UTC, date, datetime, timedelta

import pytest

from runs.models import TaskRun
from tasks.jobs import event_intake_task
from tasks.models import ServiceIdentity, TriggerRule, TriggerSource
from tasks.rules import events, signatures
from tasks.triggers.operator import rule_backfill, rule_backfill_plan, rule_run_now
from tasks.triggers.scheduler import scheduler_tick
from tasks.triggers.sensors import sensor_scan
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)
SECRET_ENV = "HARNESS_SECRET_WORK_TEST"
SECRET = "s3cret-for-work-tests-0123456789"


@pytest.fixture
def identity():
    return ServiceIdentity.objects.create(name="svc-reports", allowed_skills=["harness.noop"])


def scheduled_rule(identity, name="accounts", **over) -> TriggerRule:
    """Every minute in Berlin for account 42, run as `identity`, saved a minute before T0."""
    fields = {
        "timezone": "Europe/Berlin",
        "params": {"account": "42", "threshold": 5},
        "snapshot_fields": ["threshold"],
        "object_key_template": "account-{account}",
        "identity": identity,
        **over,
    }
    return make_rule(name, now=T0 - timedelta(minutes=1), **fields)


def event_rule(identity, name="invoices") -> TriggerRule:
    return make_rule(
        name,
        now=T0,
        kind=TriggerRule.Kind.EVENT,
        timezone="Europe/Berlin",
        params={"threshold": 5},
        snapshot_fields=["threshold"],
        object_key_template="invoice-{object_id}",
        identity=identity,
    )


def assert_carries_the_rule(run: TaskRun, *, object_key: str) -> None:
    assert run.identity == "svc-reports"
    assert run.object_key == object_key
    assert run.payload["snapshot"] == {"threshold": 5}


def test_a_tick_run_carries_the_rule_identity_object_key_and_snapshot(identity):
    rule = scheduled_rule(identity)
    TriggerRule.objects.filter(pk=rule.pk).update(next_fire_at=T0)
    scheduler_tick(now=T0)
    run = TaskRun.objects.get(rule=rule)
    assert (run.source, run.triggered_by) == (TaskRun.Source.SCHEDULER, "scheduler")
    assert_carries_the_rule(run, object_key="account-42")


def test_a_heartbeat_run_carries_the_rule_identity_object_key_and_snapshot(identity):
    rule = scheduled_rule(identity, name="pinger", kind=TriggerRule.Kind.HEARTBEAT)
    TriggerRule.objects.filter(pk=rule.pk).update(next_fire_at=T0)
    scheduler_tick(now=T0)
    run = TaskRun.objects.get(rule=rule)
    assert run.source == TaskRun.Source.HEARTBEAT
    assert_carries_the_rule(run, object_key="account-42")


@pytest.mark.parametrize("trial", [False, True], ids=["run-now", "trial"])
def test_an_operator_run_carries_the_rule_identity_object_key_and_snapshot(identity, trial):
    rule = scheduled_rule(identity)
    claim = rule_run_now(rule=rule, actor="alice", now=T0, trial=trial)
    run = claim.run
    assert (run.source, run.triggered_by, run.is_trial) == (TaskRun.Source.MANUAL, "alice", trial)
    assert run.biz_key.startswith(f"rule/{rule.pk}/trial/" if trial else f"rule/{rule.pk}/manual/")
    assert_carries_the_rule(run, object_key="account-42")


def test_a_backfill_run_carries_the_rule_identity_object_key_and_snapshot(identity):
    rule = scheduled_rule(identity, kind=TriggerRule.Kind.CRON, cron="0 9 * * *")
    plan = rule_backfill_plan(rule=rule, start=date(2026, 11, 28), end=date(2026, 11, 29), now=T0)
    assert rule_backfill(plan=plan, actor="alice", now=T0)["created"] == 2
    runs = list(TaskRun.objects.filter(rule=rule))
    assert len(runs) == 2
    for run in runs:
        assert run.source == TaskRun.Source.BACKFILL
        assert_carries_the_rule(run, object_key="account-42")


def test_a_webhook_run_carries_the_rule_identity_object_key_and_snapshot(identity, client, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    rule = event_rule(identity)
    TriggerSource.objects.create(
        name="billing", kind="webhook", identity="svc:billing", rule=rule, secret_env=SECRET_ENV
    )
    raw = json.dumps({"object_id": "inv-7", "action": "paid", "version": 3}).encode()
    ts = str(int(time.time()))
    headers = {
        events.HEADER_TIMESTAMP: ts,
        events.HEADER_DELIVERY: "dlv-1",
        events.HEADER_SIGNATURE: signatures.sign(
            signatures.HARNESS, SECRET.encode(), timestamp=ts, delivery_id="dlv-1", body=raw
        ),
    }
    response = client.post("/hooks/billing/", data=raw, content_type="application/json", headers=headers)
    assert response.status_code == 202, response.content
    run = TaskRun.objects.get(rule=rule)
    # Triggered by the sender, executed as the rule's identity: the two identities of invariant 8.
    assert (run.source, run.triggered_by) == (TaskRun.Source.EVENT, "svc:billing")
    assert_carries_the_rule(run, object_key="invoice-inv-7")


def test_a_queue_run_carries_the_rule_identity_object_key_and_snapshot(identity):
    rule = event_rule(identity)
    TriggerSource.objects.create(name="orders-queue", kind="queue", identity="svc:orders", rule=rule)
    answer = event_intake_task(source="orders-queue", payload={"object_id": "o-9", "action": "new", "version": 1})
    assert answer["status"] == 202, answer
    run = TaskRun.objects.get(rule=rule)
    assert run.triggered_by == "svc:orders"
    assert_carries_the_rule(run, object_key="invoice-o-9")


def test_a_file_sensor_run_carries_the_rule_identity_object_key_and_snapshot(identity, tmp_path):
    rule = event_rule(identity)
    source = TriggerSource.objects.create(
        name="drop", kind="file", identity="svc:sftp", rule=rule, watch_dir=str(tmp_path), settle_seconds=5
    )
    path = tmp_path / "ledger.csv"
    path.write_bytes(b"a,b\n")
    old = (T0 - timedelta(seconds=60)).timestamp()
    os.utime(path, (old, old))
    assert sensor_scan(source=source, now=T0).accepted == 1
    run = TaskRun.objects.get(rule=rule)
    assert run.triggered_by == "svc:sftp"
    assert run.object_key.startswith("invoice-")
    assert_carries_the_rule(run, object_key=run.object_key)
    assert run.object_key == "invoice-" + run.payload["event"]["criteria"]["object_id"]
