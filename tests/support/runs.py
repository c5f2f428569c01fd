"""Runs for tests: the work a trigger would send, and its engine policy in a rule's field names."""

from dataclasses import fields

from runs.engine.claims import Work
from runs.models import TaskRun
from tasks.rules.policy import DEFAULT_LEASE_TTL_SECONDS, RetryPolicy, RunPolicy

RETRY_FIELDS = {f.name for f in fields(RetryPolicy)}


def run_policy(values: dict | None = None, *, agent: str = "") -> RunPolicy:
    """RunPolicy from {"max_attempts": 1, "lease_ttl_seconds": 60, ...}; unknown keys are refused."""
    values = dict(values or {})
    lease = values.pop("lease_ttl_seconds", None) or DEFAULT_LEASE_TTL_SECONDS
    unknown = set(values) - RETRY_FIELDS
    if unknown:
        raise TypeError(f"not a policy field: {sorted(unknown)}")
    return RunPolicy(retry=RetryPolicy(**values), lease_ttl_seconds=lease, agent=agent)


def api_work(biz_key: str, *, skill: str = "harness.noop", params=None, policy=None, **over) -> Work:
    """A run's work as the API would send it (no rule): `policy` in a rule's field names."""
    return Work(
        biz_key=biz_key,
        skill=skill,
        source=TaskRun.Source.API,
        triggered_by="tests",
        payload={"params": params or {}},
        policy=run_policy(policy),
        **over,
    )
