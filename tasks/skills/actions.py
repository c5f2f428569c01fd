"""Actions: named writes a skill can propose, each graded by the risk of its effect.

The grade belongs to the action, not to the model that proposed it: a skill may raise it for one
proposal, never lower it. Low runs at once (after validation); medium and high wait for a human
(runs.engine.steps.propose_action). A handler runs inside the run's fenced transaction, so it commits at
most once per run.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tasks.models import DiagnosticRecord
from tasks.skills.sdk import ErrorKind, SkillContext, SkillError

RISKS = ("low", "medium", "high")
APPROVAL_RISKS = frozenset({"medium", "high"})


@dataclass(frozen=True)
class Action:
    name: str
    risk: str
    fn: Callable[[SkillContext, dict[str, Any]], Any]
    description: str


_actions: dict[str, Action] = {}


def action(name: str, *, risk: str) -> Callable:
    """Register ``fn(ctx, args) -> result`` as an action graded `risk`."""
    if risk not in RISKS:
        raise ValueError(f"risk must be one of {RISKS}, got {risk!r}")

    def decorator(fn: Callable[[SkillContext, dict[str, Any]], Any]) -> Callable:
        if name in _actions and _actions[name].fn is not fn:
            raise ValueError(f"action {name!r} is already registered")
        doc = (fn.__doc__ or "").strip().splitlines()
        _actions[name] = Action(name=name, risk=risk, fn=fn, description=doc[0] if doc else "")
        return fn

    return decorator


def action_get(name: str) -> Action:
    try:
        return _actions[name]
    except KeyError:
        known = ", ".join(sorted(_actions))
        raise SkillError(ErrorKind.INVALID_PARAM, f"no action named {name!r}; registered: {known}") from None


def effective_risk(registered: str, requested: str | None) -> str:
    """The higher of the action's own grade and the one the skill asked for."""
    if requested is None:
        return registered
    if requested not in RISKS:
        raise SkillError(ErrorKind.INVALID_PARAM, f"risk must be one of {RISKS}, got {requested!r}")
    return max(registered, requested, key=RISKS.index)


@action("harness.record", risk="low")
def record(ctx: SkillContext, args: dict[str, Any]) -> dict:
    """Write one DiagnosticRecord (low risk): duplicates are countable."""
    return DiagnosticRecord.record(ctx)


@action("harness.record_guarded", risk="high")
def record_guarded(ctx: SkillContext, args: dict[str, Any]) -> dict:
    """Write one DiagnosticRecord after a human approves (high risk): to try the approval desk."""
    return DiagnosticRecord.record(ctx)
