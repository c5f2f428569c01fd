"""Alerts end to end inside the process: recorded with the event (outbox), delivered by the same
service the worker calls (alert_deliver_due), to a real HTTP receiver on 127.0.0.1 and to the locmem
mail outbox. Escalation per case, storms, bounded retries, the stalled-scheduler check, the hooks in
the executor and the scheduler. Transactional, so on_commit hooks really fire."""

import logging
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from deadletters import alert_rules as rules
from deadletters.alert_queue import alert_deliver_due
from deadletters.alerts import (
    alert_check_scheduler,
    alert_record,
    alert_retry,
    alert_send_test,
    alert_slot_expired,
)
from deadletters.models import Alert, AlertChannel, DeadLetter
from deadletters.services import deadletter_open
from runs.desk.selectors import scheduler_health
from runs.engine.claims import Work, run_claim
from runs.engine.executor import run_execute
from runs.engine.store import store
from runs.models import SchedulerTick, TaskRun
from tasks.models import TriggerRule
from tasks.skills.errors import classify
from tasks.skills.sdk import SkillError
from tasks.triggers.scheduler import scheduler_tick
from tests.support.rules import make_rule
from tests.support.runs import run_policy

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ERROR = classify(SkillError("timeout", "the model did not answer in 30s"))
SECRETS = ("T0K3N-SECRET", "SECRET-QUERY")


@pytest.fixture(autouse=True)
def no_channels():
    AlertChannel.objects.all().delete()  # the default one the data migration installs


def check_scheduler(at):
    return alert_check_scheduler(health=scheduler_health(now=at), now=at)


def webhook(receiver, fmt: str = "slack", min_severity: str = "notice", name: str = "hook") -> AlertChannel:
    return AlertChannel.objects.create(
        name=name, kind="webhook", url=receiver.url, format=fmt, min_severity=min_severity
    )


def failed_run(biz_key: str = "report:2026-03-01:email", rule: str = "daily-report") -> TaskRun:
    run = run_claim(
        Work(
            biz_key=biz_key,
            skill="harness.fail",
            source=TaskRun.Source.SCHEDULER,
            triggered_by="scheduler",
            payload={"params": {}},
        ),
        now=T0,
        dispatch=False,
    ).run
    TaskRun.objects.filter(id=run.id).update(
        state=TaskRun.State.FAILED, attempts=3, first_failure_at=T0, finish_at=T0, rule_name=rule
    )
    return TaskRun.objects.get(id=run.id)


def dead_letter(run: TaskRun, now: datetime = T0) -> DeadLetter:
    return deadletter_open(run=run, error=ERROR, reason="attempt 3 of 3: attempts exhausted", now=now)


def text_of(body: dict, fmt: str) -> str:
    return {
        "slack": lambda b: b["text"],
        "feishu": lambda b: b["content"]["text"],
        "dingtalk": lambda b: b["text"]["content"],
        "generic": lambda b: b["text"],
    }[fmt](body)


def assert_carries_the_fields(payload: dict) -> None:
    assert set(rules.PAYLOAD_FIELDS) <= set(payload)
    assert payload["link"].startswith(settings.HARNESS["ADMIN_BASE_URL"] + "/admin/")


# --- webhook formats against a real receiver -----------------------------------------------


@pytest.mark.parametrize("fmt", ["slack", "feishu", "dingtalk", "generic"])
def test_it_posts_a_final_failure_to_a_webhook_in_each_format(receiver, fmt, caplog):
    webhook(receiver, fmt)
    run = failed_run()
    if fmt == "feishu":
        receiver.answer = {"code": 0, "msg": "success"}
    if fmt == "dingtalk":
        receiver.answer = {"errcode": 0, "errmsg": "ok"}

    with caplog.at_level(logging.DEBUG):
        ticket = dead_letter(run)
        assert alert_deliver_due(now=T0)["sent"] == 1

    [body] = receiver.requests
    assert receiver.paths == ["/hook/T0K3N-SECRET?access_token=SECRET-QUERY"]
    text = text_of(body, fmt)
    link = settings.HARNESS["ADMIN_BASE_URL"] + reverse("admin:deadletters_deadletter_change", args=[ticket.id])
    for value in (
        f"run id:     {run.id}",
        f"biz_key:    {run.biz_key}",
        "rule:       daily-report",
        "error kind: timeout",
        link,
        "URGENT",
    ):
        assert value in text
    if fmt == "feishu":
        assert body["msg_type"] == "text"
    if fmt == "dingtalk":
        assert body["msgtype"] == "text"
    if fmt == "generic":
        assert (body["run_id"], body["biz_key"], body["rule"], body["error_kind"], body["link"]) == (
            run.id,
            run.biz_key,
            "daily-report",
            "timeout",
            link,
        )
    alert = Alert.objects.get(channel__isnull=False)
    assert (alert.state, alert.attempts, alert.sent_at) == (Alert.State.SENT, 1, T0)
    assert not any(s in r.getMessage() for r in caplog.records for s in SECRETS)


def test_a_receiver_that_answers_200_with_an_error_code_is_a_failed_delivery(receiver):
    webhook(receiver, "dingtalk")
    receiver.answer = {"errcode": 310000, "errmsg": "keywords not in content"}
    dead_letter(failed_run())

    assert alert_deliver_due(now=T0)["retry"] == 1
    alert = Alert.objects.get(channel__isnull=False)
    assert "errcode 310000" in alert.last_error and alert.state == Alert.State.PENDING


def test_a_failing_receiver_is_retried_boundedly_and_the_failure_stays_recorded(receiver, caplog):
    webhook(receiver)
    receiver.status = 500
    run = failed_run()
    ticket = dead_letter(run)

    now = T0
    with caplog.at_level(logging.DEBUG):
        for _ in range(rules.MAX_DELIVERY_ATTEMPTS * 3):  # far more passes than the cap
            alert_deliver_due(now=now)
            now += rules.DELIVERY_BACKOFF_CAP

    assert len(receiver.requests) == rules.MAX_DELIVERY_ATTEMPTS
    alert = Alert.objects.get(channel__isnull=False)
    assert (alert.state, alert.attempts, alert.next_attempt_at) == (
        Alert.State.FAILED,
        rules.MAX_DELIVERY_ATTEMPTS,
        None,
    )
    assert "HTTP 500" in alert.last_error and not any(s in alert.last_error for s in SECRETS)
    assert not any(s in r.getMessage() for r in caplog.records for s in SECRETS)
    # The failure itself is untouched: ticket open, run failed.
    assert DeadLetter.objects.get(id=ticket.id).state == DeadLetter.State.PENDING_MANUAL
    assert TaskRun.objects.get(id=run.id).state == TaskRun.State.FAILED


def test_a_delivery_is_not_retried_before_its_backoff(receiver):
    webhook(receiver)
    receiver.status = 503
    dead_letter(failed_run())

    alert_deliver_due(now=T0)
    alert_deliver_due(now=T0 + rules.DELIVERY_BACKOFF_BASE - timedelta(seconds=1))
    assert len(receiver.requests) == 1
    receiver.status = 200
    assert alert_deliver_due(now=T0 + rules.DELIVERY_BACKOFF_BASE)["sent"] == 1
    assert len(receiver.requests) == 2
    assert Alert.objects.get(channel__isnull=False).state == Alert.State.SENT


def test_the_retry_delay_is_the_setting_and_doubles(receiver, settings):
    settings.HARNESS = {**settings.HARNESS, "ALERT_RETRY_SECONDS": 2}
    webhook(receiver)
    receiver.status = 503
    dead_letter(failed_run())

    alert_deliver_due(now=T0)
    assert Alert.objects.get(channel__isnull=False).next_attempt_at == T0 + timedelta(seconds=2)
    assert alert_deliver_due(now=T0 + timedelta(seconds=1.9)).get("retry", 0) == 0
    assert alert_deliver_due(now=T0 + timedelta(seconds=2))["retry"] == 1
    assert Alert.objects.get(channel__isnull=False).next_attempt_at == T0 + timedelta(seconds=2 + 4)
    assert len(receiver.requests) == 2


def test_an_unreachable_receiver_does_not_undo_the_failure():
    AlertChannel.objects.create(
        name="gone", kind="webhook", url="http://127.0.0.1:9/hook/T0K3N-SECRET", min_severity="notice"
    )
    ticket = dead_letter(failed_run())
    assert alert_deliver_due(now=T0)["retry"] == 1
    assert DeadLetter.objects.filter(id=ticket.id).exists()
    alert = Alert.objects.get(channel__isnull=False)
    assert "ConnectError" in alert.last_error and "T0K3N-SECRET" not in alert.last_error


# --- storms --------------------------------------------------------------------------------


def test_a_storm_of_500_final_failures_sends_a_bounded_number_of_messages_and_one_summary(receiver):
    webhook(receiver)
    storm = 500
    TaskRun.objects.bulk_create(
        TaskRun(
            biz_key=f"sync:{i}",
            rule_name="sync-orders",
            skill="harness.fail",
            source=TaskRun.Source.SCHEDULER,
            trigger_at=T0,
            run_after=T0,
            state=TaskRun.State.FAILED,
            attempts=3,
            first_failure_at=T0,
        )
        for i in range(storm)
    )
    runs = list(TaskRun.objects.filter(rule_name="sync-orders").order_by("id"))
    for i, run in enumerate(runs):  # all within one five-minute window
        dead_letter(run, now=T0 + timedelta(milliseconds=500 * i))
    other = dead_letter(failed_run(rule="daily-report"), now=T0 + timedelta(minutes=4))  # another rule: its own group

    alert_deliver_due(now=T0 + timedelta(minutes=4))  # during the window: the first N of each group
    assert len(receiver.requests) == rules.STORM_LIMIT + 1
    alert_deliver_due(now=T0 + timedelta(minutes=5))  # the window has ended: one summary
    alert_deliver_due(now=T0 + timedelta(minutes=10))  # and never a second one

    assert len(receiver.requests) == rules.STORM_LIMIT + 2
    texts = [r["text"] for r in receiver.requests]
    folded = storm - rules.STORM_LIMIT
    summaries = [t for t in texts if "more like this" in t]
    assert len(summaries) == 1
    assert f"and {folded} more like this: sync:{rules.STORM_LIMIT}" in summaries[0]
    assert "rule:       sync-orders" in summaries[0]
    assert sum(f"biz_key:    {other.biz_key}" in t for t in texts) == 1
    # The log has every one of them; the outbox accounts for every folded alert.
    assert Alert.objects.filter(channel__isnull=True, kind=rules.FINAL_FAILURE).count() == storm + 1
    summary = Alert.objects.get(kind=rules.SUMMARY)
    assert summary.folded.count() == folded and summary.payload["count"] == folded
    assert_carries_the_fields(summary.payload)


# --- escalation, per case, through the real hooks --------------------------------------------


def make_run(params: dict, policy: dict, biz_key: str = "exec:2026-03-01") -> TaskRun:
    work = Work(
        biz_key=biz_key,
        skill="harness.fail",
        source=TaskRun.Source.API,
        triggered_by="tests",
        payload={"params": params},
        policy=run_policy({"backoff_base_seconds": 10.0, "lease_ttl_seconds": 60, **policy}),
    )
    return run_claim(
        work,
        now=T0,
        dispatch=False,
    ).run


def run_until_done(run: TaskRun) -> None:
    at = T0
    for _ in range(10):
        run_execute(run_id=run.id, worker="w1", clock=lambda at=at: at)
        run = TaskRun.objects.get(id=run.id)
        if run.state != TaskRun.State.WAITING_RETRY:
            return
        at = run.run_after


@pytest.mark.parametrize(
    ("max_attempts", "expected"),
    [
        # attempt 1 notice, 2-3 silent, 4 (near the cap) warning, 5 final urgent
        (5, [("retry:1", "notice"), ("retry:4", "warning"), ("final", "urgent")]),
        (3, [("retry:1", "notice"), ("retry:2", "warning"), ("final", "urgent")]),
        (2, [("retry:1", "warning"), ("final", "urgent")]),
        (1, [("final", "urgent")]),
    ],
)
def test_it_escalates_a_retry_chain_from_notice_to_urgent(max_attempts, expected):
    run = make_run({"error_kind": "timeout"}, {"max_attempts": max_attempts, "max_retry_window_seconds": 86400})
    run_until_done(run)

    assert TaskRun.objects.get(id=run.id).state == TaskRun.State.FAILED
    got = []
    for alert in Alert.objects.filter(channel__isnull=True).order_by("id"):
        kind, _, rest = alert.dedupe_key.partition(":")
        label = f"retry:{rest.split(':')[1]}" if kind == "retry" else kind
        got.append((label, alert.severity))
        assert_carries_the_fields(alert.payload)
        assert (alert.payload["run_id"], alert.payload["biz_key"], alert.payload["error_kind"]) == (
            run.id,
            run.biz_key,
            "timeout",
        )
    assert got == expected


def test_a_non_retryable_error_is_urgent_at_once():
    run = make_run({"error_kind": "invalid_param"}, {"max_attempts": 5})
    run_until_done(run)
    assert list(Alert.objects.values_list("kind", "severity")) == [(rules.FINAL_FAILURE, rules.URGENT)]


def test_a_channel_gets_only_its_minimum_severity_and_above(receiver, mailoutbox):
    webhook(receiver, min_severity="warning")
    AlertChannel.objects.create(
        name="pager", kind="email", recipients="pager@example.com, lead@example.com", min_severity="urgent"
    )
    run = make_run({"error_kind": "timeout"}, {"max_attempts": 5, "max_retry_window_seconds": 86400})
    run_until_done(run)
    alert_deliver_due(now=T0 + timedelta(days=1))

    hook_titles = [r["text"].splitlines()[0] for r in receiver.requests]
    assert [t.split()[1] for t in hook_titles] == ["WARNING", "URGENT"]  # attempt 4 and the final failure
    [mail] = mailoutbox
    assert mail.to == ["pager@example.com", "lead@example.com"]
    assert mail.subject.startswith("[harness] URGENT run ") and run.biz_key in mail.subject
    assert f"run id:     {run.id}" in mail.body and "error kind: timeout" in mail.body


def test_the_email_channel_mails_admins_when_it_names_no_recipients(settings, mailoutbox):
    settings.ADMINS = [("On call", "oncall@example.com")]
    AlertChannel.objects.create(name="admins", kind="email", min_severity="urgent")
    dead_letter(failed_run())
    alert_deliver_due(now=T0)
    [mail] = mailoutbox
    assert mail.to == ["oncall@example.com"] and "biz_key:    report:2026-03-01:email" in mail.body


def test_a_retry_alert_is_recorded_once_per_attempt():
    run = failed_run()
    assert alert_retry(run=run, attempt=1, max_attempts=3, error=ERROR, now=T0) is not None
    assert alert_retry(run=run, attempt=1, max_attempts=3, error=ERROR, now=T0) is None
    assert Alert.objects.count() == 1


# --- slots and the scheduler ---------------------------------------------------------------


def due_rule(name: str = "every-minute", **fields) -> TriggerRule:
    """Every minute in UTC unless `fields` say otherwise, its first slot due at T0."""
    return make_rule(name, due=T0, **fields)


def test_missed_slots_alert_as_warnings_and_a_storm_of_them_is_summarised(receiver):
    webhook(receiver)
    rule = due_rule(catchup=TriggerRule.CatchUp.NONE)
    now = T0 + timedelta(minutes=30, seconds=3)

    scheduler_tick(now=now)

    missed = Alert.objects.filter(channel__isnull=True, kind=rules.SLOT_MISSED)
    assert missed.count() == 30
    for alert in missed:
        assert alert.severity == rules.WARNING and alert.payload["rule"] == rule.name
        assert_carries_the_fields(alert.payload)
        assert alert.payload["link"].endswith(reverse("admin:tasks_triggerrule_change", args=[rule.pk]))
    alert_deliver_due(now=now + rules.STORM_WINDOW)
    texts = [r["text"] for r in receiver.requests]
    assert len(texts) == rules.STORM_LIMIT + 1
    assert "and 25 more like this" in texts[-1]


def _tick_queries(now: datetime) -> int:
    with CaptureQueriesContext(connection) as queries:
        scheduler_tick(now=now)
    return len(queries)


def test_a_ticks_missed_slot_alerts_cost_a_few_statements_in_all_not_several_per_slot(receiver):
    webhook(receiver)
    webhook(receiver, name="second", fmt="generic")
    few = due_rule("few", catchup=TriggerRule.CatchUp.NONE)
    many = due_rule("many", catchup=TriggerRule.CatchUp.NONE, enabled=False)
    now = T0 + timedelta(minutes=10, seconds=3)
    small = _tick_queries(now)  # 10 missed slots
    TriggerRule.objects.filter(pk=few.pk).update(enabled=False)
    TriggerRule.objects.filter(pk=many.pk).update(enabled=True, next_fire_at=T0)
    # The scheduler ticked all along (the rule was off, not the scheduler): no outage to fold them into.
    SchedulerTick.objects.update(last_tick_at=T0 + timedelta(minutes=300))
    large = _tick_queries(T0 + timedelta(minutes=300, seconds=3))  # 300
    print(f"\n[alerts] a tick with 10 missed slots: {small} statements; with 300: {large}")
    # One batch per tick: a few statements per channel, plus one per bulk insert of Django's batch
    # size on SQLite. One by one it was about nine per slot (link, savepoint, entry, channels, and a
    # count and a row per channel).
    assert (large - small) / 290 < 0.1
    assert Alert.objects.filter(channel__isnull=True, kind=rules.SLOT_MISSED).count() == 310
    # Per channel and rule, the first STORM_LIMIT of a window are sent, the rest folded.
    for channel in AlertChannel.objects.filter(kind="webhook"):
        for rule in (few, many):
            states = Alert.objects.filter(channel=channel, payload__rule=rule.name).values_list("state", flat=True)
            assert sorted(states).count(Alert.State.PENDING) == rules.STORM_LIMIT


def test_missed_slots_of_two_rules_in_one_tick_storm_apart_and_one_alerted_before_is_not_again(receiver):
    webhook(receiver)
    first = due_rule("first", catchup=TriggerRule.CatchUp.NONE)
    second = due_rule("second", catchup=TriggerRule.CatchUp.NONE)
    # The newest missed slot of "first" has alerted already, in the same storm window (an earlier
    # tick that died after its alert): it is not recorded again, and it counts toward the storm.
    alerted = T0 + timedelta(minutes=7)
    before = alert_record(
        kind=rules.SLOT_MISSED,
        severity=rules.WARNING,
        dedupe_key=f"missed:first:{alerted.isoformat()}",
        payload={"title": "earlier", "rule": "first"},
        now=T0 + timedelta(minutes=6),
    )
    assert before is not None

    scheduler_tick(now=T0 + timedelta(minutes=8, seconds=3))

    log = Alert.objects.filter(channel__isnull=True, kind=rules.SLOT_MISSED)
    assert log.filter(payload__rule="first").count() == 8 and log.filter(payload__rule="second").count() == 8
    assert Alert.objects.get(channel__isnull=True, dedupe_key=f"missed:first:{alerted.isoformat()}").id == before.id
    for rule in (first, second):
        sent = Alert.objects.filter(channel__isnull=False, payload__rule=rule.name, state=Alert.State.PENDING)
        assert sent.count() == rules.STORM_LIMIT


def test_a_slot_expired_waiting_for_readiness_is_urgent():
    alert = alert_slot_expired(rule_name="daily-report", slot=T0, missing=["orders_loaded"], now=T0)
    assert alert.severity == rules.URGENT
    assert "orders_loaded" in alert.payload["title"]
    assert_carries_the_fields(alert.payload)


def tick_at(at: datetime) -> None:
    SchedulerTick.objects.update_or_create(name="scheduler", defaults={"last_tick_at": at})


def test_a_stalled_scheduler_alerts_once_while_stalled_and_again_after_a_new_stall(receiver):
    webhook(receiver)
    assert check_scheduler(T0) is None  # never ticked: starting, not stalled
    tick_at(T0)
    assert check_scheduler(T0 + timedelta(seconds=5)) is None  # healthy

    checks = [check_scheduler(T0 + timedelta(minutes=m)) for m in range(1, 31)]  # every minute
    assert sum(c is not None for c in checks) == 1
    [stalled] = Alert.objects.filter(channel__isnull=True, kind=rules.SCHEDULER_STALLED)
    assert stalled.severity == rules.URGENT
    assert_carries_the_fields(stalled.payload)

    tick_at(T0 + timedelta(minutes=31))  # recovered
    assert check_scheduler(T0 + timedelta(minutes=31, seconds=5)) is None
    assert check_scheduler(T0 + timedelta(minutes=40)) is not None  # a new stall
    alert_deliver_due(now=T0 + timedelta(minutes=41))
    assert len(receiver.requests) == 2
    assert all("scheduler stalled" in r["text"] for r in receiver.requests)


def test_every_kind_of_alert_carries_run_id_biz_key_rule_error_kind_and_link():
    run = failed_run()
    dead_letter(run)
    alert_retry(run=run, attempt=1, max_attempts=3, error=ERROR, now=T0)
    alert_slot_expired(rule_name="r", slot=T0, missing=[], now=T0)
    tick_at(T0 - timedelta(hours=1))
    check_scheduler(T0)
    channel = AlertChannel.objects.create(name="log", kind="log", min_severity="notice")
    alert_send_test(channel=channel, now=T0)
    alert_record(kind="custom", severity=rules.NOTICE, dedupe_key="x", payload={"link": "http://x"}, now=T0)

    kinds = set()
    for alert in Alert.objects.all():
        assert set(rules.PAYLOAD_FIELDS) <= set(alert.payload), alert.kind
        kinds.add(alert.kind)
    assert {rules.FINAL_FAILURE, rules.RETRY, rules.SLOT_EXPIRED, rules.SCHEDULER_STALLED, rules.TEST} <= kinds


def test_the_log_channel_writes_the_alert(caplog):
    channel = AlertChannel.objects.create(name="ops-log", kind="log", min_severity="notice")
    alert_send_test(channel=channel, now=T0)
    with caplog.at_level(logging.WARNING, logger="harness.alerts.channel"):
        assert alert_deliver_due(now=T0)["sent"] == 1
    assert any("[ops-log]" in r.getMessage() and "test alert" in r.getMessage() for r in caplog.records)


def test_it_prunes_finished_alerts_after_the_retention_but_never_a_pending_one(receiver):
    from deadletters.alert_queue import ALERT_RETENTION, alert_prune

    webhook(receiver)
    receiver.status = 500
    dead_letter(failed_run())  # a log entry (sent) and a webhook delivery (pending: the receiver fails)
    alert_deliver_due(now=T0)
    assert alert_prune(now=T0 + ALERT_RETENTION) == 0  # not older than the retention yet

    assert alert_prune(now=T0 + ALERT_RETENTION + timedelta(seconds=1)) == 1
    [left] = Alert.objects.all()
    assert left.state == Alert.State.PENDING and left.channel is not None


def test_a_lost_worker_alerts_like_a_failed_attempt():
    from runs.engine.sweeper import sweep

    run = make_run({}, {"max_attempts": 3, "lease_ttl_seconds": 60})
    TaskRun.objects.filter(id=run.id).update(skill="harness.noop")
    assert store().lease_claim(TaskRun.objects.get(id=run.id), worker="A", now=T0, plain=False) is not None

    assert sweep(now=T0 + timedelta(seconds=61)).expired == 1

    [alert] = Alert.objects.filter(channel__isnull=True)
    assert (alert.kind, alert.severity, alert.payload["error_kind"]) == (rules.RETRY, rules.NOTICE, "lease_lost")
    assert alert.payload["run_id"] == run.id


def test_the_periodic_check_requeues_due_retries_and_lost_first_tries_only(receiver):
    from deadletters.alert_queue import ALERT_REDISPATCH_AFTER, alert_redispatch_due

    webhook(receiver)
    dead_letter(failed_run())
    [alert] = Alert.objects.filter(channel__isnull=False)
    # Its on-commit message is on its way: not re-sent until it looks lost.
    assert alert_redispatch_due(now=T0 + ALERT_REDISPATCH_AFTER - timedelta(seconds=1)) == []
    assert alert_redispatch_due(now=T0 + ALERT_REDISPATCH_AFTER) == [alert.id]

    receiver.status = 500
    alert_deliver_due(now=T0)  # first try fails: a retry is due after the backoff, no message in flight
    retry_at = Alert.objects.get(id=alert.id).next_attempt_at
    assert retry_at == T0 + rules.DELIVERY_BACKOFF_BASE
    assert alert_redispatch_due(now=retry_at - timedelta(seconds=1)) == []
    assert alert_redispatch_due(now=retry_at) == [alert.id]
