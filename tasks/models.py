"""Definitions: trigger rules and the diagnostic side-effect table."""

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from . import keys, schedule
from .skills import registry

DEFAULT_LEASE_TTL_SECONDS = 300
DEFAULT_DEDUPE_TEMPLATE = "{rule}:{slot}"


class TriggerRule(models.Model):
    class Kind(models.TextChoices):
        CRON = "cron", "Cron"
        INTERVAL = "interval", "Interval"
        ONCE = "once", "One time"

    class CatchUp(models.TextChoices):
        NONE = "none", "None: missed slots become decisions"
        LATEST = "latest", "Latest: run only the most recent missed slot within the max delay"

    class DstGap(models.TextChoices):
        SHIFT = "shift", "Shift to the first valid time after the gap"
        SKIP = "skip", "Skip"

    class DstRepeat(models.TextChoices):
        FIRST = "first", "First occurrence"
        LAST = "last", "Last occurrence"
        BOTH = "both", "Both occurrences"

    name = models.SlugField(max_length=100, unique=True, help_text="Unique name; appears in business keys.")
    enabled = models.BooleanField(default=True)
    reason = models.TextField(help_text="Why this rule is configured as it is (required).")

    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.CRON)
    cron = models.CharField(
        max_length=100, blank=True, help_text="5 fields: minute hour day-of-month month day-of-week."
    )
    interval_seconds = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    run_at = models.DateTimeField(null=True, blank=True, help_text="For one-time rules: the instant to run.")
    timezone = models.CharField(max_length=64, help_text="IANA zone the schedule is read in, e.g. Europe/Berlin.")
    dst_gap = models.CharField(max_length=10, choices=DstGap.choices, default=DstGap.SHIFT)
    dst_repeat = models.CharField(max_length=10, choices=DstRepeat.choices, default=DstRepeat.FIRST)

    dedupe_key_template = models.CharField(
        max_length=200,
        default=DEFAULT_DEDUPE_TEMPLATE,
        help_text="Business key of one unit of work. Placeholders: {rule} {slot} {business_date} and params.",
    )
    skill = models.CharField(max_length=100, help_text="Registered skill name, e.g. harness.noop.")
    params = models.JSONField(default=dict, blank=True)

    max_attempts = models.PositiveIntegerField(default=3, validators=[MinValueValidator(1)])
    backoff_base_seconds = models.FloatField(default=2.0, validators=[MinValueValidator(1.0)])
    max_delay_seconds = models.PositiveIntegerField(default=300)
    max_retry_window_seconds = models.PositiveIntegerField(default=3600)
    jitter_min = models.FloatField(default=0.5, validators=[MinValueValidator(0.0)])
    jitter_max = models.FloatField(default=1.5, validators=[MinValueValidator(0.0)])
    lease_ttl_seconds = models.PositiveIntegerField(default=DEFAULT_LEASE_TTL_SECONDS, validators=[MinValueValidator(1)])

    catchup = models.CharField(max_length=10, choices=CatchUp.choices, default=CatchUp.NONE)
    catchup_max_delay_seconds = models.PositiveIntegerField(
        default=300, help_text="Slots older than this when first seen are recorded as missed."
    )

    next_fire_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The last slot the scheduler handled (run or decision); catch-up is computed from it.
    last_slot_at = models.DateTimeField(null=True, blank=True, editable=False)
    version = models.PositiveIntegerField(default=1, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        indexes = [
            # rule_list_due: the tick takes enabled rules by next_fire_at.
            models.Index(fields=["next_fire_at"], condition=Q(enabled=True), name="rule_due_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(jitter_min__lte=models.F("jitter_max")), name="rule_jitter_range"),
        ]

    def __str__(self) -> str:
        return self.name

    SCHEDULE_FIELDS = ("kind", "cron", "interval_seconds", "run_at", "timezone", "dst_gap", "dst_repeat", "enabled")

    def save(self, *args, **kwargs) -> None:
        """Keep derived fields consistent: a changed rule gets a new version, and a changed schedule
        (or a rule switched back on) is read again from now, so paused time is not caught up."""
        previous = type(self).objects.filter(pk=self.pk).first() if self.pk else None
        schedule_changed = previous is None or any(
            getattr(previous, f) != getattr(self, f) for f in self.SCHEDULE_FIELDS
        )
        if previous is not None and _editable_values(previous) != _editable_values(self):
            self.version = previous.version + 1
        if schedule_changed:
            self.next_fire_at = schedule.next_slot(self.schedule_spec(), timezone.now()) if self.enabled else None
            self.last_slot_at = None
        super().save(*args, **kwargs)

    def schedule_spec(self) -> schedule.ScheduleSpec:
        return schedule.ScheduleSpec(
            kind=self.kind,
            timezone=self.timezone,
            cron=self.cron,
            interval_seconds=self.interval_seconds,
            run_at=self.run_at,
            dst_gap=self.dst_gap,
            dst_repeat=self.dst_repeat,
        )

    def retry_policy(self) -> dict:
        return {
            "max_attempts": self.max_attempts,
            "backoff_base_seconds": self.backoff_base_seconds,
            "max_delay_seconds": self.max_delay_seconds,
            "max_retry_window_seconds": self.max_retry_window_seconds,
            "jitter_min": self.jitter_min,
            "jitter_max": self.jitter_max,
            "lease_ttl_seconds": self.lease_ttl_seconds,
        }

    def clean(self) -> None:
        """Field-level messages for everything a schedule, key or skill can get wrong."""
        errors: dict[str, list[str]] = {}
        if self.kind == self.Kind.CRON and not self.cron:
            errors.setdefault("cron", []).append("A cron rule needs a cron expression.")
        if self.kind == self.Kind.INTERVAL and not self.interval_seconds:
            errors.setdefault("interval_seconds", []).append("An interval rule needs interval seconds.")
        if self.kind == self.Kind.ONCE and not self.run_at:
            errors.setdefault("run_at", []).append("A one-time rule needs a run-at instant.")
        if not errors:
            try:
                schedule.validate_spec(self.schedule_spec())
            except schedule.ScheduleError as exc:
                field = exc.field if exc.field in {"cron", "timezone", "interval_seconds", "run_at", "dst_gap", "dst_repeat"} else "kind"
                errors.setdefault(field, []).append(exc.message)
        try:
            keys.validate_template(self.dedupe_key_template, params=self.params if isinstance(self.params, dict) else {})
        except keys.KeyTemplateError as exc:
            errors.setdefault("dedupe_key_template", []).append(str(exc))
        if not isinstance(self.params, dict):
            errors.setdefault("params", []).append("Params must be a JSON object, e.g. {\"channel\": \"email\"}.")
        if self.skill and self.skill not in registry:
            known = ", ".join(sorted(registry.names()))
            errors.setdefault("skill", []).append(f"Unknown skill {self.skill!r}. Registered: {known}.")
        if self.jitter_min is not None and self.jitter_max is not None and self.jitter_min > self.jitter_max:
            errors.setdefault("jitter_max", []).append("Jitter max must be at least jitter min.")
        if not (self.reason or "").strip():
            errors.setdefault("reason", []).append("Say why this rule is configured so.")
        if errors:
            raise ValidationError(errors)


def _editable_values(rule: TriggerRule) -> dict:
    return {f.attname: getattr(rule, f.attname) for f in rule._meta.concrete_fields if f.editable and not f.primary_key}


class DiagnosticRecord(models.Model):
    """One row per execution of the `harness.record` skill, written under the run's fence."""

    run_id = models.BigIntegerField(db_index=True)
    biz_key = models.CharField(max_length=255, db_index=True)
    rule_name = models.CharField(max_length=100, blank=True)
    slot = models.DateTimeField(null=True, blank=True)
    fence = models.PositiveBigIntegerField()
    attempt = models.PositiveIntegerField()
    worker = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["id"]
