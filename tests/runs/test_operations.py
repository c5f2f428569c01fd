"""Operator actions refuse with a reason (OperationError), never an unexpected error, whatever the
state of the rows they act on. Real database."""

from datetime import UTC, datetime

import pytest

from deadletters.models import DeadLetter
from runs.engine.operations import OperationError, run_retry_now
from runs.models import TaskRun
from tests.support.desk import make_failed_run

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

pytestmark = pytest.mark.django_db


def test_it_refuses_a_desk_replay_whose_run_is_gone_and_leaves_the_ticket_open():
    run = make_failed_run()
    ticket = DeadLetter.objects.get(run=run)
    gone = TaskRun.objects.order_by("-id").values_list("id", flat=True).first() + 1

    with pytest.raises(OperationError, match=f"run {gone} no longer exists"):
        run_retry_now(run_id=gone, ticket_id=ticket.id, actor=None, now=NOW)

    ticket.refresh_from_db()
    assert ticket.state == DeadLetter.State.PENDING_MANUAL
    assert TaskRun.objects.get(id=run.id).state == TaskRun.State.FAILED


def test_it_refuses_a_desk_replay_whose_run_is_no_longer_failed():
    run = make_failed_run()
    ticket = DeadLetter.objects.get(run=run)
    TaskRun.objects.filter(id=run.id).update(state=TaskRun.State.SUCCEEDED)

    with pytest.raises(OperationError, match="succeeded, not failed"):
        run_retry_now(run_id=run.id, ticket_id=ticket.id, actor=None, now=NOW)

    ticket.refresh_from_db()
    assert ticket.state == DeadLetter.State.PENDING_MANUAL
