"""Dead-letter tickets and alerts (invariant 6): exactly one open ticket per run, one alert carrying
run id and biz_key, recorded with the ticket and sent only once it is committed. Transactional, so
on_commit really fires; deliver() does in-process what the alerts worker does."""

import logging
import re
import socket
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

from deadletters.alert_queue import alert_deliver_due
from deadletters.alerts import alert_final_failure
from deadletters.models import Alert, AlertChannel, DeadLetter
from deadletters.services import deadletter_open
from runs.engine.claims import Work, run_claim
from runs.models import TaskRun
from tasks.skills.errors import classify
from tasks.skills.sdk import SkillError

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ADMIN_EMAIL = "oncall@example.com"
ERROR = classify(SkillError("invalid_param", "params.channel must be one of email, sms; got 'fax'"))


@pytest.fixture(autouse=True)
def admins(settings):
    settings.ADMINS = [("On call", ADMIN_EMAIL)]
    # The default channel the data migration installs (flushed by transactional tests).
    AlertChannel.objects.update_or_create(  # installed disabled while ADMINS is unset
        name="On-call email (ADMINS)", defaults={"kind": "email", "min_severity": "urgent", "enabled": True}
    )


def deliver() -> dict:
    return alert_deliver_due(now=T0 + timedelta(hours=1))


def failed_run(biz_key: str = "report:2026-03-01:email") -> TaskRun:
    run = run_claim(
        Work(
            biz_key=biz_key,
            skill="harness.fail",
            source=TaskRun.Source.SCHEDULER,
            triggered_by="scheduler",
            payload={"params": {"channel": "fax"}},
        ),
        now=T0,
        dispatch=False,
    ).run
    TaskRun.objects.filter(id=run.id).update(state=TaskRun.State.FAILED, attempts=2, first_failure_at=T0, finish_at=T0)
    return TaskRun.objects.get(id=run.id)


def open_ticket(run: TaskRun, *, now: datetime = T0 + timedelta(minutes=1), reason: str = "not retried"):
    return deadletter_open(run=run, error=ERROR, reason=reason, now=now)


def test_it_opens_a_ticket_with_what_a_human_needs():
    run = failed_run()
    ticket = open_ticket(run, now=T0 + timedelta(minutes=1))

    ticket = DeadLetter.objects.get(id=ticket.id)
    assert (ticket.run_id, ticket.biz_key, ticket.source) == (run.id, run.biz_key, TaskRun.Source.SCHEDULER)
    assert ticket.raw_payload == {"params": {"channel": "fax"}}
    assert (ticket.first_failure_at, ticket.last_failure_at) == (T0, T0 + timedelta(minutes=1))
    assert ticket.attempts == 2
    assert (ticket.error_kind, ticket.last_error_digest, ticket.last_error) == (ERROR.kind, ERROR.digest, ERROR.message)
    assert ticket.state == DeadLetter.State.PENDING_MANUAL


def test_it_alerts_once_with_run_id_and_biz_key(mailoutbox):
    run = failed_run()
    ticket = open_ticket(run, reason="error kind 'invalid_param' is not retried")

    assert mailoutbox == []  # recorded in the outbox; a worker sends it
    assert deliver()["sent"] == 1
    assert len(mailoutbox) == 1
    mail = mailoutbox[0]
    assert mail.to == [ADMIN_EMAIL]
    assert f"run {run.id} " in mail.subject and run.biz_key in mail.subject
    assert re.search(rf"^run id:\s+{run.id}$", mail.body, re.MULTILINE)
    assert re.search(rf"^biz_key:\s+{re.escape(run.biz_key)}$", mail.body, re.MULTILINE)
    assert "invalid_param" in mail.body and "is not retried" in mail.body
    assert f"/admin/deadletters/deadletter/{ticket.id}/change/" in mail.body


def test_it_opens_one_ticket_and_sends_one_alert_when_called_twice(mailoutbox):
    run = failed_run()
    first = open_ticket(run)
    second = open_ticket(run, now=T0 + timedelta(minutes=5))

    assert second.id == first.id
    assert DeadLetter.objects.filter(run=run).count() == 1
    deliver()
    assert len(mailoutbox) == 1


def test_it_alerts_only_after_the_ticket_is_committed(mailoutbox, django_capture_on_commit_callbacks):
    run = failed_run()
    with transaction.atomic(), django_capture_on_commit_callbacks() as callbacks:
        open_ticket(run)
        assert Alert.objects.filter(dedupe_key__startswith="final:").count() == 2  # the log entry and the email
        assert callbacks == []  # nothing is logged or queued before the commit
    assert len(callbacks) == 1
    deliver()
    assert len(mailoutbox) == 1


def test_a_rolled_back_failure_leaves_no_ticket_and_no_alert(mailoutbox):
    run = failed_run()
    with pytest.raises(RuntimeError), transaction.atomic():
        open_ticket(run)
        raise RuntimeError("the outcome write failed after the ticket")
    assert not DeadLetter.objects.filter(run=run).exists()
    assert not Alert.objects.exists()
    deliver()
    assert mailoutbox == []


def test_a_closed_ticket_does_not_block_the_next_final_failure(mailoutbox):
    run = failed_run()
    first = open_ticket(run)
    DeadLetter.objects.filter(id=first.id).update(state=DeadLetter.State.CLOSED)

    second = open_ticket(run, now=T0 + timedelta(hours=1))
    assert second.id != first.id
    assert DeadLetter.objects.filter(run=run, state=DeadLetter.State.PENDING_MANUAL).get().id == second.id
    deliver()
    assert len(mailoutbox) == 2


def test_concurrent_final_failures_of_one_run_open_one_ticket(mailoutbox):
    run = failed_run()
    racers = 8
    barrier = threading.Barrier(racers)
    tickets, errors = [], []

    def body(i: int) -> None:
        try:
            connection.ensure_connection()
            barrier.wait(timeout=30)
            tickets.append(open_ticket(run, now=T0 + timedelta(seconds=i)))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    [ticket] = DeadLetter.objects.filter(run=run)
    assert {t.id for t in tickets} == {ticket.id}
    deliver()
    assert len(mailoutbox) == 1


def test_a_broken_mail_server_does_not_undo_the_ticket(settings, mailoutbox, caplog):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", port, 2
    run = failed_run()

    with caplog.at_level(logging.WARNING, logger="harness.alerts"):
        ticket = open_ticket(run)
        assert deliver()["retry"] == 1

    assert DeadLetter.objects.filter(id=ticket.id).exists()
    messages = [r.getMessage() for r in caplog.records if r.name == "harness.alerts"]
    assert any(f"run_id={run.id}" in m and f"biz_key={run.biz_key!r}" in m for m in messages)
    assert any("failed (attempt 1 of 5)" in m for m in messages)
    email = Alert.objects.get(channel__isnull=False)
    assert (email.state, email.attempts) == (Alert.State.PENDING, 1) and "email:" in email.last_error


def test_the_alert_never_raises(settings):
    settings.EMAIL_BACKEND = "no.such.backend.EmailBackend"
    run = failed_run()
    ticket = DeadLetter.objects.create(
        run=run,
        biz_key=run.biz_key,
        source=run.source,
        first_failure_at=T0,
        last_failure_at=T0,
        attempts=1,
        error_kind="timeout",
        last_error_digest="x",
        created_at=T0,
    )
    alert_final_failure(ticket=ticket, reason="attempts exhausted")
    assert deliver()["retry"] == 1  # the bad backend is a recorded, retried delivery failure
