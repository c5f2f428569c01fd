"""Agent runs under a threads-pool worker in the end-to-end tests: its environment (a PostgreSQL
connection pool), their policy, the control worker and beat beside it, a model run's claim, and how
their attempts ended. Shared by the agent-fault and rolling-upgrade tests."""

from collections import Counter

from runs.engine.claims import Work, run_claim
from runs.models import Attempt, TaskRun
from tasks.models import Agent
from tests.support.processes import Harness
from tests.support.runs import run_policy

POOL_MAX = 10
LEASE_TTL = 6  # renewed every 2 s while the run waits; a dead worker's runs are retried 6 s on
POLICY = {
    "max_attempts": 10,  # a database restart may cost a run several attempts; none may fail for good
    "backoff_base_seconds": 1.0,
    "max_delay_seconds": 2,
    "max_retry_window_seconds": 3600,
    "jitter_min": 1.0,
    "jitter_max": 1.0,
    "lease_ttl_seconds": LEASE_TTL,
}

AGENT_ENV = {"HARNESS_DB_POOL_MAX": str(POOL_MAX), "HARNESS_DB_POOL_MIN": "1"}
KEY_ENV = "HARNESS_SECRET_H9_E2E_MODEL"
KEY = "sk-e2e-7c1d0a9b3e"
GOOD = {"summary": "quiet night", "severity": "info"}
MODEL_TTL = 6  # renewed every 2 s: 4 s of slack for a pass on a loaded machine


def control(harness: Harness, env: dict | None = None) -> None:
    """Ticks and sweeps: a small worker of their own and a beat, up for the whole test."""
    harness.worker("control", concurrency=1, args=("--queues=harness_control",), extra_env=env)
    harness.beat(extra_env=env)


def attempt_story(ids: list[int]) -> dict:
    """How the attempts ended, by worker: {("agents1", "lease_expired", "lease_lost"): 500, ...}."""
    rows = Attempt.objects.filter(run_id__in=ids).values_list("worker", "outcome", "error_kind")
    return dict(sorted(Counter((w.split("@")[0], o, k) for w, o, k in rows).items()))


def model_claim(agent: Agent, i: int, *, now) -> int:
    payload = {
        "params": {"prompt": "Summarise {topic}.", "topic": f"night {i}", "action": "harness.record"},
        "output_schema": {"type": "object", "required": ["summary"]},
    }
    policy = run_policy({**POLICY, "lease_ttl_seconds": MODEL_TTL}, agent=agent.name)
    work = Work(
        biz_key=f"model:{i}",
        skill="llm_json",
        source=TaskRun.Source.API,
        triggered_by="e2e",
        payload=payload,
        policy=policy,
    )
    return run_claim(work, now=now).run.id
