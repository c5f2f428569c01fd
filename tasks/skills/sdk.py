"""The skill registry: named, versioned callables that a run executes.

A skill is registered with ``@skill("name")`` and called as ``fn(ctx)`` where ``ctx`` is a
:class:`SkillContext`. It returns a JSON-serialisable result (or None) and signals failure by
raising :class:`SkillError` with an error kind; any other exception is "unclassified" and fails
the run for good. Writes that must not happen twice go inside ``with ctx.fenced():``, which
commits only while this attempt still holds the run's lease (invariant 2).
"""

import hashlib
import inspect
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol


class ErrorKind:
    TIMEOUT = "timeout"
    RATE_LIMITED = "rate_limited"
    DEPENDENCY_UNREACHABLE = "dependency_unreachable"
    INVALID_PARAM = "invalid_param"
    PERMISSION_DENIED = "permission_denied"
    STATE_PRECONDITION = "state_precondition"
    LEASE_LOST = "lease_lost"
    # The model answered, but its output did not parse or failed the rule's schema. Retried within
    # the rule's max_attempts (a model may do better next time), then dead-lettered with the raw output.
    MODEL_INVALID_OUTPUT = "model_invalid_output"
    UNCLASSIFIED = "unclassified"

    RETRYABLE = frozenset({TIMEOUT, RATE_LIMITED, DEPENDENCY_UNREACHABLE, LEASE_LOST, MODEL_INVALID_OUTPUT})
    NEVER_RETRIED = frozenset({INVALID_PARAM, PERMISSION_DENIED, STATE_PRECONDITION})
    ALL = RETRYABLE | NEVER_RETRIED | {UNCLASSIFIED}


class SkillError(Exception):
    """Raised by a skill to fail an attempt with a known error kind."""

    def __init__(self, kind: str, message: str = ""):
        if kind not in ErrorKind.ALL:
            raise ValueError(f"unknown error kind {kind!r}; one of {sorted(ErrorKind.ALL)}")
        super().__init__(message or kind)
        self.kind = kind


class RunParked(Exception):
    """Raised by a skill to park its run without failing the attempt."""


class AwaitApproval(RunParked):
    """A medium/high-risk action needs a human: the run waits in awaiting_approval."""

    def __init__(self, *, step: str, action: str, risk: str, args: dict[str, Any], ttl: timedelta):
        super().__init__(f"action {action!r} ({risk} risk) awaits approval")
        self.step, self.action, self.risk, self.action_args, self.ttl = step, action, risk, args, ttl


class BudgetWait(RunParked):
    """The agent's hourly budget is spent: the run waits until the window resets."""

    kind = "budget"  # the run's last_error_kind while it waits

    def __init__(self, *, agent: str, until: datetime, reason: str):
        super().__init__(f"agent {agent!r}: {reason}; waiting until {until:%Y-%m-%dT%H:%M:%SZ}")
        self.agent, self.until, self.reason = agent, until, reason


class ProviderWait(BudgetWait):
    """The agent's provider pool is paused (a 429 Retry-After) or out of rate tokens: the run waits
    until then, like a spent budget: no attempt counted, never dead-lettered for it."""

    kind = "provider_wait"


def digest(value: Any) -> str:
    """SHA-256 of the canonical JSON of `value` (sorted keys, no spaces)."""
    return hashlib.sha256(
        json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()


class SkillRuntime(Protocol):
    """What the executor supplies behind a context: checkpoints, proposals and recorded model calls
    (runs/engine/calls.py). A protocol, so skills and this SDK never import the execution app."""

    def step(self, ctx: "SkillContext", name: str, fn: Callable[[], Any], *, write: bool) -> Any: ...

    def propose(
        self, ctx: "SkillContext", action: str, args: dict[str, Any], *, step: str | None, risk: str | None
    ) -> Any: ...

    def call_model(
        self, ctx: "SkillContext", agent: str, prompt: str, *, step: str, check: Callable[[Any], None] | None = None
    ) -> tuple[Any, int]: ...

    def mark_output(self, call_id: int, *, valid: bool) -> None: ...


class _NoRuntime:
    def __getattr__(self, name: str):
        raise RuntimeError(f"ctx.{name} is only available inside a run executed by the harness")


@dataclass(frozen=True)
class SkillContext:
    run_id: int
    biz_key: str
    fence: int
    attempt: int
    params: dict[str, Any]
    now: datetime
    logger: logging.Logger
    worker: str = ""
    rule_name: str = ""
    agent: str = ""  # the agent the run was triggered with ("" for none): the model a skill calls
    slot: datetime | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    # Supplied by the executor: a transaction that first checks this attempt still holds the lease.
    fenced: Callable[[], AbstractContextManager[None]] = field(default=lambda: _unfenced())
    # Supplied by the executor: checkpointed steps, proposals and model calls (runs/engine/calls.py).
    runtime: SkillRuntime = field(default_factory=_NoRuntime)
    # Supplied by the executor: True once this attempt's lease is lost (another worker may run it).
    # A long skill checks it between units of work; ctx.step and ctx.fenced() check it for you.
    lease_lost: Callable[[], bool] = field(default=lambda: False)
    # Supplied by the executor: the time now. ctx.now is when the attempt started; a model call,
    # a checkpoint or a provider's Retry-After minutes into the attempt needs the time it happened.
    clock: Callable[[], datetime] | None = None

    def current_time(self) -> datetime:
        """The time now (the attempt's start, ctx.now, outside the executor)."""
        return self.clock() if self.clock is not None else self.now

    @property
    def snapshot(self) -> dict[str, Any]:
        """The rule's declared snapshot fields as they were at trigger time (not as the rule is now)."""
        return dict(self.payload.get("snapshot") or {})

    @property
    def dry_run(self) -> bool:
        """A dry (trial) run: model calls are real, write steps are skipped and marked so."""
        return bool(self.payload.get("dry_run") or self.payload.get("trial"))

    def step(self, name: str, fn: Callable[[], Any], *, write: bool = False) -> Any:
        """Run `fn` once per run: a completed step's checkpointed output is returned instead.
        Raises LeaseLost (a SkillError of kind lease_lost) before starting once the lease is lost."""
        self.check_lease()
        return self.runtime.step(self, name, fn, write=write)

    def check_lease(self) -> None:
        """Raise SkillError(lease_lost) if this attempt no longer holds the run's lease."""
        if self.lease_lost():
            raise SkillError(ErrorKind.LEASE_LOST, "the run's lease was lost; this attempt stops")

    def propose(self, action: str, args: dict[str, Any], *, step: str | None = None, risk: str | None = None) -> Any:
        """Run a registered action once: low risk at once, medium/high after a human approves."""
        return self.runtime.propose(self, action, args, step=step, risk=risk)

    def call_model(
        self, agent: str, prompt: str, *, step: str, check: Callable[[Any], None] | None = None
    ) -> tuple[Any, int]:
        """Call the named agent and record the call; returns the reply and the call record's id.
        Raises BudgetWait when the agent's budget is spent, ModelCallError when the call fails.

        `check(reply)`, if given, validates the reply before the call's result is written: it raises
        (a ModelCallError of kind model_invalid_output) to refuse it, and the record says whether the
        output passed in the same write as the result, instead of a mark_output after it."""
        return self.runtime.call_model(self, agent, prompt, step=step, check=check)

    def mark_output(self, call_id: int, *, valid: bool) -> None:
        """Record whether a model call's output passed validation."""
        self.runtime.mark_output(call_id, valid=valid)


def _unfenced() -> AbstractContextManager[None]:
    raise RuntimeError("fenced() is only available inside a run executed by the harness")


# The queues a run can go to, by how its skill spends its time (docs/agents.md, "Execution modes").
# Workers are started per queue (Procfile): each queue's names are in CELERY_TASK_QUEUES too.
DEFAULT_QUEUE = "celery"  # prefork workers: a process per run, for skills that compute
AGENT_QUEUE = "agents"  # threads workers: many runs per process, for skills that wait (models, HTTP)
RUN_QUEUES = (DEFAULT_QUEUE, AGENT_QUEUE)


@dataclass(frozen=True)
class Skill:
    name: str
    fn: Callable[[SkillContext], Any]
    version: str
    description: str
    queue: str = DEFAULT_QUEUE


class SkillRegistry:
    def __init__(self) -> None:
        self._skills: dict[str, Skill] = {}

    def register(
        self, name: str, fn: Callable[[SkillContext], Any], *, version: str = "1", queue: str = DEFAULT_QUEUE
    ) -> None:
        if name in self._skills and self._skills[name].fn is not fn:
            raise ValueError(f"skill {name!r} is already registered")
        if queue not in RUN_QUEUES:
            raise ValueError(f"skill {name!r}: queue {queue!r} is none of {', '.join(RUN_QUEUES)}")
        if inspect.iscoroutinefunction(fn):
            # The context's steps, model calls and fenced writes are synchronous (the ORM); a waiting
            # skill is a plain function on the agents queue, where a thread waits for it.
            raise TypeError(f"skill {name!r} is async: write it as a plain function on queue {AGENT_QUEUE!r}")
        doc = (fn.__doc__ or "").strip().splitlines()
        self._skills[name] = Skill(name=name, fn=fn, version=version, description=doc[0] if doc else "", queue=queue)

    def queue_of(self, name: str) -> str:
        """The queue a skill's runs go to; the default queue for a name not registered here."""
        found = self._skills.get(name)
        return found.queue if found is not None else DEFAULT_QUEUE

    def get(self, name: str) -> Skill:
        try:
            return self._skills[name]
        except KeyError:
            raise SkillError(ErrorKind.INVALID_PARAM, f"no skill named {name!r} is registered") from None

    def names(self) -> list[str]:
        return sorted(self._skills)

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def __iter__(self) -> Iterator[Skill]:
        return iter(self._skills[n] for n in self.names())


registry = SkillRegistry()


def skill(
    name: str, *, version: str = "1", queue: str = DEFAULT_QUEUE
) -> Callable[[Callable[[SkillContext], Any]], Callable[[SkillContext], Any]]:
    """Register ``fn(ctx) -> result`` under ``name``; its runs go to ``queue`` unless a rule says otherwise."""

    def decorator(fn: Callable[[SkillContext], Any]) -> Callable[[SkillContext], Any]:
        registry.register(name, fn, version=version, queue=queue)
        return fn

    return decorator
