"""A real worker killed with SIGKILL after call_model was checkpointed: the next worker resumes at
write_result, and the model was called exactly once. Real Celery worker processes, the real
database and broker, and a real HTTP model provider on loopback."""

import pytest
from django.utils import timezone

from runs.engine.claims import Work, run_claim
from runs.engine.sweeper import sweep
from runs.models import ExternalCall, RunStep, TaskRun
from tasks.models import Agent, DiagnosticRecord
from tests.e2e.helpers import RUN_TIMEOUT, START_TIMEOUT, wait_finished
from tests.support.fake_model import FakeModelServer, json_completion
from tests.support.processes import wait_for
from tests.support.runs import run_policy

KEY_ENV = "HARNESS_SECRET_H9_E2E_MODEL"
KEY = "sk-e2e-3b7c9d1e5f"
GOOD = {"summary": "resumed", "severity": "info"}


@pytest.fixture
def server():
    s = FakeModelServer().start()
    s.respond(json_completion(GOOD))
    yield s
    s.stop()


@pytest.mark.e2e
def test_it_resumes_at_write_result_after_kill_9_with_one_model_call(harness, server):
    agent = Agent.objects.create(
        name="writer", provider="openai", base_url=server.base_url, model="gpt-test", api_key_env=KEY_ENV
    )
    payload = {
        "params": {
            "prompt": "Summarise {topic}.",
            "topic": "the night",
            "action": "harness.record",
            "pause_before_write_seconds": 4,
        },
        "output_schema": {"type": "object", "required": ["summary"]},
    }
    doomed = harness.worker("doomed", concurrency=1, extra_env={KEY_ENV: KEY})
    run = run_claim(
        Work(
            biz_key="e2e:steps",
            skill="llm_json",
            source=TaskRun.Source.API,
            triggered_by="tests",
            payload=payload,
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

    wait_for(
        lambda: RunStep.objects.filter(run=run, name="call_model").exists(),
        timeout=START_TIMEOUT,
        what="the call_model checkpoint",
    )
    doomed.kill9()
    assert not RunStep.objects.filter(run=run, name="write_result").exists()

    # The lease (3 s) runs out with nobody renewing it; the sweeper takes it back and re-dispatches.
    wait_for(
        lambda: TaskRun.objects.filter(id=run.id, lease_expires_at__lt=timezone.now()).exists(),
        timeout=START_TIMEOUT,
        what="the dead worker's lease to expire",
    )
    assert sweep(now=timezone.now()).expired == 1
    harness.worker("survivor", concurrency=1, extra_env={KEY_ENV: KEY})
    wait_for(
        lambda: sweep(now=timezone.now()) and TaskRun.objects.get(id=run.id).state in TaskRun.FINISHED,
        timeout=RUN_TIMEOUT,
        interval=1.0,
        what="the retried run to finish",
    )
    run = wait_finished(run)

    assert run.state == TaskRun.State.SUCCEEDED and run.result["output"] == GOOD
    assert list(RunStep.objects.filter(run=run).order_by("id").values_list("name", "attempt")) == [
        ("fetch_input", 1),
        ("call_model", 1),
        ("write_result", 2),
    ]
    assert ExternalCall.objects.filter(run=run).count() == 1 and len(server.requests) == 1
    assert DiagnosticRecord.objects.filter(run_id=run.id).count() == 1
