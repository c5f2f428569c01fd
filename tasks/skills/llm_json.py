"""The generic `llm_json` skill: prompt from the run's snapshot → the rule's agent → JSON validated
against the rule's schema → one write.

Steps (each checkpointed; see runs/engine/steps.py):
  fetch_input   which agent and schema this run uses (from the payload snapshot taken at trigger time)
  call_model    render the prompt, call the agent, parse and validate; invalid output is not checkpointed,
                so the retry asks the model again (model_invalid_output, bounded by max_attempts)
  write_result  the rule's params.action (a registered action, e.g. harness.record) with the output;
                low risk runs at once, medium/high waits for approval; skipped in a dry run
"""

import hashlib
import json
import re
import time
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from tasks.agents.client import ModelCallError
from tasks.skills.sdk import AGENT_QUEUE, ErrorKind, SkillContext, SkillError, digest, skill

PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Params that configure the skill rather than feed the prompt.
SKILL_PARAMS = frozenset({"prompt", "action", "action_risk", "approval_ttl_seconds", "pause_before_write_seconds"})


def render_prompt(template: str, values: dict[str, Any]) -> str:
    """Fill {name} placeholders from `values` ({{ and }} are literal braces). Non-strings become JSON.
    Raises invalid_param naming the first unknown placeholder."""

    def fill(match: re.Match) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        name = match.group(1)
        if name not in values:
            known = ", ".join(sorted(values))
            raise SkillError(ErrorKind.INVALID_PARAM, f"prompt placeholder {{{name}}} is not a param; known: {known}")
        value = values[name]
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)

    return PLACEHOLDER.sub(fill, template)


def prompt_values(ctx: SkillContext) -> dict[str, Any]:
    inputs = {k: v for k, v in ctx.params.items() if k not in SKILL_PARAMS}
    found = ctx.payload.get("snapshot")
    snapshot: dict[str, Any] = found if isinstance(found, dict) else {}
    values: dict[str, Any] = {**inputs, **snapshot}
    values.update(
        biz_key=ctx.biz_key,
        rule=ctx.rule_name,
        slot=ctx.payload.get("slot_local", ""),
        input_json=json.dumps({**inputs, **snapshot}, sort_keys=True, ensure_ascii=False),
    )
    return values


MAX_PAUSE_SECONDS = 300
# Without a template the input itself is the prompt, so the echo agent answers with it.
DEFAULT_PROMPT = "{input_json}"


@skill("llm_json", queue=AGENT_QUEUE)  # it waits on a model: many at once on a threads worker
def llm_json(ctx: SkillContext) -> dict:
    """Ask the rule's agent for JSON that validates against the rule's output schema, then write it."""
    spec = ctx.step("fetch_input", lambda: _fetch_input(ctx))
    output = ctx.step("call_model", lambda: _call_model(ctx, spec))
    _diagnostic_pause(ctx)
    action = ctx.params.get("action")
    if action:
        written = ctx.propose(action, {"output": output}, step="write_result", risk=ctx.params.get("action_risk"))
    else:
        written = ctx.step("write_result", lambda: {"output_sha256": digest(output)}, write=True)
    return {"output": output, "write": written, "dry_run": ctx.dry_run}


def _diagnostic_pause(ctx: SkillContext) -> None:
    """params.pause_before_write_seconds: wait between call_model and write_result, outside any
    transaction, so an operator (or a test) can see the checkpoint, or kill the worker, mid-run."""
    seconds = ctx.params.get("pause_before_write_seconds")
    if seconds is None:
        return
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds <= MAX_PAUSE_SECONDS:
        raise SkillError(
            ErrorKind.INVALID_PARAM,
            f"params.pause_before_write_seconds must be 0..{MAX_PAUSE_SECONDS}, got {seconds!r}",
        )
    time.sleep(seconds)


def _fetch_input(ctx: SkillContext) -> dict:
    agent = ctx.agent
    if not agent:
        raise SkillError(ErrorKind.INVALID_PARAM, "llm_json: the rule names no agent")
    prompt = render_prompt(ctx.params.get("prompt") or DEFAULT_PROMPT, prompt_values(ctx))
    return {
        "agent": agent,
        "output_schema": ctx.payload.get("output_schema"),
        "prompt_sha256": hashlib.sha256(prompt.encode()).hexdigest(),
    }


def _call_model(ctx: SkillContext, spec: dict) -> Any:
    prompt = render_prompt(ctx.params.get("prompt") or DEFAULT_PROMPT, prompt_values(ctx))
    schema = spec.get("output_schema")
    checked: list[Any] = []
    # Checked before the call's result is written, so that write records whether the output passed.
    ctx.call_model(spec["agent"], prompt, step="call_model", check=lambda reply: checked.append(_output(reply, schema)))
    return checked[0]


def _output(reply: Any, schema: dict | None) -> Any:
    """The reply's JSON, valid against `schema` (None: any JSON); else model_invalid_output."""
    try:
        output = json.loads(reply.content)
    except ValueError as exc:
        raise ModelCallError(
            ErrorKind.MODEL_INVALID_OUTPUT, f"model output is not JSON: {exc}", raw_output=reply.content
        ) from None
    if schema is not None:
        error = best_match(Draft202012Validator(schema).iter_errors(output))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
            raise ModelCallError(
                ErrorKind.MODEL_INVALID_OUTPUT,
                f"model output fails the rule's schema at {where}: {error.message}",
                raw_output=reply.content,
            )
    return output
