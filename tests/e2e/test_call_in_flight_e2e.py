"""A real worker killed with SIGKILL while a model call is in flight, for an agent without a
budget: the call's row was written "sent" before the request, the sweeper marks it lost with its
worker when the lease expires, and the provider's request log and the rows agree (two requests,
two rows). Real Celery worker processes, the real database and broker, a real HTTP provider."""

from dataclasses import replace

import pytest
from django.utils import timezone

from runs.engine.claims import Work, run_claim
from runs.engine.sweeper import sweep
from runs.models import ExternalCall, TaskRun
from tasks.models import Agent
from tests.e2e.helpers import RUN_TIMEOUT, START_TIMEOUT, wait_finished
from tests.support.fake_model import FakeModelServer, json_completion
from tests.support.processes import wait_for
from tests.support.runs import run_policy

KEY_ENV = "HARNESS_SECRET_H9_E2E_MODEL"
KEY = "sk-e2e-7c1d9e3f5a"
GOOD = {"summary": "answered", "severity": "info"}


@pytest.fixture
def server():
    s = FakeModelServer().start()
    answer = json_completion(GOOD)
    s.respond(replace(answer, hang=120.0), answer)  # the first request hangs until the worker is dead
    yield s
    s.stop()


@pytest.mark.e2e
def test_a_worker_killed_mid_call_leaves_the_calls_row(harness, server):
    agent = Agent.objects.create(
        name="no-budget", provider="openai", base_url=server.base_url, model="gpt-test", api_key_env=KEY_ENV
    )
    assert agent.max_calls_per_hour is None and agent.max_tokens_per_hour is None
    doomed = harness.worker("doomed", concurrency=1, extra_env={KEY_ENV: KEY})
    run = run_claim(
        Work(
            biz_key="e2e:call-in-flight",
            skill="llm_json",
            source=TaskRun.Source.API,
            triggered_by="tests",
            payload={
                "params": {"prompt": "Summarise.", "action": "harness.record"},
                "output_schema": {"type": "object", "required": ["summary"]},
            },
            policy=run_policy(
                {
                    "max_attempts": 3,
                    "backoff_base_seconds": 1.0,
                    "max_delay_seconds": 2,
                    "lease_ttl_seconds": 3,
                    "jitter_min": 1.0,
                    "jitter_max": 1.0,
                },
                agent=agent.name,
            ),
        ),
        now=timezone.now(),
    ).run

    wait_for(lambda: len(server.requests) == 1, timeout=START_TIMEOUT, what="the model request to arrive")
    sent = ExternalCall.objects.get(run=run)  # written before the request went out
    assert (sent.state, sent.status, sent.attempt) == (ExternalCall.State.SENT, None, 1)
    doomed.kill9()

    wait_for(
        lambda: TaskRun.objects.filter(id=run.id, lease_expires_at__lt=timezone.now()).exists(),
        timeout=START_TIMEOUT,
        what="the dead worker's lease to expire",
    )
    assert sweep(now=timezone.now()).expired == 1
    sent.refresh_from_db()
    assert sent.state == ExternalCall.State.LOST

    harness.worker("survivor", concurrency=1, extra_env={KEY_ENV: KEY})
    wait_for(
        lambda: sweep(now=timezone.now()) and TaskRun.objects.get(id=run.id).state in TaskRun.FINISHED,
        timeout=RUN_TIMEOUT,
        interval=1.0,
        what="the retried run to finish",
    )
    run = wait_finished(run)
    assert run.state == TaskRun.State.SUCCEEDED, run.last_error
    rows = list(ExternalCall.objects.filter(run=run).order_by("id").values_list("attempt", "state", "status"))
    assert rows == [(1, "lost", None), (2, "done", 200)]
    assert len(server.requests) == len(rows) == 2
