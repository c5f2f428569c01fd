"""A replayed ticket tells what came of its replay: still running, succeeded, or failed again with a
link to the ticket the failure opened. "Replayed" alone read as resolved when the replay had failed.
The run page's execution time counts the attempts, not the two hours the ticket waited for a human."""

import html
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from deadletters.models import DeadLetter
from deadletters.replays import replay_outcome
from runs.engine.operations import run_retry_now
from runs.models import TaskRun
from tests.support.desk import make_failed_replay, make_failed_run, make_user

pytestmark = pytest.mark.django_db

FAILED_AT = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ticket", "run", "newer", "code"),
    [
        ("pending_manual", "failed", None, None),
        ("closed", "failed", None, None),
        ("replayed", "pending", None, "running"),
        ("replayed", "running", None, "running"),
        ("replayed", "waiting_retry", None, "running"),
        ("replayed", "succeeded", None, "succeeded"),
        ("replayed", "failed", 9, "failed_again"),
        ("replayed", "running", 9, "failed_again"),  # failed again, then replayed from the newer ticket
        ("replayed", "cancelled", None, "cancelled"),
    ],
)
def test_the_outcome_of_a_replay(ticket, run, newer, code):
    outcome = replay_outcome(ticket_state=ticket, run_state=run, newer_ticket_id=newer)
    assert (outcome.code if outcome else None) == code
    if outcome:
        assert outcome.newer_ticket_id == (newer if code == "failed_again" else None)


def test_a_ticket_whose_replay_failed_says_so_and_links_the_new_ticket(client):
    user = make_user("omar", "On-call")
    client.force_login(user)
    run = make_failed_run(now=FAILED_AT)
    first = DeadLetter.objects.get(run=run)
    second = make_failed_replay(run, actor=user, replayed_at=FAILED_AT + timedelta(hours=2))
    page = html.unescape(client.get(reverse("admin:deadletters_deadletter_change", args=[first.pk])).content.decode())
    assert "Replayed: failed again" in page and ">Replayed<" not in page
    assert f'href="/admin/deadletters/deadletter/{second.pk}/change/">ticket #{second.pk}</a>' in page
    assert "attempts now</span>2" in page
    listed = html.unescape(client.get(reverse("admin:deadletters_deadletter_changelist")).content.decode())
    assert (
        f'<span class="bad">Replayed: failed again</span> <a href="/admin/deadletters/deadletter/{second.pk}/change/"'
        in listed
    )
    # The run's own ticket list says it in the same words.
    run_page = html.unescape(client.get(reverse("admin:runs_taskrun_change", args=[run.pk])).content.decode())
    assert f'#{first.pk}</a> <span class="bad">Replayed: failed again</span>' in run_page
    # The newer ticket is closed an hour after it opened: three hours waiting for people in all.
    DeadLetter.objects.filter(pk=second.pk).update(state="closed", closed_at=second.created_at + timedelta(hours=1))
    # The run worked 3 s in all (two attempts of 0 s and 3 s), not the two hours the ticket waited for a human.
    run_page = html.unescape(client.get(reverse("admin:runs_taskrun_change", args=[run.pk])).content.decode())
    execution = run_page.split('id="run-execution"')[1].split("</div>")[0]
    assert "<strong>3.000s</strong>" in execution
    assert "plus 3.0 h waiting for people" in execution


def test_a_replay_that_succeeded_says_so(client):
    user = make_user("omar", "On-call")
    client.force_login(user)
    run = make_failed_run(now=FAILED_AT)
    ticket = DeadLetter.objects.get(run=run)
    run_retry_now(run_id=run.pk, ticket_id=ticket.pk, actor=user, now=FAILED_AT + timedelta(minutes=5))
    page = html.unescape(client.get(reverse("admin:deadletters_deadletter_change", args=[ticket.pk])).content.decode())
    assert "Replayed: still running" in page and 'id="ticket-replay-running"' in page
    TaskRun.objects.filter(pk=run.pk).update(state="succeeded")
    page = html.unescape(client.get(reverse("admin:deadletters_deadletter_change", args=[ticket.pk])).content.decode())
    assert "Replayed: succeeded" in page and "ticket-replay-failed" not in page
