"""Agents in rule import/export files: `{"agents": [...], "rules": [...]}`, upserted by name.

An agent entry carries the NAME of its key's environment variable, never a key, so export files
are safe to commit. Rules name their agent by name ("agent": "demo-echo").
"""

from django.core.exceptions import ValidationError

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


def agent_export() -> list[dict]:
    rows = []
    for agent in Agent.objects.select_related("pool").order_by("name"):
        row = {f: getattr(agent, f) for f in AGENT_FIELDS}
        row["pool"] = agent.pool.name if agent.pool_id else None
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
    for index, item in enumerate(items):
        label = f"agent #{index + 1}"
        if not isinstance(item, dict):
            errors.append(f"{label}: expected an object")
            continue
        name = item.get("name")
        label = f"agent {name!r}" if isinstance(name, str) and name else label
        unknown = sorted(set(item) - set(AGENT_FIELDS))
        problems = [f"field {unknown[0]}: unknown field; known fields: {', '.join(AGENT_FIELDS)}"] if unknown else []
        problems += [f"field {f}: required" for f in REQUIRED_AGENT_FIELDS if item.get(f) in (None, "")]
        if isinstance(name, str) and name in staged:
            problems.append(f"field name: {name!r} appears more than once in the file")
        if item.get("pool") not in (None, ""):
            pool, problem = pool_lookup(item["pool"], pools or {})
            if problem:
                problems.append(f"field pool: {problem}")
            item = {**item, "pool": pool}
        elif "pool" in item:
            item = {**item, "pool": None}
        if problems:
            errors.extend(f"{label} {p}" for p in problems)
            continue
        agent = Agent.objects.filter(name=name).first()
        created = agent is None
        agent = agent or Agent()
        before = None if created else {f: getattr(agent, f) for f in AGENT_FIELDS}
        for f, value in item.items():
            setattr(agent, f, value)
        try:
            agent.full_clean()
        except ValidationError as exc:
            for f, messages in exc.message_dict.items():
                errors.extend(f"{label} field {f}: {m}" for m in messages)
            continue
        staged[name] = (agent, created, created or before != {f: getattr(agent, f) for f in AGENT_FIELDS})
    return staged, errors


def agent_resolve(item: dict, staged: dict[str, tuple[Agent, bool, bool]]) -> str | None:
    """Replace a rule item's agent name by the agent (from the file or the database); an error text
    if there is no such agent."""
    if "agent" not in item or item["agent"] in (None, ""):
        if "agent" in item:
            item["agent"] = None
        return None
    name = item["agent"]
    if not isinstance(name, str):
        return f"give the agent's name, got {name!r}"
    agent = staged[name][0] if name in staged else Agent.objects.filter(name=name).first()
    if agent is None:
        return f"no agent named {name!r} in the file or the database"
    item["agent"] = agent
    return None


def agent_save(staged: dict[str, tuple[Agent, bool, bool]]) -> None:
    """Save changed agents; call inside the import's transaction, before the rules."""
    for agent, _created, changed in staged.values():
        if changed:
            agent.save()
