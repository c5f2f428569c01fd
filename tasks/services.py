"""Rule services: import/export as JSON, manual fire."""

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import DatabaseError, models, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from harness_site.audit.models import AuditEntry
from harness_site.audit.services import audit_record
from runs.engine.store import database
from tasks import sentences
from tasks.agent_io import agent_export, agent_resolve, agent_save, agent_stage
from tasks.calendar_io import calendar_export, calendar_resolve, calendar_save, calendar_stage
from tasks.file_items import STAGING_ERRORS, field_problems, file_entries, staging_errors
from tasks.models import Agent, Pool, ServiceIdentity, TriggerRule
from tasks.models.fields import model_field
from tasks.pool_io import POOL_FIELDS, pool_export, pool_lookup, pool_save, pool_stage
from tasks.rules import json_limits
from tasks.rules import plan as planned
from tasks.triggers.operator import rule_save
from tasks.triggers.plan import rule_plan

# Fields that travel in an export/import file, in the order they are written.
EXPORT_FIELDS = (
    "name",
    "enabled",
    "reason",
    "kind",
    "cron",
    "interval_seconds",
    "run_at",
    "timezone",
    "dst_gap",
    "dst_repeat",
    "dedupe_key_template",
    "event_key_by_date",
    "skill",
    "params",
    "max_attempts",
    "backoff_base_seconds",
    "max_delay_seconds",
    "max_retry_window_seconds",
    "jitter_min",
    "jitter_max",
    "lease_ttl_seconds",
    "catchup",
    "catchup_max_delay_seconds",
    "agent",
    "output_schema",
    "queue",
    "catchup_max_count",
    "catchup_spacing_seconds",
    "catchup_approval_threshold",
    "depends_on",
    "depends_scope",
    "not_ready_policy",
    "ready_recheck_seconds",
    "ready_deadline",
    "spread_seconds",
    "spread_random",
    "start_window_seconds",
    "hours_start",
    "hours_end",
    "outside_hours",
    "weekdays",
    "excluded_dates",
    "business_calendar",
    "overlap",
    "object_key_template",
    "recoverability",
    "coalesce_window_seconds",
    "snapshot_fields",
    "identity",
    "heartbeat_every_seconds",
    "heartbeat_grace_seconds",
    "objective",
    "objective_offset_seconds",
    "objective_time",
    "objective_start_before_seconds",
    "objective_lead_seconds",
    "pools",
)
# Every other column is the harness's own record of the rule (its id, edits, schedule position, pause,
# last heartbeat ping), kept by the harness and never written by a file.
STATE_FIELDS = (
    "id",
    "version",
    "next_fire_at",
    "last_slot_at",
    "paused_at",
    "pause_reason",
    "last_ping_at",
    "created_at",
    "updated_at",
)
# Local times of day, written as "HH:MM:SS".
TIME_FIELDS = tuple(f for f in EXPORT_FIELDS if isinstance(TriggerRule._meta.get_field(f), models.TimeField))
REQUIRED_IMPORT_FIELDS = ("name", "reason", "kind", "timezone", "skill")


class RuleImportError(ValueError):
    def __init__(self, errors: list[str]):
        super().__init__("\n".join(errors))
        self.errors = errors


@dataclass
class ImportResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def rule_export() -> dict:
    rules = [rule_export_one(rule) for rule in TriggerRule.objects.order_by("name")]
    doc: dict[str, Any] = {"version": 1}
    pools = [p for p in pool_export() if p != _UNTOUCHED_GLOBAL]
    if pools:
        doc["pools"] = pools
    agents = agent_export()
    if agents:
        doc["agents"] = agents
    calendars = calendar_export()
    if calendars:
        doc["calendars"] = calendars
    doc["rules"] = rules
    return doc


def rule_export_one(rule: TriggerRule) -> dict:
    """One rule as an export file (and the REST API) writes it: EXPORT_FIELDS, names for relations."""
    data = {f: getattr(rule, f) for f in EXPORT_FIELDS if f != "pools"}
    data["run_at"] = rule.run_at.isoformat() if rule.run_at else None
    data["agent"] = rule.agent.name if rule.agent is not None else None
    data["identity"] = rule.identity.name if rule.identity is not None else None
    data["business_calendar"] = rule.business_calendar.name if rule.business_calendar is not None else None
    data["pools"] = sorted(p.name for p in rule.pools.all())
    for f in TIME_FIELDS:
        data[f] = data[f].isoformat() if data[f] else None
    return data


# The global pool as the migration installs it is left out of an export (nothing to carry): its
# name and reason, every other field at its default (a field added later included).
_UNTOUCHED_GLOBAL = {
    **{f: model_field(Pool, f).get_default() for f in POOL_FIELDS},
    "name": "global",
    "reason": "Every run draws from the global pool. Empty limits: unlimited.",
}


@dataclass
class StagedImport:
    """A rules file checked and staged, nothing saved: its pools, agents, calendars and rules (unsaved instances)."""

    pools: dict[str, tuple[Pool, bool, bool]]  # name -> (pool, created, changed)
    agents: dict[str, tuple[Agent, bool, bool]]  # name -> (agent, created, changed)
    rules: list[tuple[TriggerRule, bool, bool, list | None]]  # (rule, created, changed, pools or None)
    calendars: dict


@dataclass
class RulePlan:
    """One rule of a file as it would be applied: its name, whether it is new, and its plan."""

    name: str
    created: bool
    plan: planned.Plan
    zone: str


def rule_import_stage(text: str | bytes) -> StagedImport:
    """Read and check a rules file, saving nothing. RuleImportError names every rule and field at fault."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RuleImportError([f"file: not UTF-8 (byte {exc.start} is {text[exc.start : exc.end]!r})"]) from None
    try:
        doc = json_limits.loads(text, finite=False)  # NaN and Infinity: named by field below
    except json.JSONDecodeError as exc:
        raise RuleImportError([f"file: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"]) from None
    except json_limits.JsonLimitError as exc:
        raise RuleImportError([f"file: the JSON {exc}"]) from None
    items = doc.get("rules") if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        raise RuleImportError(['file: expected {"rules": [ ... ]} or a list of rules'])

    pools, errors = pool_stage(doc.get("pools") if isinstance(doc, dict) else None)
    agents, agent_errors = agent_stage(doc.get("agents") if isinstance(doc, dict) else None, pools)
    errors += agent_errors
    calendars, calendar_errors = calendar_stage(doc.get("calendars") if isinstance(doc, dict) else None)
    errors += calendar_errors
    staged: list[tuple[TriggerRule, bool, bool, list | None]] = []
    seen: set[str] = set()
    for label, name, item in file_entries(items, "rule", errors):
        problems = _check_shape(item)
        if isinstance(name, str) and name in seen:
            problems.append(f"name: {name!r} appears more than once in the file")
        seen.add(name if isinstance(name, str) else "")
        agent_problem = agent_resolve(item, agents)
        if agent_problem:
            problems.append(f"field agent: {agent_problem}")
        calendar_problem = calendar_resolve(item, calendars)
        if calendar_problem:
            problems.append(f"field business_calendar: {calendar_problem}")
        identity_problem = _identity_resolve(item)
        if identity_problem:
            problems.append(f"field identity: {identity_problem}")
        rule_pools, pool_problems = _pools_resolve(item, pools)
        problems += pool_problems
        if problems:
            errors.extend(f"{label} {p}" for p in problems)
            continue
        rule = TriggerRule.objects.filter(name=name).first()
        created = rule is None
        rule = rule or TriggerRule()
        before = {f: getattr(rule, f) for f in RULE_FIELDS} if not created else None
        pools_before = set() if created else {p.name for p in rule.pools.all()}
        try:
            for f, value in item.items():
                setattr(rule, f, value)
            rule.full_clean()
            # What the database will be given: a "" time or a 20-digit number passes full_clean
            # (blank values are not validated) and would fail only inside the save.
            database.values_check(rule, add=created)
        except (ValidationError, *STAGING_ERRORS) as exc:
            errors.extend(staging_errors(label, exc))
            continue
        pools_changed = rule_pools is not None and {p.name for p in rule_pools} != pools_before
        changed = created or pools_changed or before != {f: getattr(rule, f) for f in RULE_FIELDS}
        staged.append((rule, created, changed, rule_pools))
    if errors:
        raise RuleImportError(errors)
    return StagedImport(pools, agents, staged, calendars)


def rule_import_plans(
    staged: StagedImport, *, now: datetime, days: int = planned.DEFAULT_DAYS, created_too: bool = True
) -> list[RulePlan]:
    """The plan of every rule the file changes (and, with `created_too`, creates), against the rules
    as they are. A new rule has no past and no consequence: only its fires ahead are planned."""
    plans = []
    for rule, created, changed, rule_pools in staged.rules:
        if not changed or (created and not created_too):
            continue
        old = None if created else TriggerRule.objects.get(pk=rule.pk)
        pools = [p.name for p in rule_pools] if rule_pools is not None else None
        plans.append(
            RulePlan(rule.name, created, rule_plan(old, rule, now=now, days=days, new_pools=pools), rule.timezone)
        )
    return plans


class RuleImportDangerous(RuleImportError):
    """The file would change something an operator must accept first (allow=True): nothing was saved."""

    def __init__(self, plans: list[RulePlan]):
        self.plans = plans
        super().__init__(
            [f"rule {p.name!r}: {sentences.say(c.said)}" for p in plans for c in p.plan.consequences if c.dangerous]
        )


def rule_import(
    text: str | bytes,
    *,
    now: datetime | None = None,
    actor=None,
    reason: str = "",
    allow: bool = True,
) -> ImportResult:
    """Upsert rules by name from a JSON document (text, or bytes that must be UTF-8): plan, then
    apply. All or nothing: any error rejects the whole file with RuleImportError, and every error
    names the rule and the field at fault; no other exception escapes for a bad file. Without
    `allow`, a plan with a dangerous consequence (a catch-up burst, a key of another shape, a
    changed identity or agent) rejects the file with RuleImportDangerous. With an `actor`, every
    rule created or changed is audited with who and `reason`, and what its plan found. `now` is when
    the import is applied (a command passes its clock reading; by default the clock is read once here)."""
    now = now or timezone.now()
    staged = rule_import_stage(text)
    # A new rule has nothing to warn about and nothing to replay: only changed rules are planned here.
    plans = rule_import_plans(staged, now=now, created_too=False) if (actor is not None or not allow) else []
    if not allow and any(p.plan.dangerous for p in plans):
        raise RuleImportDangerous([p for p in plans if p.plan.dangerous])
    by_name = {p.name: p for p in plans}

    result = ImportResult()
    current = "pools"
    try:
        with transaction.atomic():
            pool_save(staged.pools)  # first: agents and rules may name a pool new in this file
            current = "agents"
            agent_save(staged.agents)  # then: rules may name an agent new in this file
            current = "calendars"
            calendar_save(staged.calendars)  # and a calendar new in this file
            for rule, created, changed, rule_pools in staged.rules:
                current = f"rule {rule.name!r}"
                if changed:
                    rule_save(rule, now=now)
                    if rule_pools is not None:
                        rule.pools.set(rule_pools)
                    if actor is not None:
                        _import_audit(
                            rule, by_name.get(rule.name), created=created, actor=actor, reason=reason, now=now
                        )
                (result.created if created else result.updated if changed else result.unchanged).append(rule.name)
    except (DatabaseError, ValidationError, *STAGING_ERRORS) as exc:
        # The last line of defence: whatever the checks above missed, the transaction rolled back.
        raise RuleImportError([f"{current}: the database refused it: {exc}"]) from None
    return result


def _import_audit(rule: TriggerRule, found: RulePlan | None, *, created: bool, actor, reason: str, now) -> None:
    details: dict = {"created": created}
    if found is not None:
        details["changes"] = [f for f, _old, _new in found.plan.changes]
        details["consequences"] = [
            {"summary": sentences.say(c.said), "dangerous": c.dangerous} for c in found.plan.consequences
        ]
        details["past_differing"] = len(found.plan.past_differences)
    audit_record(
        actor=actor, action=AuditEntry.Action.RULE_IMPORT, target=rule, now=now, reason=reason, details=details
    )


# The rule's own columns (pools is a many-to-many, set after the rule is saved).
RULE_FIELDS = tuple(f for f in EXPORT_FIELDS if f != "pools")


def _pools_resolve(item: dict, staged) -> tuple[list | None, list[str]]:
    """Take a rule item's "pools" (names) out of it: the pools, or None when the file does not say."""
    if "pools" not in item:
        return None, []
    names = item.pop("pools")
    if names is None:
        return [], []
    if not isinstance(names, list):
        return None, [f"field pools: must be a JSON list of pool names, got {json.dumps(names)}"]
    found, problems = [], []
    for name in names:
        pool, problem = pool_lookup(name, staged)
        if problem:
            problems.append(f"field pools: {problem}")
        else:
            found.append(pool)
    return found, problems


# JSON type of each imported field, read from the model's field class; bool is excluded from the
# numbers (True is not 1 second). Not checked here: agent (a name, looked up with its own message) and
# output_schema (any JSON schema).
_NUMBER = (int, float)
UNTYPED_IMPORT_FIELDS = ("agent", "output_schema")


def _json_type(name: str) -> type | tuple[type, ...]:
    f = TriggerRule._meta.get_field(name)
    if f.many_to_many:
        return list  # of names
    if isinstance(f, models.JSONField):
        return type(f.get_default())  # {} or []: what the column holds
    if isinstance(f, models.BooleanField):
        return bool
    if isinstance(f, models.FloatField):
        return _NUMBER
    if isinstance(f, models.IntegerField):
        return int
    return str  # text, choices, and instants and times of day as ISO strings


IMPORT_TYPES = {f: _json_type(f) for f in EXPORT_FIELDS if f not in UNTYPED_IMPORT_FIELDS}
# null in a file: the column's own null, or no pools.
NULLABLE_IMPORT_FIELDS = {
    f for f in EXPORT_FIELDS if TriggerRule._meta.get_field(f).null or TriggerRule._meta.get_field(f).many_to_many
}
_TYPE_NAMES = {
    str: "a string",
    bool: "true or false",
    dict: "a JSON object",
    list: "a JSON list",
    int: "a whole number",
    _NUMBER: "a number",
}


def _identity_resolve(item: dict) -> str | None:
    """Replace a rule item's identity name by the ServiceIdentity; an error text if there is none."""
    name = item.get("identity")
    if name == "":
        item["identity"] = None  # as null: no identity
        return None
    if not isinstance(name, str):
        return None  # null, or a wrong type (reported by the type check)
    identity = ServiceIdentity.objects.filter(name=name).first()
    if identity is None:
        return f"no service identity named {name!r}"
    item["identity"] = identity
    return None


def _finite(value) -> bool:
    """False if a NaN or an infinity hides anywhere in a JSON value (json.loads accepts them)."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


def _check_shape(item: dict) -> list[str]:
    problems = []
    for f, value in item.items():
        expected = IMPORT_TYPES.get(f)
        if expected is None or (value is None and (f in NULLABLE_IMPORT_FIELDS or f in REQUIRED_IMPORT_FIELDS)):
            continue
        if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
            problems.append(f"field {f}: must be {_TYPE_NAMES[expected]}, got {json.dumps(value)[:80]}")
        elif not _finite(value):
            problems.append(f"field {f}: NaN and Infinity are not allowed")
    problems += field_problems(item, EXPORT_FIELDS, REQUIRED_IMPORT_FIELDS)
    run_at = item.get("run_at")
    if run_at is not None:
        parsed = parse_datetime(run_at) if isinstance(run_at, str) else None
        if not isinstance(run_at, str):
            pass  # reported by the type check
        elif parsed is None:
            problems.append(f"field run_at: {run_at!r} is not an ISO 8601 date-time")
        elif parsed.tzinfo is None:
            problems.append(f"field run_at: {run_at!r} has no UTC offset; write e.g. 2026-12-01T09:00:00+08:00")
        elif not _in_range(parsed):
            # PostgreSQL would store year 10000 UTC, and then no read of the rule could load it.
            problems.append(f"field run_at: {run_at!r} is outside years 1 to 9999 in UTC")
        else:
            item["run_at"] = parsed
    return problems


def _in_range(value: datetime) -> bool:
    try:
        value.astimezone(UTC)
    except OverflowError:
        return False
    return True
