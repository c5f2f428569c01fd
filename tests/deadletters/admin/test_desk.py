# ruff: noqa: F811  (pytest fixtures imported from tests.support.desk are redefined as arguments)
"""The dead-letter desk: backlog counts, ticket page, replay (once, however often clicked), close,
assign, bulk confirmation and roles."""

import html
import threading

import pytest
from django.contrib.admin import helpers
from django.db import close_old_connections, connection
from django.urls import reverse
from django.utils import timezone
from django.utils.html import strip_tags

from deadletters.models import DeadLetter
from harness_site.audit.models import AuditEntry
from runs.engine.operations import run_retry_now
from runs.models import TaskRun
from tests.support.desk import (  # noqa: F401 - fixtures
    make_failed_run,
    oncall,
    oncall_client,
    operator,
    operator_client,
    viewer,
    viewer_client,
)


def _text(response) -> str:
    return html.unescape(response.content.decode())


def _plain(response) -> str:
    return " ".join(strip_tags(_text(response)).split())


@pytest.mark.django_db
def test_it_counts_the_open_backlog_by_rule_kind_and_fingerprint(viewer_client):
    for i in range(3):
        make_failed_run(f"a:{i}", kind="timeout", digest="fp-timeout")
    make_failed_run("b:1", kind="invalid_param", digest="fp-param")
    page = viewer_client.get(reverse("admin:deadletters_deadletter_changelist"))
    backlog = page.context["backlog"]
    assert page.context["backlog_total"] == 4
    assert [(r["key"], r["n"]) for r in backlog["error_kind"]] == [("timeout", 3), ("invalid_param", 1)]
    assert [(r["key"], r["n"]) for r in backlog["fingerprint"]] == [("fp-timeout", 3), ("fp-param", 1)]
    assert [(r["key"], r["n"]) for r in backlog["rule"]] == [("r", 4)]
    found = viewer_client.get(reverse("admin:deadletters_deadletter_changelist"), {"q": "b:1"})
    assert found.context["cl"].result_count == 1
    by_digest = viewer_client.get(
        reverse("admin:deadletters_deadletter_changelist"), {"last_error_digest__exact": "fp-param"}
    )
    assert by_digest.context["cl"].result_count == 1


@pytest.mark.django_db
def test_it_shows_everything_needed_on_a_ticket(oncall_client):
    run = make_failed_run("report:x")
    ticket = DeadLetter.objects.get()
    page = _text(oncall_client.get(reverse("admin:deadletters_deadletter_change", args=[ticket.pk])))
    for text in (
        "report:x",
        f"#{run.id}",
        "abc123",
        "Attempts",
        "w1@host:1",
        "Payload snapshot",
        'id="ticket-replay"',
        'id="ticket-close"',
        'id="ticket-assign"',
    ):
        assert text in page, text


@pytest.mark.django_db
def test_it_replays_with_the_original_key_once_however_often_clicked(oncall_client):
    run = make_failed_run("report:x")
    ticket = DeadLetter.objects.get()
    url = reverse("admin:deadletters_deadletter_replay", args=[ticket.pk])
    assert "original business key" in _text(oncall_client.get(url))
    first = oncall_client.post(url, {"reason": "provider is back"})
    second = oncall_client.post(url, {"reason": "provider is back"}, follow=True)
    assert first.status_code == 302
    assert "already replayed" in _text(second)
    run.refresh_from_db()
    assert (run.state, run.biz_key, run.attempts) == ("pending", "report:x", 1)
    assert TaskRun.objects.count() == 1
    ticket.refresh_from_db()
    assert ticket.state == "replayed"
    assert AuditEntry.objects.filter(action="deadletter.replay").count() == 1


@pytest.mark.django_db(transaction=True)
def test_it_queues_one_replay_for_two_concurrent_replays(oncall):
    make_failed_run("report:race")
    ticket = DeadLetter.objects.get()
    barrier = threading.Barrier(2)
    results = []

    def replay():
        try:
            barrier.wait(timeout=10)
            results.append(run_retry_now(run_id=ticket.run_id, ticket_id=ticket.id, actor=oncall, now=timezone.now()))
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=replay) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(results) == [False, True]
    assert AuditEntry.objects.filter(action="deadletter.replay").count() == 1
    assert TaskRun.objects.get().state == "pending"


@pytest.mark.django_db
def test_it_runs_the_replayed_attempt_as_attempt_two(oncall_client):
    from runs.engine import executor

    run = make_failed_run("report:again")
    oncall_client.post(reverse("admin:deadletters_deadletter_replay", args=[DeadLetter.objects.get().pk]), {})
    outcome = executor.run_execute(run_id=run.id, worker="w9", clock=timezone.now)
    assert outcome.status == "succeeded"
    run.refresh_from_db()
    assert (run.state, run.attempts) == ("succeeded", 2)
    assert list(run.attempt_set.values_list("number", "outcome")) == [(1, "failed"), (2, "succeeded")]


@pytest.mark.django_db
def test_it_closes_with_a_note_and_assigns_an_owner(oncall_client, oncall):
    make_failed_run("report:c")
    ticket = DeadLetter.objects.get()
    no_note = oncall_client.post(reverse("admin:deadletters_deadletter_close", args=[ticket.pk]), {"note": ""})
    assert no_note.status_code == 200 and "This field is required." in _text(no_note)
    oncall_client.post(reverse("admin:deadletters_deadletter_assign", args=[ticket.pk]), {"owner": oncall.pk})
    oncall_client.post(reverse("admin:deadletters_deadletter_close", args=[ticket.pk]), {"note": "data was fixed"})
    ticket.refresh_from_db()
    assert (ticket.state, ticket.note, ticket.owner) == ("closed", "data was fixed", oncall)
    assert list(AuditEntry.objects.order_by("id").values_list("action", "reason")) == [
        ("deadletter.assign", ""),
        ("deadletter.close", "data was fixed"),
    ]


@pytest.mark.django_db
def test_it_shows_the_count_before_a_bulk_replay(oncall_client):
    for i in range(3):
        make_failed_run(f"bulk:{i}")
    DeadLetter.objects.filter(biz_key="bulk:2").update(state="closed")
    ids = list(DeadLetter.objects.values_list("pk", flat=True))
    url = reverse("admin:deadletters_deadletter_changelist")
    confirm = oncall_client.post(url, {"action": "replay", helpers.ACTION_CHECKBOX_NAME: ids, "index": "0"})
    assert "3 selected; 2 can be changed" in _plain(confirm)
    assert not DeadLetter.objects.filter(state="replayed").exists()
    done = oncall_client.post(url, {"action": "replay", helpers.ACTION_CHECKBOX_NAME: ids, "post": "yes"}, follow=True)
    assert "Replayed 2 of 3 selected" in _text(done)
    assert TaskRun.objects.filter(state="pending").count() == 2


@pytest.mark.django_db
def test_it_refuses_desk_actions_to_operators_and_viewers(operator_client, viewer_client):
    make_failed_run("report:no")
    ticket = DeadLetter.objects.get()
    for client in (operator_client, viewer_client):
        for name in ("replay", "close", "assign"):
            url = reverse(f"admin:deadletters_deadletter_{name}", args=[ticket.pk])
            assert client.post(url, {"note": "x", "reason": "x"}).status_code == 403
        client.post(
            reverse("admin:deadletters_deadletter_changelist"),
            {"action": "replay", helpers.ACTION_CHECKBOX_NAME: [ticket.pk], "post": "yes"},
        )
    ticket.refresh_from_db()
    assert ticket.state == "pending_manual"
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_it_flags_the_ticket_of_a_trial_run(oncall_client):
    run = make_failed_run("trial:report:x")
    TaskRun.objects.filter(pk=run.pk).update(is_trial=True)
    page = _text(oncall_client.get(reverse("admin:deadletters_deadletter_change", args=[DeadLetter.objects.get().pk])))
    assert '<span class="trial-flag">TRIAL</span>' in page
