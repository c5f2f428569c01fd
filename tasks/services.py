"""Rule services: import/export as JSON, manual fire."""

import json
from dataclasses import dataclass, field
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.dateparse import parse_datetime

from runs.claims import ClaimResult, run_claim
from runs.models import TaskRun

from . import schedule
from .models import TriggerRule
from .scheduler import rule_payload, rule_render_key

# Fields that travel in an export/import file, in the order they are written.
EXPORT_FIELDS = (
    "name", "enabled", "reason", "kind", "cron", "interval_seconds", "run_at", "timezone", "dst_gap", "dst_repeat",
    "dedupe_key_template", "skill", "params", "max_attempts", "backoff_base_seconds", "max_delay_seconds",
    "max_retry_window_seconds", "jitter_min", "jitter_max", "lease_ttl_seconds", "catchup",
    "catchup_max_delay_seconds",
)
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
    rules = []
    for rule in TriggerRule.objects.order_by("name"):
        data = {f: getattr(rule, f) for f in EXPORT_FIELDS}
        data["run_at"] = rule.run_at.isoformat() if rule.run_at else None
        rules.append(data)
    return {"version": 1, "rules": rules}


def rule_import(text: str) -> ImportResult:
    """Upsert rules by name from a JSON document. All or nothing: any error rejects the whole
    file, and every error names the rule and the field at fault."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RuleImportError([f"file: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"]) from None
    items = doc.get("rules") if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        raise RuleImportError(['file: expected {"rules": [ ... ]} or a list of rules'])

    errors: list[str] = []
    staged: list[tuple[TriggerRule, bool, bool]] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        label = f"rule #{index + 1}"
        if not isinstance(item, dict):
            errors.append(f"{label}: expected an object")
            continue
        name = item.get("name")
        label = f"rule {name!r}" if isinstance(name, str) and name else label
        problems = _check_shape(item)
        if isinstance(name, str) and name in seen:
            problems.append(f"name: {name!r} appears more than once in the file")
        seen.add(name if isinstance(name, str) else "")
        if problems:
            errors.extend(f"{label} {p}" for p in problems)
            continue
        rule = TriggerRule.objects.filter(name=name).first()
        created = rule is None
        rule = rule or TriggerRule()
        before = {f: getattr(rule, f) for f in EXPORT_FIELDS} if not created else None
        for f, value in item.items():
            setattr(rule, f, value)
        try:
            rule.full_clean()
        except ValidationError as exc:
            for f, messages in exc.message_dict.items():
                errors.extend(f"{label} field {f}: {m}" for m in messages)
            continue
        changed = created or before != {f: getattr(rule, f) for f in EXPORT_FIELDS}
        staged.append((rule, created, changed))
    if errors:
        raise RuleImportError(errors)

    result = ImportResult()
    with transaction.atomic():
        for rule, created, changed in staged:
            if changed:
                rule.save()
            (result.created if created else result.updated if changed else result.unchanged).append(rule.name)
    return result


def _check_shape(item: dict) -> list[str]:
    problems = []
    unknown = sorted(set(item) - set(EXPORT_FIELDS))
    if unknown:
        problems.append(f"field {unknown[0]}: unknown field; known fields: {', '.join(EXPORT_FIELDS)}")
    for f in REQUIRED_IMPORT_FIELDS:
        if item.get(f) in (None, ""):
            problems.append(f"field {f}: required")
    if "params" in item and not isinstance(item["params"], dict):
        problems.append("field params: must be a JSON object")
    run_at = item.get("run_at")
    if run_at is not None:
        parsed = parse_datetime(run_at) if isinstance(run_at, str) else None
        if parsed is None:
            problems.append(f"field run_at: {run_at!r} is not an ISO 8601 date-time")
        elif parsed.tzinfo is None:
            problems.append(f"field run_at: {run_at!r} has no UTC offset; write e.g. 2026-12-01T09:00:00+08:00")
        else:
            item["run_at"] = parsed
    return problems


def rule_fire(*, rule: TriggerRule, actor: str, now: datetime, slot: datetime | None = None) -> ClaimResult:
    """Manual trigger: a real claim, recorded as manual and deduped like any other.

    Without a slot, the slot is `now` cut to the minute, so a double-click within a minute is one
    run, and a manual fire of a scheduled minute is the same unit of work as the scheduled one.
    """
    if slot is None:
        slot = now.replace(second=0, microsecond=0)
    if slot.tzinfo is None:
        raise ValueError("slot must be timezone-aware")
    schedule.validate_spec(rule.schedule_spec())
    return run_claim(
        biz_key=rule_render_key(rule, slot),
        rule=rule,
        skill=rule.skill,
        source=TaskRun.Source.MANUAL,
        triggered_by=actor,
        slot=slot,
        now=now,
        payload=rule_payload(rule, slot),
    )
