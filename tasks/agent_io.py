"""Agents in rule import/export files: `{"agents": [...], "rules": [...]}`, upserted by name.

An agent entry carries the NAME of its key's environment variable, never a key, so export files
are safe to commit. Rules name their agent by name ("agent": "demo-echo").
"""

import json

from django.core.exceptions import ValidationError

from tasks.file_items import STAGING_ERRORS, field_problems, file_entries, named_resolve, staging_errors
from tasks.models.agent import Agent
from tasks.pool_io import Staged, pool_lookup

AGENT_FIELDS = (
    "name",
    "provider",
    "base_url",
    "model",
    "api_key_env",
    "system_prompt",
    "allowed_tools",
    "connect_timeout_seconds",
    "read_timeout_seconds",
    "max_calls_per_hour",
    "max_tokens_per_hour",
    "store_prompts",
    "pool",
)
REQUIRED_AGENT_FIELDS = ("name", "provider", "model")
# JSON type of each imported agent field (bool is not a number); null is allowed where the model allows it.
_NUMBER = (int, float)
AGENT_IMPORT_TYPES: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "provider": str,
    "base_url": str,
    "model": str,
    "api_key_env": str,
    "system_prompt": str,
    "allowed_tools": list,
    "connect_timeout_seconds": _NUMBER,
    "read_timeout_seconds": _NUMBER,
    "max_calls_per_hour": int,
    "max_tokens_per_hour": int,
    "store_prompts": bool,
}
NULLABLE_AGENT_FIELDS = {"max_calls_per_hour", "max_tokens_per_hour"}


def agent_export() -> list[dict]:
    rows = []
    for agent in Agent.objects.select_related("pool").order_by("name"):
        row = {f: getattr(agent, f) for f in AGENT_FIELDS}
        row["pool"] = agent.pool.name if agent.pool is not None else None
        rows.append(row)
    return rows


def agent_stage(items, pools: Staged | None = None) -> tuple[dict[str, tuple[Agent, bool, bool]], list[str]]:
    """Validate the file's agents without saving: name → (agent, created, changed), and errors that
    name the agent and the field at fault. An agent's "pool" names a pool of the file or the database."""
    staged: dict[str, tuple[Agent, bool, bool]] = {}
    errors: list[str] = []
    if items is None:
        return staged, errors
    if not isinstance(items, list):
        return staged, ["file: agents must be a list of objects"]
    for label, name, item in file_entries(items, "agent", errors):
        problems = field_problems(item, AGENT_FIELDS, REQUIRED_AGENT_FIELDS)
        for f, value in item.items():
            expected = AGENT_IMPORT_TYPES.get(f)
            if expected is None or (value is None and (f in NULLABLE_AGENT_FIELDS or f in REQUIRED_AGENT_FIELDS)):
                continue
            if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
                problems.append(f"field {f}: must be {_type_name(expected)}, got {json.dumps(value)[:80]}")
        if isinstance(name, str) and name in staged:
            problems.append(f"field name: {name!r} appears more than once in the file")
        if item.get("pool") not in (None, ""):
            pool, problem = pool_lookup(item["pool"], pools or {})
            if problem:
                problems.append(f"field pool: {problem}")
            item = {**item, "pool": pool}
        elif "pool" in item:
            item = {**item, "pool": None}
        if problems or not isinstance(name, str):  # a name that is not a text is among the problems
            errors.extend(f"{label} {p}" for p in problems)
            continue
        agent = Agent.objects.filter(name=name).first()
        created = agent is None
        agent = agent or Agent()
        before = None if created else {f: getattr(agent, f) for f in AGENT_FIELDS}
        try:
            for f, value in item.items():
                setattr(agent, f, value)
            agent.full_clean()
        except (ValidationError, *STAGING_ERRORS) as exc:
            errors.extend(staging_errors(label, exc))
            continue
        staged[name] = (agent, created, created or before != {f: getattr(agent, f) for f in AGENT_FIELDS})
    return staged, errors


def agent_resolve(item: dict, staged: dict[str, tuple[Agent, bool, bool]]) -> str | None:
    """Replace a rule item's agent name by the agent (from the file or the database); an error text
    if there is no such agent."""
    return named_resolve(item, "agent", staged, Agent, "agent")


def agent_save(staged: dict[str, tuple[Agent, bool, bool]]) -> None:
    """Save changed agents; call inside the import's transaction, before the rules."""
    for agent, _created, changed in staged.values():
        if changed:
            agent.save()


def _type_name(expected: type | tuple[type, ...]) -> str:
    names: dict[type | tuple[type, ...], str] = {
        str: "a string",
        list: "a JSON list",
        int: "a whole number",
        bool: "true or false",
    }
    return names.get(expected, "a number")
