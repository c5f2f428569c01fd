"""schedule_once from Python (skills, agents): when a delayed run is due (pure, `now` passed in),
its scoped biz_key, dedupe by idempotency key, and the audit row."""

from datetime import UTC, datetime, timedelta

import pytest

from harness_site.audit.models import AuditEntry
from runs.models import TaskRun
from tasks.models import TriggerRule
from tasks.rules import keys
from tasks.triggers.once import MAX_AHEAD, OnceError, once_due_at, schedule_once
from tests.support.rules import make_rule

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def wall(*fields: int) -> datetime:
    """A local time on some zone's clock (naive): what a caller passes with a timezone."""
    return datetime(*fields, tzinfo=UTC).replace(tzinfo=None)


@pytest.mark.parametrize(
    ("kwargs", "due"),
    [
        ({"delay_seconds": 30}, NOW + timedelta(seconds=30)),
        ({"delay_seconds": 0}, NOW),
        ({"delay_seconds": 1.5}, NOW + timedelta(seconds=1.5)),
        ({"run_at": datetime(2026, 12, 2, 9, 0, tzinfo=UTC)}, datetime(2026, 12, 2, 9, 0, tzinfo=UTC)),
        # A local time is read on the zone's clock: 09:00 in Shanghai is 01:00 UTC.
        ({"run_at": wall(2026, 12, 2, 9, 0), "timezone": "Asia/Shanghai"}, datetime(2026, 12, 2, 1, 0, tzinfo=UTC)),
        # New York's 2027-03-14 02:30 does not exist: shifted to the first valid time, 03:00 EDT.
        (
            {"run_at": wall(2027, 3, 14, 2, 30), "timezone": "America/New_York"},
            datetime(2027, 3, 14, 7, 0, tzinfo=UTC),
        ),
        # 2027-11-07 01:30 happens twice in New York: the first, EDT.
        (
            {"run_at": wall(2027, 11, 7, 1, 30), "timezone": "America/New_York"},
            datetime(2027, 11, 7, 5, 30, tzinfo=UTC),
        ),
        (
            {"run_at": wall(2027, 11, 7, 1, 30), "timezone": "America/New_York", "dst_repeat": "last"},
            datetime(2027, 11, 7, 6, 30, tzinfo=UTC),
        ),
    ],
)
def test_it_says_when_a_delayed_run_is_due(kwargs, due):
    assert once_due_at(now=NOW, **kwargs).utc == due


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "run_at"),
        ({"delay_seconds": 5, "run_at": NOW}, "run_at"),
        ({"delay_seconds": -1}, "delay_seconds"),
        ({"delay_seconds": float("nan")}, "delay_seconds"),
        ({"delay_seconds": True}, "delay_seconds"),
        ({"delay_seconds": MAX_AHEAD.total_seconds() + 1}, "delay_seconds"),
        ({"run_at": wall(2026, 12, 2, 9, 0)}, "run_at"),
        ({"run_at": wall(2026, 12, 2, 9, 0), "timezone": "Not/AZone"}, "timezone"),
        ({"run_at": datetime(2026, 12, 2, 9, 0, tzinfo=UTC), "timezone": "UTC"}, "timezone"),
        ({"run_at": NOW + MAX_AHEAD + timedelta(seconds=1)}, "run_at"),
        ({"run_at": wall(2027, 3, 14, 2, 30), "timezone": "America/New_York", "dst_gap": "skip"}, "run_at"),
    ],
)
def test_it_refuses_what_cannot_be_a_due_instant_naming_the_field(kwargs, field):
    with pytest.raises(OnceError) as caught:
        once_due_at(now=NOW, **kwargs)
    assert caught.value.field == field


def _rule(name: str = "remind") -> TriggerRule:
    return make_rule(name, interval_seconds=3600, timezone="Europe/Berlin", params={"channel": "email"}, max_attempts=5)


@pytest.mark.django_db
def test_a_skill_schedules_a_reminder_and_a_repeat_returns_it():
    first = schedule_once(skill="harness.noop", idempotency_key="cb:7", delay_seconds=1800, actor="agent-x", now=NOW)
    assert first.created and first.run.run_after == NOW + timedelta(seconds=1800)
    assert first.run.state == TaskRun.State.PENDING and first.run.triggered_by == "agent-x"
    assert first.run.biz_key == keys.skill_scoped("harness.noop", keys.ONCE_KEY, "cb%3A7")
    assert keys.in_namespace(first.run.biz_key, None)
    again = schedule_once(skill="harness.noop", idempotency_key="cb:7", delay_seconds=5, actor="agent-x", now=NOW)
    assert not again.created and again.run.id == first.run.id
    assert TaskRun.objects.get().run_after == NOW + timedelta(seconds=1800)  # the first request wins
    entry = AuditEntry.objects.get()
    assert entry.action == AuditEntry.Action.RUN_SCHEDULE_ONCE and entry.target_id == str(first.run.id)


@pytest.mark.django_db
def test_a_rule_s_reminder_carries_its_policy_and_identity_and_its_own_namespace():
    rule = _rule()
    claim = schedule_once(
        rule=rule, idempotency_key="a/b", params={"to": "ops"}, delay_seconds=60, actor="olga", now=NOW
    )
    run = claim.run
    assert run.biz_key == f"rule/{rule.pk}/once-key/a%2Fb" and keys.in_namespace(run.biz_key, rule.pk)
    assert run.payload["params"] == {"channel": "email", "to": "ops"}
    assert run.retry_max_attempts == 5 and run.rule_version == rule.version
    assert run.payload["once"]["key"] == "a/b" and run.slot is None


@pytest.mark.django_db
def test_keys_that_look_alike_never_meet():
    a, b = _rule("a"), _rule("b")
    made = [
        schedule_once(rule=a, idempotency_key="x:y", delay_seconds=1, actor="t", now=NOW),
        schedule_once(rule=b, idempotency_key="x:y", delay_seconds=1, actor="t", now=NOW),
        schedule_once(rule=a, idempotency_key="x%3Ay", delay_seconds=1, actor="t", now=NOW),
        schedule_once(skill="harness.noop", idempotency_key="x:y", delay_seconds=1, actor="t", now=NOW),
        schedule_once(skill="harness.record", idempotency_key="x:y", delay_seconds=1, actor="t", now=NOW),
    ]
    assert all(c.created for c in made) and len({c.run.biz_key for c in made}) == 5


@pytest.mark.django_db
def test_a_due_reminder_is_dispatched_at_once(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as sent:
        claim = schedule_once(skill="harness.noop", idempotency_key="now", delay_seconds=0, actor="t", now=NOW)
    assert TaskRun.objects.get(id=claim.run.id).dispatched_at == NOW and len(sent) == 1
    with django_capture_on_commit_callbacks() as later:
        schedule_once(skill="harness.noop", idempotency_key="later", delay_seconds=60, actor="t", now=NOW)
    assert later == []  # no broker countdown: the sweeper dispatches it when due


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"skill": "harness.noop", "idempotency_key": ""}, "idempotency_key"),
        ({"skill": "harness.noop", "idempotency_key": 7}, "idempotency_key"),
        ({"skill": "harness.noop", "idempotency_key": "k", "params": {"x": float("inf")}}, "params"),
        ({"skill": "unknown.skill", "idempotency_key": "k"}, "skill"),
        ({"idempotency_key": "k"}, "skill"),
    ],
)
def test_a_bad_call_is_refused_with_the_field(kwargs, field):
    with pytest.raises(OnceError) as caught:
        schedule_once(delay_seconds=5, actor="t", now=NOW, **kwargs)
    assert caught.value.field == field
    assert not TaskRun.objects.exists()


@pytest.mark.django_db
def test_a_key_too_long_for_its_namespace_and_an_unrenderable_object_key_name_their_fields():
    rule = _rule()
    with pytest.raises(OnceError) as too_long:
        schedule_once(rule=rule, idempotency_key=":" * 80, delay_seconds=1, actor="t", now=NOW)  # 240 escaped
    assert too_long.value.field == "idempotency_key"
    TriggerRule.objects.filter(pk=rule.pk).update(object_key_template="{slot[9]}")  # saved without its checks
    rule.refresh_from_db()
    with pytest.raises(OnceError) as bad_object:
        schedule_once(rule=rule, idempotency_key="k", delay_seconds=1, actor="t", now=NOW)
    assert bad_object.value.field == "rule"
    assert not TaskRun.objects.exists()
