"""Runs choose their queue: a skill declares one, a rule may override it, the run keeps it, and its
messages (the claim's, a replay's, the sweeper's re-sends) go there (docs/agents.md, "Execution modes")."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from harness_site.broker import RUN_HEADER
from runs.engine.claims import run_claim
from runs.engine.sweeper import sweep
from runs.models import TaskRun
from tasks.rules.keys import MANUAL, namespace
from tasks.skills.sdk import AGENT_QUEUE, DEFAULT_QUEUE, SkillContext, SkillRegistry, registry
from tests.support.rules import make_rule
from tests.support.runs import api_work

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def taken_from(queue_name: str) -> list[int]:
    """Take every message off `queue_name` on the configured broker; their run ids."""
    from harness_site.celery import app

    out = []
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue(queue_name)
        try:
            while True:
                try:
                    message = queue.get(block=False)
                except queue.Empty:
                    return out
                out.append(message.headers[RUN_HEADER])
                message.ack()
        finally:
            queue.close()


def test_a_run_takes_its_skills_queue_and_a_rule_overrides_it():
    assert registry.queue_of("llm_json") == AGENT_QUEUE  # it waits on a model
    assert registry.queue_of("harness.noop") == DEFAULT_QUEUE
    assert registry.queue_of("not.registered") == DEFAULT_QUEUE

    plain = run_claim(api_work("q:plain"), now=T0, dispatch=False).run
    agent = run_claim(api_work("q:agent", skill="llm_json"), now=T0, dispatch=False).run
    rule = make_rule("on-agents", skill="harness.noop", queue=AGENT_QUEUE)
    key = namespace(rule.pk, MANUAL) + "x"
    overridden = run_claim(api_work(key, rule=rule), now=T0, dispatch=False).run

    assert [TaskRun.objects.get(pk=r.pk).queue for r in (plain, agent, overridden)] == [
        DEFAULT_QUEUE,
        AGENT_QUEUE,
        AGENT_QUEUE,
    ]


def test_a_rule_naming_no_known_queue_is_refused_with_a_message():
    rule = make_rule("queues", skill="harness.noop", clean=False)
    rule.queue = "gpu"
    with pytest.raises(Exception) as refused:
        rule.full_clean()
    assert "queue" in refused.value.message_dict  # type: ignore[attr-defined]


def test_a_skill_names_a_known_queue_and_is_not_async():
    skills = SkillRegistry()

    def plain(ctx: SkillContext) -> dict:
        return {}

    async def waits(ctx: SkillContext) -> dict:
        return {}

    with pytest.raises(ValueError, match="queue 'gpu'"):
        skills.register("x.gpu", plain, queue="gpu")
    with pytest.raises(TypeError, match="async"):
        skills.register("x.async", waits, queue=AGENT_QUEUE)
    skills.register("x.agent", plain, queue=AGENT_QUEUE)
    assert skills.queue_of("x.agent") == AGENT_QUEUE


def test_the_claims_message_and_the_sweepers_resend_go_to_the_runs_queue(
    purged_broker, django_capture_on_commit_callbacks
):
    now = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        agent = run_claim(api_work("q:send-agent", skill="llm_json"), now=now).run
        plain = run_claim(api_work("q:send-plain"), now=now).run
    assert taken_from(AGENT_QUEUE) == [agent.id]
    assert taken_from(DEFAULT_QUEUE) == [plain.id]

    # Both messages are gone (taken above, held by nobody): the sweeper sends each again, to its queue.
    later = now + timedelta(hours=1)
    with django_capture_on_commit_callbacks(execute=True):
        result = sweep(now=later, probe=lambda queue: None if queue == "none" else _empty(queue))
    assert result.resent == 2
    assert taken_from(AGENT_QUEUE) == [agent.id]
    assert taken_from(DEFAULT_QUEUE) == [plain.id]


def _empty(queue: str):
    from harness_site.broker import QueueProbe

    return QueueProbe(queue=queue, depth=0, oldest_age=None, queued_runs=frozenset())
