"""Calls at the model boundary, recorded: one ExternalCall row per model call, budgets counted from them,
and the runtime a SkillContext uses for steps, proposals and model calls (tasks.skills.sdk.SkillRuntime).
"""

import json
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.db import transaction

from harness_site import tracing
from runs.engine.admission import pool_call_take, pool_pause
from runs.engine.steps import Checkpoints, propose_action, run_step
from runs.engine.store import database, store
from runs.models import ExternalCall, TaskRun
from tasks.agents.budgets import Spend, budget_decide, budget_window
from tasks.agents.client import ModelCallError, ModelReply, build_messages, chat, input_sha256
from tasks.models import Agent
from tasks.skills.errors import fingerprint
from tasks.skills.sdk import BudgetWait, ErrorKind, ProviderWait, SkillContext, SkillError


class SkillRuntime:
    """The executor's runtime behind every SkillContext: checkpoints, proposals, recorded calls.
    One per attempt: it keeps the attempt's view of the run's checkpoints (runs.engine.steps);
    `checkpoints_none`: the run is known to have none yet."""

    def __init__(self, *, checkpoints_none: bool = False) -> None:
        self.checkpoints = Checkpoints(none=checkpoints_none)

    def step(self, ctx: SkillContext, name: str, fn: Callable[[], Any], *, write: bool) -> Any:
        return run_step(ctx, name, fn, write=write, checkpoints=self.checkpoints)

    def propose(
        self, ctx: SkillContext, action: str, args: dict[str, Any], *, step: str | None, risk: str | None
    ) -> Any:
        return propose_action(ctx, action, args, step=step, risk=risk, checkpoints=self.checkpoints)

    def call_model(
        self,
        ctx: SkillContext,
        agent: str,
        prompt: str,
        *,
        step: str,
        check: Callable[[ModelReply], None] | None = None,
    ) -> tuple[ModelReply, int]:
        found = store().agent_read(agent)
        if found is None:
            raise SkillError(ErrorKind.INVALID_PARAM, f"no agent named {agent!r}")
        return model_call(ctx, found, prompt, step=step, check=check)

    def mark_output(self, call_id: int, *, valid: bool) -> None:
        call_mark_output(call_id, valid=valid)


@tracing.traced(
    "model.call",
    attributes=lambda ctx, agent, *_a, **_k: {
        "harness.agent": agent.name,
        "gen_ai.system": agent.provider,
        "gen_ai.request.model": agent.model,
    },
)
def model_call(
    ctx: SkillContext,
    agent: Agent,
    prompt: str,
    *,
    step: str = "call_model",
    check: Callable[[ModelReply], None] | None = None,
) -> tuple[ModelReply, int]:
    """Call `agent` for run `ctx` and record the call; returns the reply and the ExternalCall id.

    The call's row is written "sent" before the request (by the budget's count, or just before it)
    and completed after, so a call in flight when the worker dies stays on record. With `check`, the
    skill's validation of the reply runs before that write, which then records whether the output
    passed (output_valid; one statement, not a second one from mark_output); what `check` raises
    comes out of this call once the record is written.

    Raises BudgetWait (before calling) when the agent's hourly budget is spent, ProviderWait when its
    provider's pool is paused or out of tokens, and ModelCallError (after recording the failed call)
    when the call fails.
    """
    now = ctx.current_time()
    messages = build_messages(agent, prompt)
    record = ExternalCall(
        run_id=ctx.run_id,
        attempt=ctx.attempt,
        step=step,
        agent=agent,
        agent_name=agent.name,
        provider=agent.provider,
        endpoint="echo:" if agent.provider == "echo" else agent.base_url.rstrip("/") + "/chat/completions",
        model=agent.model,
        input_sha256=input_sha256(agent.model, messages),
        prompt_text=json.dumps(messages, ensure_ascii=False) if agent.store_prompts else "",
        started_at=now,
        state=ExternalCall.State.SENT,
    )
    budget_take(agent, record, now=now)
    try:
        provider_pace(ctx, agent, now=now)
    except ProviderWait:
        if record.pk is not None:  # the budget's call was counted, but none is made
            store().call_delete(record.pk)
        raise
    if record.pk is None:
        # Before the request: a worker killed mid-call still leaves the call (maybe billed) on record.
        store().call_record(record)
    record.state = ExternalCall.State.DONE
    started = time.monotonic()
    database.connection_release()  # the call waits on the provider: hold no pooled connection meanwhile
    try:
        reply = chat(agent, messages, now=now)
    except ModelCallError as exc:
        record.status = exc.status
        record.error_kind = exc.kind
        record.error_digest = fingerprint(exc.kind, exc)
        if exc.kind == ErrorKind.MODEL_INVALID_OUTPUT:
            record.output_valid = False
        if exc.kind == ErrorKind.RATE_LIMITED and exc.retry_after is not None and agent.pool_id is not None:
            # The provider paces the whole pool, not this run alone: every run using it waits.
            # Retry-After counts from its answer, not from when this attempt started.
            until = ctx.current_time() + timedelta(seconds=exc.retry_after)
            pool_pause(pool_id=agent.pool_id, until=until)
            raise ProviderWait(agent=agent.name, until=until, reason="provider answered 429") from exc
        raise
    else:
        record.status = reply.status
        record.prompt_tokens = reply.prompt_tokens
        record.completion_tokens = reply.completion_tokens
        if check is not None:
            record.output_valid = False  # unless check() returns: whatever it raises, the output failed
            check(reply)
            record.output_valid = True
    finally:
        record.latency_ms = round((time.monotonic() - started) * 1000)
        # Completed whatever happens next: the call was made (and maybe paid for) even if the lease is lost.
        store().call_record(record)
    ctx.logger.info(
        "run %s: %s called %s in %sms (tokens %s+%s)",
        ctx.run_id,
        agent.name,
        agent.model,
        record.latency_ms,
        reply.prompt_tokens,
        reply.completion_tokens,
    )
    return reply, record.id


def budget_take(agent: Agent, record: ExternalCall, *, now: datetime) -> None:
    """Before a call: raise BudgetWait when the agent's hourly budget is spent; else, for an agent
    with a budget, count the call at once by inserting its row. The count and the insert run under a
    lock on the agent's row, so of many threads and workers asking at once exactly as many as the
    call budget allows go ahead. The limits are read from the locked row: an edit counts at once."""
    if agent.max_calls_per_hour is None and agent.max_tokens_per_hour is None:
        return  # nothing to count against: model_call writes the row just before the call
    start, end = budget_window(now)
    try:
        with transaction.atomic():
            max_calls, max_tokens = store().agent_limits_lock(agent.id)
            # Inserted with the count, in one statement where the store can; rolled back if refused.
            spend = store().call_insert_counting(record, start=start, end=end)
            decision = budget_decide(max_calls=max_calls, max_tokens=max_tokens, spend=spend, now=now)
            if not decision.allowed:
                raise BudgetWait(agent=agent.name, until=decision.reset_at, reason=decision.reason)
    except BudgetWait:
        record.pk = None  # its row went with the rollback
        raise


def provider_pace(ctx: SkillContext, agent: Agent, *, now: datetime) -> None:
    """Before a call: wait (ProviderWait) while the agent's pool is paused by its provider, or until
    its next rate token; every model call of every run using the agent draws from that pool."""
    pool = agent.pool
    if pool is None or not pool.enabled:
        return
    if pool.paused_until and pool.paused_until > now:
        raise ProviderWait(agent=agent.name, until=pool.paused_until, reason=f"pool {pool.name} paused by the provider")
    next_token = pool_call_take(pool=pool, run=TaskRun.objects.filter(id=ctx.run_id).first(), now=now)
    if next_token is not None:
        raise ProviderWait(agent=agent.name, until=next_token, reason=f"pool {pool.name} rate limit")


def call_mark_output(call_id: int, *, valid: bool) -> None:
    """Record whether the call's output passed validation."""
    store().call_mark_output(call_id, valid=valid)


def agent_spend(*, agent_id: int, now: datetime) -> Spend:
    """Calls and tokens the agent used in the current window (served by call_agent_window_idx)."""
    start, end = budget_window(now)
    return store().agent_spend(agent_id=agent_id, start=start, end=end)


class AgentBudget(TypedDict):
    """An agent's spend against its budget in the current window (agent_budget_list)."""

    agent: str
    provider: str
    calls: int
    max_calls_per_hour: int | None
    tokens: int
    max_tokens_per_hour: int | None
    exhausted: bool
    resets_at: datetime


def agent_budget_list(*, now: datetime) -> list[AgentBudget]:
    """Spend against budget for every agent, for the dashboard and the agent admin."""
    rows: list[AgentBudget] = []
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
