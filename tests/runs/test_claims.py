"""Claiming a unit of work: one run per biz_key, ever (invariant 1). Real database."""

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.db import DataError, connection, transaction

from runs.engine.claims import Work, run_claim
from runs.engine.store import store
from runs.models import TaskRun
from tests.support.races import run_concurrently

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RACERS = 50


def claim(biz_key: str, *, now: datetime = NOW, **overrides):
    options = {k: overrides.pop(k) for k in ("dispatch", "state") if k in overrides}
    fields = {
        "biz_key": biz_key,
        "skill": "harness.noop",
        "source": TaskRun.Source.API,
        "triggered_by": "tests",
        "payload": {"params": {"n": 1}},
    }
    return run_claim(Work(**{**fields, **overrides}), now=now, **options)


@pytest.mark.django_db
def test_it_creates_a_run_on_the_first_claim():
    result = claim("report:2026-03-01", slot=NOW)
    assert result.created is True
    run = TaskRun.objects.get(biz_key="report:2026-03-01")
    assert run.id == result.run.id
    assert run.state == TaskRun.State.PENDING
    assert (run.trigger_at, run.run_after, run.slot) == (NOW, NOW, NOW)
    assert run.dedupe_hits == 0
    assert run.payload == {"params": {"n": 1}}
    assert run.dispatched_at == NOW  # due now, so a message was queued


@pytest.mark.django_db
def test_it_dedupes_a_second_claim_and_counts_it():
    first = claim("report:2026-03-01")
    second = claim("report:2026-03-01", now=NOW + timedelta(minutes=1), payload={"params": {"n": 2}})
    third = claim("report:2026-03-01", now=NOW + timedelta(minutes=2), source=TaskRun.Source.MANUAL)
    assert (second.created, third.created) == (False, False)
    assert second.run.id == third.run.id == first.run.id
    assert TaskRun.objects.filter(biz_key="report:2026-03-01").count() == 1
    run = TaskRun.objects.get(id=first.run.id)
    assert run.dedupe_hits == 2
    # The first trigger's record stands: a dedupe hit changes nothing but the counter.
    assert (run.payload, run.trigger_at, run.source) == ({"params": {"n": 1}}, NOW, TaskRun.Source.API)
    assert third.run.dedupe_hits == 2


@pytest.mark.django_db
def test_it_keeps_different_biz_keys_apart():
    a = claim("report:2026-03-01")
    b = claim("report:2026-03-02")
    assert a.created and b.created
    assert a.run.id != b.run.id
    assert TaskRun.objects.count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize("batch", [1, 2], ids=["one run", "a batch"])
def test_a_value_too_long_for_its_column_is_refused_never_cut_to_fit(batch):
    """The claim's prebuilt INSERT casts its parameters to each column's type; a cast to
    varchar(255) would cut a 300-character key to its first 255 characters, where two keys that
    differ only after them meet on one run. PostgreSQL refuses the value as the ORM's INSERT would
    (SQLite stores it whole: it has no length limit to cut to). The key rules refuse such keys
    before a claim (tasks/rules/keys.py); this is the floor under them."""
    long_keys = [f"{'k' * 290}-{i}" for i in range(batch)]
    runs = [
        TaskRun(biz_key=key, skill="harness.noop", source=TaskRun.Source.API, trigger_at=NOW, run_after=NOW, payload={})
        for key in long_keys
    ]
    try:
        with transaction.atomic():
            store().runs_insert(runs)
    except DataError:
        assert connection.vendor == "postgresql"
    stored = list(TaskRun.objects.filter(biz_key__startswith="kkk").values_list("biz_key", flat=True))
    assert all(key in long_keys for key in stored), "a key was cut to fit its column"
    if connection.vendor == "postgresql":
        assert stored == []
    else:
        assert sorted(stored) == long_keys


@pytest.mark.django_db
def test_it_does_not_dispatch_a_run_that_is_not_due_yet():
    later = claim("later", run_after=NOW + timedelta(minutes=5))
    held = claim("held", dispatch=False)
    assert TaskRun.objects.get(id=later.run.id).dispatched_at is None
    assert TaskRun.objects.get(id=held.run.id).dispatched_at is None


@pytest.mark.django_db
def test_a_dedupe_hit_does_not_break_the_callers_transaction():
    with transaction.atomic():
        claim("report:2026-03-01")
        dup = claim("report:2026-03-01")
        other = claim("report:2026-03-02")  # the transaction is still usable after the conflict
    assert dup.created is False and other.created is True
    assert TaskRun.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_it_creates_exactly_one_run_when_many_connections_claim_one_key_at_once():
    results = run_concurrently(lambda i: claim("race:2026-03-01", triggered_by=f"racer-{i}"), RACERS)

    assert TaskRun.objects.filter(biz_key="race:2026-03-01").count() == 1
    run = TaskRun.objects.get(biz_key="race:2026-03-01")
    assert Counter(r.created for r in results) == {True: 1, False: RACERS - 1}
    assert {r.run.id for r in results} == {run.id}
    assert run.dedupe_hits == RACERS - 1
    winner = next(r for r in results if r.created)
    assert run.triggered_by == winner.run.triggered_by
