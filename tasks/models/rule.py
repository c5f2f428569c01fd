"""Trigger rules: when, in which zone, under which guards, with which key, running which skill."""

from datetime import timedelta

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _
from simple_history.models import HistoricalRecords

from tasks import sentences
from tasks.models.agent import rule_agent_errors
from tasks.rules import events, keys, schedule, spread
from tasks.rules.guards import guard_errors
from tasks.rules.objectives import Objective, objective_errors
from tasks.rules.policy import DEFAULT_LEASE_TTL_SECONDS, RetryPolicy, RunPolicy
from tasks.rules.reasons import Reason
from tasks.skills.sdk import RUN_QUEUES, registry

DEFAULT_DEDUPE_TEMPLATE = "{rule}:{slot}"


class TriggerRule(models.Model):
    class Kind(models.TextChoices):
        CRON = "cron", _("Cron")
        INTERVAL = "interval", _("Interval")
        ONCE = "once", _("One time")
        HEARTBEAT = "heartbeat", _("Heartbeat: fire when no ping arrives in time")
        EVENT = "event", _("Event: fired by its trigger sources (webhook, queue, file)")

    class CatchUp(models.TextChoices):
        NONE = "none", _("None: missed slots become decisions")
        LATEST = "latest", _("Latest: run only the most recent missed slot within the max delay")
        ALL = "all", _("All: run every missed slot within the max delay (capped, paced, maybe gated)")

    class NotReady(models.TextChoices):
        WAIT = "wait", _("Wait: re-check until the deadline, then expire with an alert")
        SKIP = "skip", _("Skip: record a decision")
        FAIL = "fail", _("Fail: a failed run with a dead-letter ticket")

    class OutsideHours(models.TextChoices):
        DEFER = "defer", _("Defer to the next opening")
        SKIP = "skip", _("Skip: record a decision")
        RUN = "run", _("Run anyway")

    class Overlap(models.TextChoices):
        ALLOW = "allow", _("Allow concurrent runs")
        SKIP = "skip", _("Skip while a run of this rule is active")
        BUFFER = "buffer", _("Buffer one: run once after the active one ends")

    class Recoverability(models.TextChoices):
        # Values are tasks.rules.backpressure's classes.
        ONE_TIME_INPUT = "one_time_input", _("One-time input: never shed")
        RECOMPUTABLE = "recomputable", _("Recomputable: shed above the high watermark")
        COALESCE = "coalesce", _("Coalesce: a newer trigger replaces its object's pending run")

    class ObjectiveKind(models.TextChoices):
        # Values are tasks.rules.objectives' kinds.
        NONE = "", _("None: no freshness objective")
        OFFSET = "offset", _("Slot + offset: done within this long after the slot")
        WALL = "wall", _("Wall time: done by this local time on the slot's business day")

    class DstGap(models.TextChoices):
        SHIFT = "shift", _("Shift to the first valid time after the gap")
        SKIP = "skip", _("Skip")

    class DstRepeat(models.TextChoices):
        FIRST = "first", _("First occurrence")
        LAST = "last", _("Last occurrence")
        BOTH = "both", _("Both occurrences")

    name = models.SlugField(
        _("name"),
        max_length=100,
        unique=True,
        help_text=_("Unique name; appears in business keys."),
    )
    enabled = models.BooleanField(_("enabled"), default=True)
    reason = models.TextField(_("reason"), help_text=_("Why this rule is configured as it is (required)."))

    kind = models.CharField(_("kind"), max_length=10, choices=Kind.choices, default=Kind.CRON)
    cron = models.CharField(
        _("cron"),
        max_length=100,
        blank=True,
        help_text=_("5 fields: minute hour day-of-month month day-of-week."),
    )
    interval_seconds = models.PositiveIntegerField(
        _("interval seconds"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
    )
    run_at = models.DateTimeField(
        _("run at"),
        null=True,
        blank=True,
        help_text=_("For one-time rules: the instant to run."),
    )
    timezone = models.CharField(
        _("timezone"),
        max_length=64,
        help_text=_("IANA zone the schedule is read in, e.g. Europe/Berlin."),
    )
    dst_gap = models.CharField(_("dst gap"), max_length=10, choices=DstGap.choices, default=DstGap.SHIFT)
    dst_repeat = models.CharField(_("dst repeat"), max_length=10, choices=DstRepeat.choices, default=DstRepeat.FIRST)

    dedupe_key_template = models.CharField(
        _("dedupe key template"),
        max_length=200,
        default=DEFAULT_DEDUPE_TEMPLATE,
        help_text=_(
            "Business key of one unit of work, stored under the rule's own namespace (rule/<id>/<kind>/). "
            "Placeholders: {rule} {slot} {business_date} {previous_business_date} {next_business_date} "
            "(business days of the rule's calendar) and params; their values are escaped."
        ),
    )
    # An event's {business_date} is the day it arrived, not a day in the event: a key with it lets the
    # same event run again tomorrow, so it is allowed only when the rule asks for that explicitly.
    event_key_by_date = models.BooleanField(
        _("event key by date"),
        default=False,
        help_text=_(
            "Event rules only: allow {business_date} (the day the event arrived) in the key, so the same "
            "event sent again on another day is a new run."
        ),
    )
    skill = models.CharField(_("skill"), max_length=100, help_text=_("Registered skill name, e.g. harness.noop."))
    params = models.JSONField(_("params"), default=dict, blank=True)
    # The model binding the rule's skill calls; PROTECT so a rule never loses its agent silently.
    agent = models.ForeignKey(
        "tasks.Agent",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="rules",
        verbose_name=_("agent"),
        help_text=_("The agent (model binding) the skill calls, e.g. for llm_json."),
    )
    queue = models.CharField(
        _("queue"),
        max_length=32,
        blank=True,
        choices=[("", _("the skill's queue")), *((q, q) for q in RUN_QUEUES)],
        help_text=_(
            "Where its runs execute: celery (prefork, for skills that compute) or agents (threads, for "
            "skills that wait on a model). Blank: the skill's own."
        ),
    )
    output_schema = models.JSONField(
        _("output schema"),
        null=True,
        blank=True,
        help_text=_("JSON Schema the model's output must validate against (llm_json)."),
    )

    max_attempts = models.PositiveIntegerField(
        _("max attempts"), default=RetryPolicy.max_attempts, validators=[MinValueValidator(1)]
    )
    backoff_base_seconds = models.FloatField(
        _("backoff base seconds"),
        default=RetryPolicy.backoff_base_seconds,
        validators=[MinValueValidator(1.0)],
    )
    max_delay_seconds = models.PositiveIntegerField(_("max delay seconds"), default=int(RetryPolicy.max_delay_seconds))
    max_retry_window_seconds = models.PositiveIntegerField(
        _("max retry window seconds"), default=int(RetryPolicy.max_retry_window_seconds)
    )
    jitter_min = models.FloatField(_("jitter min"), default=RetryPolicy.jitter_min, validators=[MinValueValidator(0.0)])
    jitter_max = models.FloatField(_("jitter max"), default=RetryPolicy.jitter_max, validators=[MinValueValidator(0.0)])
    lease_ttl_seconds = models.PositiveIntegerField(
        _("lease ttl seconds"),
        default=DEFAULT_LEASE_TTL_SECONDS,
        validators=[MinValueValidator(1)],
    )

    catchup = models.CharField(_("catchup"), max_length=10, choices=CatchUp.choices, default=CatchUp.NONE)
    catchup_max_delay_seconds = models.PositiveIntegerField(
        _("catchup max delay seconds"),
        default=300,
        help_text=_("Slots older than this when first seen are recorded as missed."),
    )

    # --- Guards: evaluated by tasks/rules/evaluation.py (pure), applied by tasks/triggers/slot.py. ---
    catchup_max_count = models.PositiveIntegerField(
        _("catchup max count"),
        null=True,
        blank=True,
        help_text=_("Catch-up all: run at most this many missed slots (the most recent)."),
    )
    catchup_spacing_seconds = models.PositiveIntegerField(
        _("catchup spacing seconds"),
        default=0,
        help_text=_("Minimum spacing between catch-up runs, so an outage is not replayed in one burst."),
    )
    catchup_approval_threshold = models.PositiveIntegerField(
        _("catchup approval threshold"),
        null=True,
        blank=True,
        help_text=_("Above this many missed slots, catch-up runs wait for approval in the admin."),
    )
    depends_on = models.JSONField(
        _("depends on"),
        default=list,
        blank=True,
        help_text=_('Readiness flag names that must be set, e.g. ["pipeline.raw_data.ready"].'),
    )
    depends_scope = models.CharField(
        _("depends scope"),
        max_length=200,
        default="{business_date}",
        blank=True,
        help_text=_("Scope the flags are looked up in; same placeholders as the dedupe key."),
    )
    not_ready_policy = models.CharField(
        _("not ready policy"),
        max_length=10,
        choices=NotReady.choices,
        default=NotReady.WAIT,
    )
    ready_recheck_seconds = models.PositiveIntegerField(
        _("ready recheck seconds"),
        default=300,
        validators=[MinValueValidator(1)],
        help_text=_("Wait policy: re-check readiness this often."),
    )
    ready_deadline = models.TimeField(
        _("ready deadline"),
        null=True,
        blank=True,
        help_text=_("Wait policy: local time (rule zone) after which a waiting slot expires."),
    )
    # --- Spread: when the run starts within its slot (tasks/rules/spread.py); the slot itself stays. ---
    spread_seconds = models.PositiveIntegerField(
        _("spread seconds"),
        default=0,
        db_default=0,
        help_text=_(
            "Start each run up to this long after its slot, at a stable offset per rule and slot, so rules "
            "due at one instant do not all start in the same second. The slot keeps its time for the key, "
            "{business_date}, catch-up, windows and objectives; only the start moves. Must be shorter than "
            "the interval (the cron's shortest gap) and the start window. 0: the default of the rule's pools."
        ),
    )
    spread_random = models.BooleanField(
        _("spread random"),
        default=False,
        db_default=False,
        help_text=_("Add a random part to each slot's offset (then previews show only the range)."),
    )
    start_window_seconds = models.PositiveIntegerField(
        _("start window seconds"),
        null=True,
        blank=True,
        help_text=_("A run may start only within this long after its slot."),
    )
    hours_start = models.TimeField(
        _("hours start"),
        null=True,
        blank=True,
        help_text=_("Business hours start (rule zone)."),
    )
    hours_end = models.TimeField(
        _("hours end"),
        null=True,
        blank=True,
        help_text=_("Business hours end (rule zone), exclusive."),
    )
    outside_hours = models.CharField(
        _("outside hours"),
        max_length=10,
        choices=OutsideHours.choices,
        default=OutsideHours.DEFER,
    )
    weekdays = models.CharField(
        _("weekdays"),
        max_length=60,
        blank=True,
        help_text=_('Allowed weekdays (rule zone), e.g. "mon-fri" or "mon,wed"; blank: all.'),
    )
    excluded_dates = models.JSONField(
        _("excluded dates"),
        default=list,
        blank=True,
        help_text=_('Local dates with no runs, e.g. ["2026-12-25"].'),
    )
    business_calendar = models.ForeignKey(
        "tasks.BusinessCalendar",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="rules",
        verbose_name=_("business calendar"),
        help_text=_(
            "Run only on this calendar's business days (holidays, make-up working days, overrides); "
            'use it with a daily cron such as "0 9 * * *" and blank weekdays. Blank: every day.'
        ),
    )
    overlap = models.CharField(_("overlap"), max_length=10, choices=Overlap.choices, default=Overlap.ALLOW)
    object_key_template = models.CharField(
        _("object key template"),
        max_length=200,
        blank=True,
        help_text=_("Runs with the same rendered object key never execute at once (object lease); blank: no limit."),
    )
    pools = models.ManyToManyField(
        "tasks.Pool",
        blank=True,
        related_name="rules",
        verbose_name=_("pools"),
        help_text=_("Named pools the rule's runs take a slot in (besides the global pool) before they start."),
    )
    # --- Flow control: backpressure class and coalescing (tasks/rules/backpressure.py). ---
    recoverability = models.CharField(
        _("recoverability"),
        max_length=20,
        choices=Recoverability.choices,
        default=Recoverability.ONE_TIME_INPUT,
        help_text=_("What intake may do with this rule's triggers above the high watermark of pending runs."),
    )
    coalesce_window_seconds = models.PositiveIntegerField(
        _("coalesce window seconds"),
        default=0,
        help_text=_(
            "Coalesce: a new run waits this long for newer triggers of its object, which replace it "
            "(0: replace only while it is still pending)."
        ),
    )
    snapshot_fields = models.JSONField(
        _("snapshot fields"),
        default=list,
        blank=True,
        help_text=_("Param names copied into each run's snapshot at trigger time."),
    )
    identity = models.ForeignKey(
        "tasks.ServiceIdentity",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="rules",
        verbose_name=_("identity"),
        help_text=_("Executing identity; its allow-list must include the skill. Blank: unrestricted."),
    )
    heartbeat_every_seconds = models.PositiveIntegerField(
        _("heartbeat every seconds"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_("Heartbeat: a ping is expected this often."),
    )
    heartbeat_grace_seconds = models.PositiveIntegerField(
        _("heartbeat grace seconds"),
        default=0,
        help_text=_("Heartbeat: extra time before firing."),
    )
    # --- Freshness objective: the latest finish of each slot (tasks/rules/objectives.py). ---
    objective = models.CharField(
        _("objective"),
        max_length=10,
        choices=ObjectiveKind.choices,
        default=ObjectiveKind.NONE,
        blank=True,
        help_text=_("By when each slot's work must be done; on-call hears before it is missed."),
    )
    objective_offset_seconds = models.PositiveIntegerField(
        _("objective offset seconds"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_("Slot + offset: e.g. 1800 for done within 30 minutes of the slot."),
    )
    objective_time = models.TimeField(
        _("objective time"),
        null=True,
        blank=True,
        help_text=_("Wall time (rule zone): e.g. 09:30, on the slot's business day."),
    )
    objective_start_before_seconds = models.PositiveIntegerField(
        _("latest start, seconds before the objective"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_(
            "Warn if the run has not started this long before the objective: e.g. 900 with an objective "
            "of 09:30 warns if not started by 09:15. Empty: no latest start."
        ),
    )
    objective_lead_seconds = models.PositiveIntegerField(
        _("lead time, seconds"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_(
            "On-call hears at least this long before the objective of a slot not done yet: e.g. 1200 for "
            "20 minutes to act. Empty: only the estimate from recent runs decides."
        ),
    )
    last_ping_at = models.DateTimeField(_("last ping at"), null=True, blank=True, editable=False)
    # When the rule was last switched off; on resume its skipped slots become "paused" decisions.
    paused_at = models.DateTimeField(_("paused at"), null=True, blank=True, editable=False)

    next_fire_at = models.DateTimeField(_("next fire at"), null=True, blank=True, editable=False)
    # The last slot the scheduler handled (run or decision); catch-up is computed from it.
    last_slot_at = models.DateTimeField(_("last slot at"), null=True, blank=True, editable=False)
    version = models.PositiveIntegerField(_("version"), default=1, editable=False)
    # Why the rule was last paused or resumed (the audit log keeps every reason; this is the latest).
    PAUSE_REASON_MAX = 500
    pause_reason = models.CharField(_("pause reason"), max_length=PAUSE_REASON_MAX, blank=True, editable=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    # Version history with a field diff in the admin (django-simple-history). Queryset .update()
    # calls (the scheduler advancing next_fire_at) write no history: only edits and actions do.
    history = HistoricalRecords(excluded_fields=["next_fire_at", "last_slot_at", "updated_at"])
    # Set before a save to word its version row (django-simple-history reads it); not a column.
    _change_reason: str

    class Meta:
        verbose_name = _("trigger rule")
        verbose_name_plural = _("trigger rules")
        ordering = ["name"]
        permissions = [
            ("run_rule_now", "Can run a rule now"),
            ("trial_run_rule", "Can trial-run a rule"),
            ("pause_rule", "Can pause and resume a rule"),
            ("backfill_rule", "Can backfill a rule"),
        ]
        indexes = [
            # rule_list_due: the tick takes enabled rules by next_fire_at.
            models.Index(fields=["next_fire_at"], condition=Q(enabled=True), name="rule_due_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(jitter_min__lte=models.F("jitter_max")), name="rule_jitter_range"),
        ]

    def __str__(self) -> str:
        return self.name

    SCHEDULE_FIELDS = (
        "kind",
        "cron",
        "interval_seconds",
        "run_at",
        "timezone",
        "dst_gap",
        "dst_repeat",
        "enabled",
        "heartbeat_every_seconds",
        "heartbeat_grace_seconds",
    )

    def save(self, *args, now=None, **kwargs) -> None:
        """Keep derived fields consistent; decides nothing else and writes no other table.

        A changed rule gets a new version; a changed schedule (or a rule switched back on) is read
        again from `now`, so paused time is not caught up; switching off stamps `paused_at`. The
        "paused" decisions for the skipped slots are the resume service's job
        (tasks.triggers.operator.rule_save). `now` comes from that service; a bare save (shell,
        fixture) reads the clock once.
        """
        now = now or timezone.now()
        # The history row is dated by the same instant, so a plan knows which schedule was in force when.
        self._history_date = now
        with transaction.atomic():
            # Locked, so a tick that advanced next_fire_at meanwhile is not rolled back by this save.
            previous = type(self).objects.select_for_update().filter(pk=self.pk).first() if self.pk else None
            schedule_changed = previous is None or any(
                getattr(previous, f) != getattr(self, f) for f in self.SCHEDULE_FIELDS
            )
            if previous is not None and _editable_values(previous) != _editable_values(self):
                self.version = previous.version + 1
            if previous is not None:
                self.last_ping_at = previous.last_ping_at  # written by rule_ping only, never by a form
                if previous.enabled and not self.enabled:
                    self.paused_at = now
                elif not previous.enabled and self.enabled:
                    self.paused_at = None
            if schedule_changed or previous is None:
                self.next_fire_at = self.first_fire_after(now) if self.enabled else None
                self.last_slot_at = None
            else:
                self.next_fire_at, self.last_slot_at = previous.next_fire_at, previous.last_slot_at
            super().save(*args, **kwargs)

    def first_fire_after(self, now):
        """The next slot after `now`; a heartbeat rule fires when its ping is overdue, not on a clock."""
        if self.kind == self.Kind.EVENT:
            return None  # fired by its trigger sources (tasks/triggers/events.py), never by the clock
        if self.kind == self.Kind.HEARTBEAT:
            if not self.heartbeat_every_seconds:
                return None
            return (self.last_ping_at or now) + self.heartbeat_deadline()
        return schedule.next_slot(self.schedule_spec(), now)

    def heartbeat_deadline(self):
        return timedelta(seconds=(self.heartbeat_every_seconds or 0) + (self.heartbeat_grace_seconds or 0))

    @property
    def business_days(self):
        """The rule's business calendar as pure data (tasks.rules.business_days), or None."""
        if self.business_calendar_id is None:
            return None
        # Built once per instance and calendar (a slot's guards, key and scope all read it).
        cached = self.__dict__.get("_business_days")
        if cached is None or cached[0] != self.business_calendar_id:
            calendar = self.business_calendar
            assert calendar is not None  # its id is set
            cached = (self.business_calendar_id, calendar.business_days())
            self.__dict__["_business_days"] = cached
        return cached[1]

    def schedule_spec(self) -> schedule.ScheduleSpec:
        # A heartbeat rule is read as an interval of its period for validation and slot labels;
        # its slots come from pings (first_fire_after), never from the interval.
        heartbeat = self.kind == self.Kind.HEARTBEAT
        return schedule.ScheduleSpec(
            kind="interval" if heartbeat else self.kind,
            timezone=self.timezone,
            cron=self.cron,
            interval_seconds=self.heartbeat_every_seconds if heartbeat else self.interval_seconds,
            run_at=self.run_at,
            dst_gap=self.dst_gap,
            dst_repeat=self.dst_repeat,
        )

    def objective_spec(self) -> Objective | None:
        """The rule's freshness objective as plain data, or None when it has none."""
        if not self.objective:
            return None
        offset = self.objective_offset_seconds
        return Objective(
            kind=self.objective,
            timezone=self.timezone,
            offset=timedelta(seconds=offset) if offset else None,
            wall=self.objective_time,
            dst_repeat=self.dst_repeat,
            start_before=_seconds(self.objective_start_before_seconds),
            lead=_seconds(self.objective_lead_seconds),
        )

    def spread_refusal(self):
        """Why the rule's own spread does not fit its schedule (a Reason), or None."""
        if not self.spread_seconds or self.kind not in (self.Kind.CRON, self.Kind.INTERVAL):
            return None
        try:
            found = spread.refusal(
                self.schedule_spec(),
                self.spread_seconds,
                at=timezone.now(),
                start_window_seconds=self.start_window_seconds,
            )
        except (schedule.ScheduleError, ValueError):
            return None  # the schedule's own field says what is wrong
        return Reason.of(found[0], **found[1]) if found else None

    def start_spread(self) -> spread.Spread:
        """The spread its slots start over: its own, else its pools' (prefetched by the tick)."""
        pools = [(p.name, p.spread_seconds) for p in self.pools.all()] if self.pk and not self.spread_seconds else []
        return spread.effective(self.spread_seconds, pools, random=self.spread_random)

    def run_policy(self) -> RunPolicy:
        """The engine policy its runs are triggered with (copied into each run's columns at claim)."""
        retry = RetryPolicy(
            max_attempts=self.max_attempts,
            backoff_base_seconds=self.backoff_base_seconds,
            max_delay_seconds=self.max_delay_seconds,
            max_retry_window_seconds=self.max_retry_window_seconds,
            jitter_min=self.jitter_min,
            jitter_max=self.jitter_max,
        )
        agent = self.agent.name if self.agent is not None else ""
        return RunPolicy(retry=retry, lease_ttl_seconds=self.lease_ttl_seconds, agent=agent)

    def clean(self) -> None:
        """Field-level messages for everything a schedule, key or skill can get wrong."""
        errors: dict[str, list[str | Promise]] = {}
        if self.kind == self.Kind.CRON and not self.cron:
            errors.setdefault("cron", []).append(_("A cron rule needs a cron expression."))
        if self.kind == self.Kind.INTERVAL and not self.interval_seconds:
            errors.setdefault("interval_seconds", []).append(_("An interval rule needs interval seconds."))
        if self.kind == self.Kind.ONCE and not self.run_at:
            errors.setdefault("run_at", []).append(_("A one-time rule needs a run-at instant."))
        if self.kind == self.Kind.HEARTBEAT and not self.heartbeat_every_seconds:
            errors.setdefault("heartbeat_every_seconds", []).append(
                _("A heartbeat rule needs the expected ping period.")
            )
        if self.kind == self.Kind.EVENT:
            try:  # an event rule has no schedule, but its zone still gives {business_date}
                schedule.validate_timezone(self.timezone)
            except schedule.ScheduleError as exc:
                errors.setdefault("timezone", []).append(sentences.schedule_error(exc))
        elif not errors:
            try:
                schedule.validate_spec(self.schedule_spec())
            except schedule.ScheduleError as exc:
                field = (
                    exc.field
                    if exc.field in {"cron", "timezone", "interval_seconds", "run_at", "dst_gap", "dst_repeat"}
                    else "kind"
                )
                errors.setdefault(field, []).append(sentences.schedule_error(exc))
        try:
            params = self.params if isinstance(self.params, dict) else {}
            if self.kind == self.Kind.EVENT:
                events.validate_key_template(
                    self.dedupe_key_template, params=params, by_date=bool(self.event_key_by_date)
                )
            else:
                keys.validate_template(self.dedupe_key_template, params=params)
        except keys.KeyTemplateError as exc:
            errors.setdefault("dedupe_key_template", []).append(str(exc))
        if not isinstance(self.params, dict):
            errors.setdefault("params", []).append(_('Params must be a JSON object, e.g. {"channel": "email"}.'))
        if self.skill and self.skill not in registry:
            known = ", ".join(sorted(registry.names()))
            errors.setdefault("skill", []).append(f"Unknown skill {self.skill!r}. Registered: {known}.")
        for f, messages in rule_agent_errors(self).items():
            errors.setdefault(f, []).extend(messages)
        if self.jitter_min is not None and self.jitter_max is not None and self.jitter_min > self.jitter_max:
            errors.setdefault("jitter_max", []).append(_("Jitter max must be at least jitter min."))
        if self.recoverability == self.Recoverability.COALESCE and not (self.object_key_template or "").strip():
            errors.setdefault("object_key_template", []).append(
                _("Coalescing needs an object key template: it replaces the pending run of the same object.")
            )
        if not (self.reason or "").strip():
            errors.setdefault("reason", []).append(_("Say why this rule is configured so."))
        for field, messages in objective_errors(
            kind=self.objective or "",
            offset_seconds=self.objective_offset_seconds,
            wall=self.objective_time,
            scheduled=self.kind in (self.Kind.CRON, self.Kind.INTERVAL, self.Kind.ONCE),
            start_before_seconds=self.objective_start_before_seconds,
            lead_seconds=self.objective_lead_seconds,
        ).items():
            errors.setdefault(field, []).extend(sentences.say(m) for m in messages)
        refused = self.spread_refusal()
        if refused is not None:
            errors.setdefault("spread_seconds", []).append(sentences.say(refused))
        for field, reasons in guard_errors(self).items():
            errors.setdefault(field, []).extend(sentences.say(m) for m in reasons)
        if errors:
            raise ValidationError(errors)


def _seconds(value: int | None) -> timedelta | None:
    return timedelta(seconds=value) if value else None


def _editable_values(rule: TriggerRule) -> dict:
    return {f.attname: getattr(rule, f.attname) for f in rule._meta.concrete_fields if f.editable and not f.primary_key}
