"""Run and dead-letter pages in the admin: what on-call needs to see, and finding it by biz_key."""

import html
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from deadletters.models import DeadLetter
from deadletters.services import deadletter_open
from runs.engine.claims import Work, run_claim
from runs.models import Attempt, TaskRun
from tasks.skills.errors import classify
from tasks.skills.sdk import ErrorKind, SkillError

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 8, 15, tzinfo=UTC)


def _page(response) -> str:
    assert response.status_code == 200, response.status_code
    return html.unescape(response.content.decode())


def _run(biz_key: str, *, now: datetime = NOW) -> TaskRun:
    return run_claim(
        Work(
            biz_key=biz_key,
            skill="harness.fail",
            source=TaskRun.Source.API,
            triggered_by="webhook:crm",
            payload={"params": {"channel": "fax"}},
        ),
        now=now,
        dispatch=False,
    ).run


def _fail_for_good(run: TaskRun, message: str) -> DeadLetter:
    """Two attempts, the second final, and the ticket a final failure opens."""
    Attempt.objects.create(
        run=run,
        number=1,
        fence=1,
        worker="worker-alpha",
        started_at=NOW,
        finished_at=NOW + timedelta(seconds=2),
        outcome=Attempt.Outcome.RETRY,
        error_kind=ErrorKind.TIMEOUT,
        error="TimeoutError: upstream took 30s",
    )
    Attempt.objects.create(
        run=run,
        number=2,
        fence=2,
        worker="worker-beta",
        started_at=NOW + timedelta(seconds=10),
        finished_at=NOW + timedelta(seconds=11),
        outcome=Attempt.Outcome.FAILED,
        error_kind=ErrorKind.INVALID_PARAM,
        error=f"SkillError: {message}",
    )
    TaskRun.objects.filter(pk=run.pk).update(
        state=TaskRun.State.FAILED,
        attempts=2,
        first_failure_at=NOW,
        last_error_kind=ErrorKind.INVALID_PARAM,
        last_error=f"SkillError: {message}",
    )
    run.refresh_from_db()
    error = classify(SkillError(ErrorKind.INVALID_PARAM, message))
    return deadletter_open(run=run, error=error, reason="never retried", now=NOW + timedelta(seconds=11))


def test_it_shows_the_attempts_on_the_run_page(admin_client):
    run = _run("invoice:42:send:v3")
    _fail_for_good(run, "channel 'fax' is not supported")

    page = _page(admin_client.get(reverse("admin:runs_taskrun_change", args=[run.pk])))

    assert "invoice:42:send:v3" in page
    assert "webhook:crm" in page
    # The inline: both attempts, their workers, outcomes and errors, in order.
    assert "worker-alpha" in page and "worker-beta" in page
    assert page.index("worker-alpha") < page.index("worker-beta")
    assert "Failed, will retry" in page
    assert "Failed for good" in page
    assert "TimeoutError: upstream took 30s" in page
    assert "SkillError: channel 'fax' is not supported" in page


def test_it_shows_biz_key_and_last_error_on_the_dead_letter_page(admin_client):
    run = _run("invoice:42:send:v3")
    ticket = _fail_for_good(run, "channel 'fax' is not supported")

    page = _page(admin_client.get(reverse("admin:deadletters_deadletter_change", args=[ticket.pk])))

    assert "invoice:42:send:v3" in page
    assert "SkillError: channel 'fax' is not supported" in page
    assert "invalid parameter" in page  # the kind in words (tasks/skills/error_words.py)


@pytest.fixture
def three_runs():
    runs = [
        _run(key, now=NOW + timedelta(minutes=n))
        for n, key in enumerate(["invoice:acme:send", "invoice:globex:send", "report:daily:email"])
    ]
    for run in runs:
        _fail_for_good(run, f"cannot send {run.biz_key}")
    return runs


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("invoice:acme:send", ["invoice:acme:send"]),
        ("invoice", ["invoice:acme:send", "invoice:globex:send"]),
        ("daily", ["report:daily:email"]),
        ("nothing-like-this", []),
    ],
)
def test_it_finds_runs_by_biz_key(admin_client, three_runs, query, expected):
    response = admin_client.get(reverse("admin:runs_taskrun_changelist"), {"q": query})

    _page(response)
    found = sorted(r.biz_key for r in response.context["cl"].result_list)
    assert found == expected


def test_a_whole_biz_key_finds_its_run_alone_and_part_of_one_every_key_containing_it(admin_client, three_runs):
    _run("invoice:acme:send:again", now=NOW + timedelta(minutes=9))
    url = reverse("admin:runs_taskrun_changelist")

    def found(query: str) -> list[str]:
        response = admin_client.get(url, {"q": query})
        _page(response)
        return sorted(r.biz_key for r in response.context["cl"].result_list)

    # The key from an alert: its run, through the unique index, not the keys that contain it.
    assert found("invoice:acme:send") == ["invoice:acme:send"]
    assert found(" invoice:acme:send:again ") == ["invoice:acme:send:again"]
    # Part of a key (or a key in another case): every run whose key contains it.
    assert found("acme:send") == ["invoice:acme:send", "invoice:acme:send:again"]
    assert found("INVOICE:ACME:SEND") == ["invoice:acme:send", "invoice:acme:send:again"]
    assert "biz_key" in admin_client.get(url).content.decode()  # the help text says so


def test_it_finds_a_run_by_id(admin_client, three_runs):
    target = three_runs[1]

    response = admin_client.get(reverse("admin:runs_taskrun_changelist"), {"q": str(target.pk)})

    _page(response)
    assert [r.pk for r in response.context["cl"].result_list] == [target.pk]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("invoice:globex:send", ["invoice:globex:send"]),
        ("invoice", ["invoice:acme:send", "invoice:globex:send"]),
        ("report:daily", ["report:daily:email"]),
        ("nothing-like-this", []),
    ],
)
def test_it_finds_dead_letters_by_biz_key(admin_client, three_runs, query, expected):
    response = admin_client.get(reverse("admin:deadletters_deadletter_changelist"), {"q": query})

    page = _page(response)
    found = sorted(t.biz_key for t in response.context["cl"].result_list)
    assert found == expected
    for key in expected:
        assert key in page


def test_it_finds_a_dead_letter_by_run_id(admin_client, three_runs):
    target = three_runs[2]

    response = admin_client.get(reverse("admin:deadletters_deadletter_changelist"), {"q": str(target.pk)})

    _page(response)
    assert [t.run_id for t in response.context["cl"].result_list] == [target.pk]
