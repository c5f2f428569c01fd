"""A run's engine policy for tests, from the retry-policy field names a rule uses."""

from dataclasses import fields

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
