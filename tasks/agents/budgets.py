"""Agent budgets: calls and tokens per hour. When one is spent, runs wait for the window to reset
instead of failing (the run goes to waiting_retry with run_after at the reset).

Windows are fixed UTC hours, so "resets at" is one instant everybody can read off the dashboard.
The check is advisory under concurrency: two workers may both see the last unit of budget and both
call; the overshoot is bounded by the number of workers.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Sum
from django.db.models.functions import Coalesce

BUDGET_WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class Spend:
    calls: int
    tokens: int


@dataclass(frozen=True)
class BudgetDecision:
    allowed: bool
    reset_at: datetime
    reason: str = ""


def budget_window(now: datetime) -> tuple[datetime, datetime]:
    """The fixed hour [start, end) that `now` (aware) falls in."""
    start = now.replace(minute=0, second=0, microsecond=0)
    return start, start + BUDGET_WINDOW


def budget_decide(*, max_calls: int | None, max_tokens: int | None, spend: Spend, now: datetime) -> BudgetDecision:
    """Whether one more call fits this window's budgets. None means no limit."""
    _, reset_at = budget_window(now)
    if max_calls is not None and spend.calls >= max_calls:
        return BudgetDecision(False, reset_at, f"call budget spent ({spend.calls} of {max_calls} this hour)")
    if max_tokens is not None and spend.tokens >= max_tokens:
        return BudgetDecision(False, reset_at, f"token budget spent ({spend.tokens} of {max_tokens} this hour)")
    return BudgetDecision(True, reset_at)


def agent_spend(*, agent_id: int, now: datetime) -> Spend:
    """Calls and tokens the agent used in the current window (served by call_agent_window_idx)."""
    from runs.models import ExternalCall

    start, end = budget_window(now)
    row = ExternalCall.objects.filter(agent_id=agent_id, started_at__gte=start, started_at__lt=end).aggregate(
        calls=Count("id"),
        tokens=Coalesce(Sum("prompt_tokens"), 0) + Coalesce(Sum("completion_tokens"), 0),
    )
    return Spend(calls=row["calls"], tokens=row["tokens"] or 0)


def agent_budget_list(*, now: datetime) -> list[dict]:
    """Spend against budget for every agent, for the dashboard and the agent admin."""
    from tasks.models import Agent

    rows = []
    for agent in Agent.objects.order_by("name"):
        spend = agent_spend(agent_id=agent.id, now=now)
        decision = budget_decide(
            max_calls=agent.max_calls_per_hour, max_tokens=agent.max_tokens_per_hour, spend=spend, now=now
        )
        rows.append(
            {
                "agent": agent.name,
                "provider": agent.provider,
                "calls": spend.calls,
                "max_calls_per_hour": agent.max_calls_per_hour,
                "tokens": spend.tokens,
                "max_tokens_per_hour": agent.max_tokens_per_hour,
                "exhausted": not decision.allowed,
                "resets_at": decision.reset_at,
            }
        )
    return rows
