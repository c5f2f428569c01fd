"""Delayed one-time runs ("remind me in 30 minutes"): `schedule_once`, for the REST API
(POST /api/v1/runs), skills and agents alike.

The reminder is the run row itself, claimed now with `run_after` at the requested instant: durable
in the database (a worker restart or a lost broker message loses nothing, the sweeper dispatches it
when due), visible and cancellable in the admin like any pending run, and deduped like any run: the
caller's idempotency key becomes the biz_key, scoped to the rule (rule/<id>/once-key/<key>) or, for
a bare skill, to the skill (skill/<skill>/once-key/<key>), so a repeat returns the run it made and no
two rules, skills or trigger kinds meet on one key. Never a broker countdown.

    from tasks.triggers.once import schedule_once

    claim = schedule_once(
        skill="harness.record", params={"note": "call back"}, delay_seconds=1800,
        idempotency_key="callback:order-7", actor="billing-agent", now=timezone.now(),
    )
    claim.run.id, claim.created   # created is False for a repeat of the same key
"""

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import transaction

from harness_site.audit.models import AuditEntry
from harness_site.audit.services import actor_name, audit_record
from runs.engine.claims import ClaimResult, Work, run_claim
from runs.models import TaskRun
from tasks import sentences
from tasks.models import TriggerRule
from tasks.rules import json_limits, keys, schedule
from tasks.rules.preview import wall_instant
from tasks.skills.sdk import registry
from tasks.triggers.work import work_for_once

# How far ahead a delayed run may be asked for; beyond it a rule with a schedule says it better.
MAX_AHEAD = timedelta(days=366)
MAX_IDEMPOTENCY_KEY = 200


class OnceError(ValueError):
    """A request that cannot be scheduled; `field` names the input at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class OnceAt:
    """When a delayed run becomes due, and how it was read (for the reply and the audit row)."""

    utc: datetime
    note: str = ""  # what a DST gap or repeat did to a local time


def once_due_at(
    *,
    now: datetime,
    run_at: datetime | None = None,
    timezone: str | None = None,
    delay_seconds: float | None = None,
    dst_gap: str = "shift",
    dst_repeat: str = "first",
) -> OnceAt:
    """The instant a delayed run is due. Exactly one of `run_at` and `delay_seconds`. An aware
    `run_at` is an instant (its offset says where); a naive one is a wall time read in the IANA
    `timezone`, under the DST policies (a rule's own, or shift / first). Pure: `now` is passed in.
    Raises OnceError naming run_at, timezone or delay_seconds."""
    if (run_at is None) == (delay_seconds is None):
        raise OnceError("run_at", "Give run_at or delay_seconds (exactly one).")
    if run_at is None:  # so delay_seconds is given (exactly one, checked above)
        if (
            isinstance(delay_seconds, bool)
            or not isinstance(delay_seconds, int | float)
            or not math.isfinite(delay_seconds)
        ):
            raise OnceError("delay_seconds", "delay_seconds must be a number of seconds.")
        if not 0 <= delay_seconds <= MAX_AHEAD.total_seconds():
            raise OnceError("delay_seconds", f"delay_seconds must be between 0 and {int(MAX_AHEAD.total_seconds())}.")
        found = OnceAt(now + timedelta(seconds=delay_seconds))
    elif run_at.tzinfo is not None:
        if timezone:
            raise OnceError("timezone", "run_at has a UTC offset already; give timezone only with a local time.")
        try:
            found = OnceAt(run_at.astimezone(UTC))
        except OverflowError:
            raise OnceError("run_at", "run_at is outside years 1 to 9999 in UTC.") from None
    else:
        if not timezone:
            raise OnceError(
                "run_at", "run_at has no UTC offset: add one (2026-12-01T09:00:00+08:00) or give timezone (IANA)."
            )
        try:
            wall = wall_instant(run_at, timezone=timezone, dst_gap=dst_gap, dst_repeat=dst_repeat)
        except schedule.ScheduleError as exc:
            field = "timezone" if exc.field == "timezone" else "run_at"
            raise OnceError(field, sentences.schedule_error(exc)) from None
        if wall.utc is None:
            raise OnceError("run_at", f"{run_at:%Y-%m-%d %H:%M} does not exist in {timezone} (a DST gap).")
        found = OnceAt(wall.utc, sentences.say(wall.note))
    if found.utc > now + MAX_AHEAD:
        raise OnceError("delay_seconds" if delay_seconds is not None else "run_at", "At most 366 days ahead.")
    return found


def schedule_once(
    *,
    idempotency_key: str,
    actor,
    now: datetime,
    rule: TriggerRule | None = None,
    skill: str | None = None,
    params: dict | None = None,
    run_at: datetime | None = None,
    timezone: str | None = None,
    delay_seconds: float | None = None,
    reason: str = "",
    fingerprint: str = "",
) -> ClaimResult:
    """Claim a one-time run of `rule` (or of a bare `skill`) due at `run_at` / after `delay_seconds`.

    The run is inserted now, pending with run_after at the due instant; the sweeper dispatches it
    then. A repeat of the idempotency key (for the same rule or skill) is a dedupe hit: the run made
    first is returned with created False, whatever else the repeat asks (the first request wins;
    the REST API refuses a repeat whose fingerprint differs). A
    run at or before `now` is dispatched at once. With a rule the run carries the rule's identity,
    retry policy and snapshot, and `params` are laid over the rule's. Raises OnceError with the field
    at fault; writes an audit row for a new run in the claim's transaction. `fingerprint` (the
    caller's hash of its request, harness_site.api.idempotency) is kept with the run, in the same
    INSERT, so a repeat can be told from another request under the same key.
    """
    if (rule is None) == (not skill):
        raise OnceError("skill", "Give a rule or a skill (exactly one).")
    skill_name = skill or ""  # the skill when there is no rule (given, checked above)
    if not isinstance(idempotency_key, str) or not idempotency_key.strip():
        raise OnceError("idempotency_key", "idempotency_key is required: a string naming this unit of work.")
    if len(idempotency_key) > MAX_IDEMPOTENCY_KEY or any(ord(c) < 32 or c == "\x7f" for c in idempotency_key):
        raise OnceError(
            "idempotency_key", f"idempotency_key: at most {MAX_IDEMPOTENCY_KEY} characters, no control characters."
        )
    params = {} if params is None else params
    if not isinstance(params, dict):
        raise OnceError("params", 'params must be a JSON object, e.g. {"note": "call back"}.')
    try:
        json_limits.check(params, where="params")
    except ValueError as exc:
        raise OnceError("params", str(exc)) from None
    if rule is not None:
        due = once_due_at(
            now=now,
            run_at=run_at,
            timezone=timezone,
            delay_seconds=delay_seconds,
            dst_gap=rule.dst_gap,
            dst_repeat=rule.dst_repeat,
        )
    else:
        if skill not in registry:
            known = ", ".join(sorted(registry.names()))
            raise OnceError("skill", f"Unknown skill {skill!r}. Registered: {known}.")
        due = once_due_at(now=now, run_at=run_at, timezone=timezone, delay_seconds=delay_seconds)
    name = actor_name(actor)
    prefix = (
        keys.namespace(rule.pk, keys.ONCE_KEY) if rule is not None else keys.skill_scoped(skill_name, keys.ONCE_KEY, "")
    )
    if len(prefix) + len(keys.escape(idempotency_key)) > keys.MAX_KEY_LENGTH:
        raise OnceError(
            "idempotency_key",
            f"idempotency_key is too long: escaped under {prefix!r} it passes the {keys.MAX_KEY_LENGTH}-character "
            "limit of a business key.",
        )
    try:
        work = (
            work_for_once(rule, key=idempotency_key, actor=name, run_after=due.utc, params=params)
            if rule is not None
            else _skill_work(skill_name, key=idempotency_key, actor=name, run_after=due.utc, params=params)
        )
    except schedule.ScheduleError as exc:
        raise OnceError(
            "rule", f"The rule's timezone is invalid ({sentences.error_text(exc)}); fix the rule first."
        ) from None
    except (KeyError, ValueError) as exc:  # the rule's object-key template cannot be rendered
        raise OnceError("rule", f"Cannot render the rule's object key: {exc}") from None
    work.payload["once"] = {
        "key": idempotency_key,
        "due_at": due.utc.isoformat(),
        "requested_at": now.isoformat(),
        "fingerprint": fingerprint,
    }
    with transaction.atomic():
        claim = run_claim(work, now=now)
        if claim.created:
            assert claim.run is not None  # created: a run was inserted
            audit_record(
                actor=actor,
                action=AuditEntry.Action.RUN_SCHEDULE_ONCE,
                target=claim.run,
                now=now,
                reason=reason,
                label=claim.run.biz_key,
                details={"due_at": due.utc.isoformat(), "rule": rule.name if rule else None, "note": due.note},
            )
    return claim


def _skill_work(skill: str, *, key: str, actor: str, run_after: datetime, params: dict) -> Work:
    """A bare skill's delayed run: no rule, so no identity (like an unrestricted rule) and the
    default retry policy; its key lives under the skill's own namespace."""
    return Work(
        biz_key=keys.skill_scoped(skill, keys.ONCE_KEY, keys.escape(key)),
        skill=skill,
        source=TaskRun.Source.API,
        triggered_by=actor,
        payload={"params": params},
        run_after=run_after,
    )
