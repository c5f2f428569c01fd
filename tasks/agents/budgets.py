"""Agent budgets: calls and tokens per hour. When one is spent, runs wait for the window to reset
instead of failing (the run goes to waiting_retry with run_after at the reset).

Windows are fixed UTC hours, so "resets at" is one instant everybody can read off the dashboard.
The call budget is exact under concurrency: a call is counted before it is made, under a lock on
the agent's row (runs/engine/calls.py, budget_take). Tokens are known only from a reply, so the calls in
flight when the token budget runs out may overshoot it by their own tokens.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

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
