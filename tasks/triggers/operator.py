"""Operator actions on rules: run now, trial run, pause/resume, backfill, and saving a rule. Each
claims through rule_fire (so it dedupes like every trigger) and writes an audit row in the same
transaction."""

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from django.db import transaction

from harness_site import tracing
from harness_site.audit.models import AuditEntry
from harness_site.audit.services import actor_name, audit_record
from runs.engine.claims import ClaimResult, run_claim
from runs.models import TaskRun
from tasks import sentences
from tasks.models import TriggerRule
from tasks.rules import schedule
from tasks.triggers.slot import record_paused_slots
from tasks.triggers.work import rule_render_key, work_for_operator

# A backfill creates at most this many runs; a larger range is refused with a clear message.
MAX_BACKFILL_RUNS = 500
DEFAULT_BACKFILL_SPACING = timedelta(seconds=10)
MAX_BACKFILL_SPACING = timedelta(hours=1)


class RuleActionError(ValueError):
    """An action that cannot be done; `field` names the form field at fault, if any."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


def rule_run_now(
    *,
    rule: TriggerRule,
    actor,
    now: datetime,
    slot: datetime | None = None,
    biz_key: str = "",
    reason: str = "",
    trial: bool = False,
) -> ClaimResult:
    """A real run for a chosen slot or business key, claimed like any trigger: a second click with
    the same slot or key is a dedupe hit, not a second run. A trial goes to the rule's trial keys (rule/<id>/trial/)."""
    try:
        with transaction.atomic():
            claim = rule_fire(
                rule=rule, actor=actor_name(actor), now=now, slot=slot, biz_key=biz_key or None, trial=trial
            )
            assert claim.run is not None  # never shed: work_for_operator skips intake flow control
            audit_record(
                actor=actor,
                action=AuditEntry.Action.RULE_TRIAL if trial else AuditEntry.Action.RULE_RUN_NOW,
                target=rule,
                now=now,
                reason=reason,
                details={
                    "run_id": claim.run.id,
                    "biz_key": claim.run.biz_key,
                    "created": claim.created,
                    "slot": slot.isoformat() if slot else None,
                },
            )
    except schedule.ScheduleError as exc:
        raise RuleActionError(
            f"The rule's schedule is invalid ({sentences.error_text(exc)}); fix the rule first."
        ) from exc
    except (KeyError, ValueError) as exc:
        raise RuleActionError(f"Cannot render the business key: {exc}", field="biz_key") from exc
    return claim


@tracing.traced(
    "trigger.operator", attributes=lambda *, rule, actor, **_: {"harness.rule": rule.name, "harness.actor": actor}
)
def rule_fire(
    *,
    rule: TriggerRule,
    actor: str,
    now: datetime,
    slot: datetime | None = None,
    biz_key: str | None = None,
    trial: bool = False,
    source: str = TaskRun.Source.MANUAL,
    run_after: datetime | None = None,
) -> ClaimResult:
    """Manual trigger: a real claim, recorded as manual and deduped like any other (see
    work_for_operator for the slot, key and trial rules)."""
    work = work_for_operator(
        rule, actor=actor, now=now, slot=slot, biz_key=biz_key, trial=trial, source=source, run_after=run_after
    )
    return run_claim(work, now=now)


def rule_save(rule: TriggerRule, *, now: datetime) -> None:
    """Save a rule (admin form, import, pause/resume). Invariant 3 across a pause, in the save's
    transaction: a rule switched off gets a "paused" decision for each slot already due that no tick
    had claimed (its next fire and after, up to now); switched back on, one per slot it skipped while off."""
    with transaction.atomic():
        before = None
        if rule.pk is not None:
            # Locked, so two saves cannot both record the same slots, nor a tick claim one meanwhile.
            before = (
                TriggerRule.objects.select_for_update()
                .filter(pk=rule.pk)
                .values("enabled", "paused_at", "next_fire_at")
                .first()
            )
        rule.save(now=now)
        if before is None:
            return
        if rule.enabled and not before["enabled"] and before["paused_at"] is not None:
            record_paused_slots(rule, since=before["paused_at"], until=now)
        elif before["enabled"] and not rule.enabled and before["next_fire_at"] and before["next_fire_at"] <= now:
            record_paused_slots(rule, since=now, until=now, due_from=before["next_fire_at"])


def rule_pause(*, rule: TriggerRule, actor, now: datetime, reason: str) -> None:
    """Stop scheduling the rule. Slots while paused are not caught up on resume (the model re-reads
    the schedule from now)."""
    _set_enabled(rule, enabled=False, actor=actor, now=now, reason=reason, action=AuditEntry.Action.RULE_PAUSE)


def rule_resume(*, rule: TriggerRule, actor, now: datetime, reason: str) -> None:
    _set_enabled(rule, enabled=True, actor=actor, now=now, reason=reason, action=AuditEntry.Action.RULE_RESUME)


def _set_enabled(rule: TriggerRule, *, enabled: bool, actor, now: datetime, reason: str, action: str) -> None:
    if not (reason or "").strip():
        raise RuleActionError("Say why (a reason is required).", field="reason")
    limit = TriggerRule.PAUSE_REASON_MAX
    if len(reason) > limit:
        raise RuleActionError(f"The reason is {len(reason)} characters; the limit is {limit}.", field="reason")
    with transaction.atomic():
        rule = TriggerRule.objects.select_for_update().get(pk=rule.pk)
        rule.enabled = enabled
        rule.pause_reason = reason
        # django-simple-history records this on the version row.
        rule._change_reason = f"{'resumed' if enabled else 'paused'}: {reason}"
        rule_save(rule, now=now)
        audit_record(actor=actor, action=action, target=rule, now=now, reason=reason)


@dataclass(frozen=True)
class BackfillPlan:
    rule: TriggerRule
    start: date
    end: date
    slots: list[datetime]
    existing: int  # slots whose biz_key already has a run (they will be dedupe hits)
    spacing: timedelta
    repeats: int = 0  # slots whose biz_key an earlier slot of this plan has (dedupe hits too)
    rule_version: int = 0  # the rule as planned: a confirmation holds for this version only
    planned_at: datetime | None = None  # "up to now" at planning: the last slot is at or before it

    @property
    def new_runs(self) -> int:
        return len(self.slots) - self.existing - self.repeats

    @property
    def last_run_after_seconds(self) -> float:
        return max(self.new_runs - 1, 0) * self.spacing.total_seconds()


def rule_backfill_plan(
    *, rule: TriggerRule, start: date, end: date, now: datetime, spacing: timedelta = DEFAULT_BACKFILL_SPACING
) -> BackfillPlan:
    """The slots of [start, end] (local dates in the rule's zone) up to now, and how many already
    have runs. Refuses ranges that are inverted, in the future, or above MAX_BACKFILL_RUNS slots."""
    if end < start:
        raise RuleActionError(f"The end date {end} is before the start date {start}.", field="end")
    if spacing < timedelta(0) or spacing > MAX_BACKFILL_SPACING:
        raise RuleActionError(
            f"Spacing must be between 0 and {int(MAX_BACKFILL_SPACING.total_seconds())} seconds.", field="spacing"
        )
    spec = rule.schedule_spec()
    try:
        zone = ZoneInfo(schedule.validate_timezone(rule.timezone).key)
        schedule.validate_spec(spec)
    except schedule.ScheduleError as exc:
        raise RuleActionError(
            f"The rule's schedule is invalid ({sentences.error_text(exc)}); fix the rule first."
        ) from exc
    first = datetime.combine(start, time.min, tzinfo=zone)
    after_last = datetime.combine(end + timedelta(days=1), time.min, tzinfo=zone)
    if first > now:
        raise RuleActionError("The range starts after now; a backfill is for the past.", field="start")
    until = min(after_last - timedelta(microseconds=1), now)
    # One more than the cap, to tell "exactly the cap" from "too many" without listing them all.
    slots = schedule.slots_between(spec, first - timedelta(microseconds=1), until, limit=MAX_BACKFILL_RUNS + 1)
    if len(slots) > MAX_BACKFILL_RUNS:
        raise RuleActionError(
            f"{start} to {end} has more than {MAX_BACKFILL_RUNS} slots; the limit for one backfill is "
            f"{MAX_BACKFILL_RUNS}. Choose a shorter range.",
            field="end",
        )
    keys = [rule_render_key(rule, s) for s in slots]
    taken = set(TaskRun.objects.filter(biz_key__in=keys).values_list("biz_key", flat=True)) if keys else set()
    existing = sum(key in taken for key in keys)
    # A key template without {slot} can give several slots one key: only the first of them claims.
    repeats = sum(key not in taken for key in keys) - len(set(keys) - taken)
    return BackfillPlan(
        rule=rule,
        start=start,
        end=end,
        slots=slots,
        existing=existing,
        spacing=spacing,
        repeats=repeats,
        rule_version=rule.version,
        planned_at=now,
    )


class BackfillStale(RuleActionError):
    """A confirmed backfill plan no longer holds: the rule is another version, or the plan made again
    from the confirmed values has other counts. Nothing was created."""

    def __init__(self, message: str, *, why: str, confirmed: dict, found: dict):
        super().__init__(message)
        self.why = why  # "version" or "count"
        self.confirmed = confirmed  # rule_version, slots, new_runs as confirmed
        self.found = found  # the same keys as found on executing (slots and new_runs only for "count")


def rule_backfill_confirmed(
    *,
    rule: TriggerRule,
    rule_version: int,
    start: date,
    end: date,
    spacing: timedelta,
    planned_at: datetime,
    slots: int,
    new_runs: int,
    actor,
    now: datetime,
    reason: str = "",
) -> dict:
    """Execute exactly the plan an operator confirmed: plan again from the confirmed values (same
    range, spacing and "up to" instant, so a slot that passed meanwhile is not added) and claim it
    only if the rule is still the confirmed version and the plan still has the confirmed number of
    slots and of new runs; otherwise raise BackfillStale and create nothing. Under the rule's row
    lock, so an edit cannot slip in between the check and the claims."""
    confirmed = {"rule_version": rule_version, "slots": slots, "new_runs": new_runs}
    with transaction.atomic():
        current = TriggerRule.objects.select_for_update().get(pk=rule.pk)
        if current.version != rule_version:
            message = (
                f"The rule changed since this plan was shown (version {rule_version}, now {current.version}); "
                "nothing was created."
            )
            found = {"rule_version": current.version}
            raise BackfillStale(message, why="version", confirmed=confirmed, found=found)
        plan = rule_backfill_plan(rule=current, start=start, end=end, now=planned_at, spacing=spacing)
        if len(plan.slots) != slots or plan.new_runs != new_runs:
            message = (
                f"The plan changed since it was shown: it would now create {plan.new_runs} run(s), not {new_runs} "
                f"({len(plan.slots)} slot(s), not {slots}); nothing was created."
            )
            found = {"rule_version": current.version, "slots": len(plan.slots), "new_runs": plan.new_runs}
            raise BackfillStale(message, why="count", confirmed=confirmed, found=found)
        return rule_backfill(plan=plan, actor=actor, now=now, reason=reason)


@tracing.traced("trigger.backfill", attributes=lambda *, plan, **_: {"harness.rule": plan.rule.name})
def rule_backfill(*, plan: BackfillPlan, actor, now: datetime, reason: str = "") -> dict:
    """Claim every planned slot, paced: the i-th new run becomes due at now + i x spacing, so the
    sweeper releases them gradually instead of flooding the workers."""
    created = hits = 0
    with transaction.atomic():
        for slot in plan.slots:
            claim = rule_fire(
                rule=plan.rule,
                actor=actor_name(actor),
                now=now,
                slot=slot,
                source=TaskRun.Source.BACKFILL,
                run_after=now + plan.spacing * created,
            )
            created += claim.created
            hits += not claim.created
        audit_record(
            actor=actor,
            action=AuditEntry.Action.RULE_BACKFILL,
            target=plan.rule,
            now=now,
            reason=reason,
            details={
                "start": plan.start.isoformat(),
                "end": plan.end.isoformat(),
                "slots": len(plan.slots),
                "created": created,
                "dedupe_hits": hits,
                "spacing_seconds": plan.spacing.total_seconds(),
            },
        )
    return {"created": created, "dedupe_hits": hits}
