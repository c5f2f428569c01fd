"""The engine policy a run is triggered with: its retry policy, lease length and agent.

Copied from the rule once, at claim time, into typed columns of the run (runs.models.TaskRun), so a
later edit of the rule does not change a run already triggered, and both run-store backends read
the same columns. The defaults here are the rule's defaults too (tasks.models.rule): one home.
"""

from dataclasses import dataclass, field

DEFAULT_LEASE_TTL_SECONDS = 300


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with jitter (invariant 5): runs.engine.retry decides with it."""

    max_attempts: int = 3
    backoff_base_seconds: float = 2.0
    max_delay_seconds: float = 300.0
    max_retry_window_seconds: float = 3600.0
    jitter_min: float = 0.5
    jitter_max: float = 1.5


@dataclass(frozen=True)
class RunPolicy:
    """What the engine needs of a run's rule: `agent` is the agent's name ("" for none)."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    lease_ttl_seconds: int = DEFAULT_LEASE_TTL_SECONDS
    agent: str = ""
