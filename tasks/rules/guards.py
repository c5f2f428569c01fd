"""A rule's guard settings as evaluation data, and the messages the rule form shows when they are wrong."""

from __future__ import annotations

from datetime import timedelta

from tasks.rules import evaluation, events, keys
from tasks.skills.sdk import registry

FLAG_NAME_MAX = 200


def rule_guards(rule) -> evaluation.Guards:
    """The frozen Guards of a TriggerRule, for tasks.rules.evaluation (which never sees the ORM)."""
    return evaluation.Guards(
        timezone=rule.timezone,
        start_window=timedelta(seconds=rule.start_window_seconds) if rule.start_window_seconds is not None else None,
        hours_start=rule.hours_start,
        hours_end=rule.hours_end,
        outside_hours=rule.outside_hours,
        weekdays=evaluation.parse_weekdays(rule.weekdays),
        excluded_dates=evaluation.parse_dates(rule.excluded_dates or []),
        depends_on=tuple(rule.depends_on or ()),
        not_ready_policy=rule.not_ready_policy,
        recheck=timedelta(seconds=rule.ready_recheck_seconds or 300),
        ready_deadline=rule.ready_deadline,
        overlap=rule.overlap,
    )


def guard_errors(rule) -> dict[str, list[str]]:
    """Field -> messages for every guard setting that is unusable; empty when all is well."""
    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    params = rule.params if isinstance(rule.params, dict) else {}
    try:
        evaluation.parse_weekdays(rule.weekdays)
    except evaluation.GuardError as exc:
        add("weekdays", str(exc))
    try:
        evaluation.parse_dates(rule.excluded_dates if rule.excluded_dates is not None else [])
    except evaluation.GuardError as exc:
        add("excluded_dates", str(exc))
    if (rule.hours_start is None) != (rule.hours_end is None):
        add(
            "hours_end" if rule.hours_end is None else "hours_start",
            "Give both business-hours start and end, or neither.",
        )
    elif rule.hours_start is not None and rule.hours_start >= rule.hours_end:
        add("hours_end", "Business hours must end after they start on the same day (e.g. 09:00-17:00).")

    depends = rule.depends_on
    if not isinstance(depends, list) or not all(isinstance(n, str) and n.strip() for n in depends):
        add("depends_on", 'A JSON list of flag names, e.g. ["pipeline.raw_data.ready"].')
    elif any(len(n) > FLAG_NAME_MAX for n in depends):
        add("depends_on", f"Flag names are at most {FLAG_NAME_MAX} characters.")
    elif depends:
        try:
            keys.validate_template(rule.depends_scope or "", params=params)
        except keys.KeyTemplateError as exc:
            add("depends_scope", str(exc))
        if rule.not_ready_policy == "wait" and rule.ready_deadline is None:
            add("ready_deadline", "The wait policy needs a local deadline (e.g. 12:00) after which the slot expires.")

    if rule.object_key_template:
        # An event rule's runs are keyed by the event: its object key may use the event's fields too.
        extra = dict.fromkeys(events.EVENT_PLACEHOLDERS) if rule.kind == "event" else {}
        try:
            keys.validate_template(rule.object_key_template, params={**params, **extra})
        except keys.KeyTemplateError as exc:
            add("object_key_template", str(exc))

    snap = rule.snapshot_fields
    if not isinstance(snap, list) or not all(isinstance(n, str) for n in snap):
        add("snapshot_fields", 'A JSON list of param names, e.g. ["threshold"].')
    else:
        unknown = [n for n in snap if n not in params]
        if unknown:
            add(
                "snapshot_fields",
                f"{unknown[0]!r} is not a param of this rule; params: {', '.join(sorted(params)) or 'none'}.",
            )

    if rule.catchup == "all" and rule.catchup_max_count == 0:
        add("catchup_max_count", "A max count of 0 would catch up nothing; use catch-up none instead.")

    identity = rule.identity if rule.identity_id else None
    if identity is not None and rule.skill in registry and not identity.may_run(rule.skill):
        why = (
            "is disabled"
            if not identity.enabled
            else f"may not run {rule.skill!r} (allowed: " + (", ".join(identity.allowed_skills) or "none") + ")"
        )
        add("identity", f"Identity {identity.name!r} {why}.")
    return errors
