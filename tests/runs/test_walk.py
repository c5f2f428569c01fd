"""The executor walk stays short (issue 39): following a run from runs/jobs.py enters a file it had
already left at most six times, for a run that succeeds and for one whose attempt fails and retries.
The figures and the rules of the walk: tests/support/walk.py, docs/architecture.md."""

import pytest
from django.db import transaction
from django.utils import timezone

from runs.engine.claims import run_claim
from runs.jobs import run_execute_task
from tests.support.runs import api_work
from tests.support.walk import walk

pytestmark = pytest.mark.django_db(transaction=True)

MAX_RETURNS = 6


def claim(key: str, skill: str, params: dict) -> int:
    with transaction.atomic():
        run = run_claim(api_work(key, skill=skill, params=params), now=timezone.now(), dispatch=False).run
    assert run is not None
    return run.id


@pytest.mark.parametrize(
    ("skill", "params", "status"),
    [("harness.noop", {}, "succeeded"), ("harness.fail", {"fail_attempts": 1, "error_kind": "timeout"}, "retry")],
)
def test_following_a_run_returns_to_a_file_at_most_six_times(skill, params, status):
    run_id = claim(f"walk:{skill}", skill, params)
    result, path = walk(lambda: run_execute_task(run_id))
    assert result == status
    assert path.entries[0] == ("runs/jobs.py", "run_execute_task")
    assert path.returns <= MAX_RETURNS, path.stays
