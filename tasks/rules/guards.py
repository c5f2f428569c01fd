"""A rule's guard settings as evaluation data, and what the rule form says when they are wrong (as
Reasons, worded by tasks/sentences.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from tasks.rules import evaluation, events, keys
from tasks.rules.reasons import Reason, code
from tasks.skills.sdk import registry

if TYPE_CHECKING:  # for the signatures only: the pure layer never imports the ORM at run time
    from tasks.models import TriggerRule

FLAG_NAME_MAX = 200

KEY_TEMPLATE = code("guards.key_template")  # error (the key template's complaint)
HOURS_BOTH = code("guards.hours_both")
HOURS_ORDER = code("guards.hours_order")
FLAGS_NOT_A_LIST = code("guards.flags_not_a_list")
FLAG_NAME_TOO_LONG = code("guards.flag_name_too_long")  # max
DEADLINE_NEEDED = code("guards.deadline_needed")
SNAPSHOT_NOT_A_LIST = code("guards.snapshot_not_a_list")
SNAPSHOT_UNKNOWN_PARAM = code("guards.snapshot_unknown_param")  # name, params
CATCHUP_COUNT_ZERO = code("guards.catchup_count_zero")
IDENTITY_DISABLED = code("guards.identity_disabled")  # identity
IDENTITY_FORBIDS_SKILL = code("guards.identity_forbids_skill")  # identity, skill, allowed


def rule_guards(rule: TriggerRule) -> evaluation.Guards:
    """The frozen Guards of a TriggerRule, for tasks.rules.evaluation (which never sees the ORM)."""
    return evaluation.Guards(
        timezone=rule.timezone,
        start_window=timedelta(seconds=rule.start_window_seconds) if rule.start_window_seconds is not None else None,
        hours_start=rule.hours_start,
        hours_end=rule.hours_end,
        outside_hours=rule.outside_hours,
        weekdays=evaluation.parse_weekdays(rule.weekdays),
        excluded_dates=evaluation.parse_dates(rule.excluded_dates or []),
        # The model builds it from the stored calendar and its library (None: no calendar).
        calendar=getattr(rule, "business_days", None),
        depends_on=tuple(rule.depends_on or ()),
        not_ready_policy=rule.not_ready_policy,
        recheck=timedelta(seconds=rule.ready_recheck_seconds or 300),
        ready_deadline=rule.ready_deadline,
        overlap=rule.overlap,
    )


def guard_errors(rule: TriggerRule) -> dict[str, list[Reason]]:
    """Field -> what is wrong, for every guard setting that is unusable; empty when all is well."""
    errors: dict[str, list[Reason]] = {}

    def add(field: str, name: str, /, **params: Any) -> None:
        errors.setdefault(field, []).append(Reason.of(name, **params))

    params = rule.params if isinstance(rule.params, dict) else {}
    try:
        evaluation.parse_weekdays(rule.weekdays)
    except evaluation.GuardError as exc:
        errors.setdefault("weekdays", []).append(exc.reason)
    try:
        evaluation.parse_dates(rule.excluded_dates if rule.excluded_dates is not None else [])
    except evaluation.GuardError as exc:
        errors.setdefault("excluded_dates", []).append(exc.reason)
    if (rule.hours_start is None) != (rule.hours_end is None):
        add("hours_end" if rule.hours_end is None else "hours_start", HOURS_BOTH)
    elif rule.hours_start is not None and rule.hours_end is not None and rule.hours_start >= rule.hours_end:
        add("hours_end", HOURS_ORDER)

    depends = rule.depends_on
    if not isinstance(depends, list) or not all(isinstance(n, str) and n.strip() for n in depends):
        add("depends_on", FLAGS_NOT_A_LIST)
    elif any(len(n) > FLAG_NAME_MAX for n in depends):
        add("depends_on", FLAG_NAME_TOO_LONG, max=FLAG_NAME_MAX)
    elif depends:
        try:
            keys.validate_template(rule.depends_scope or "", params=params)
        except keys.KeyTemplateError as exc:
            add("depends_scope", KEY_TEMPLATE, error=str(exc))
        if rule.not_ready_policy == "wait" and rule.ready_deadline is None:
            add("ready_deadline", DEADLINE_NEEDED)

    if rule.object_key_template:
        # An event rule's runs are keyed by the event: its object key may use the event's fields too.
        extra = dict.fromkeys(events.EVENT_PLACEHOLDERS) if rule.kind == "event" else {}
        try:
            keys.validate_template(rule.object_key_template, params={**params, **extra})
        except keys.KeyTemplateError as exc:
            add("object_key_template", KEY_TEMPLATE, error=str(exc))

    snap = rule.snapshot_fields
    if not isinstance(snap, list) or not all(isinstance(n, str) for n in snap):
        add("snapshot_fields", SNAPSHOT_NOT_A_LIST)
    else:
        unknown = [n for n in snap if n not in params]
        if unknown:
            add(
                "snapshot_fields",
                SNAPSHOT_UNKNOWN_PARAM,
                name=repr(unknown[0]),
                params=", ".join(sorted(params)) or "-",
            )

    if rule.catchup == "all" and rule.catchup_max_count == 0:
        add("catchup_max_count", CATCHUP_COUNT_ZERO)

    identity = rule.identity if rule.identity_id else None
    if identity is not None and rule.skill in registry and not identity.may_run(rule.skill):
        if not identity.enabled:
            add("identity", IDENTITY_DISABLED, identity=repr(identity.name))
        else:
            allowed = ", ".join(identity.allowed_skills) or "-"
            add(
                "identity",
                IDENTITY_FORBIDS_SKILL,
                identity=repr(identity.name),
                skill=repr(rule.skill),
                allowed=allowed,
            )
    return errors
