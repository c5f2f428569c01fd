"""Execution records: runs, attempts, leases, decisions."""

from django.db import models
from django.db.models import Q


class TaskRun(models.Model):
    """One unit of work, unique by biz_key (invariant 1). Retries and replays are attempts of it."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        WAITING_RETRY = "waiting_retry", "Waiting to retry"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    class Source(models.TextChoices):
        SCHEDULER = "scheduler", "Scheduler"
        CATCHUP = "catchup", "Scheduler catch-up"
        MANUAL = "manual", "Manual"
        API = "api", "API"
        REPLAY = "replay", "Replay"

    CLAIMABLE = (State.PENDING, State.WAITING_RETRY)
    FINISHED = (State.SUCCEEDED, State.FAILED, State.CANCELLED)

    biz_key = models.CharField(max_length=255)
    rule = models.ForeignKey("tasks.TriggerRule", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    rule_name = models.CharField(max_length=100, blank=True, help_text="Kept if the rule is deleted.")
    rule_version = models.PositiveIntegerField(null=True, blank=True)
    skill = models.CharField(max_length=100)
    source = models.CharField(max_length=20, choices=Source.choices)
    triggered_by = models.CharField(max_length=150, blank=True, help_text="Who fired it: scheduler, an operator, …")
    executed_by = models.CharField(max_length=150, blank=True, help_text="The worker identity that ran it.")
    slot = models.DateTimeField(null=True, blank=True)
    trigger_at = models.DateTimeField()
    start_at = models.DateTimeField(null=True, blank=True)
    finish_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    run_after = models.DateTimeField()
    first_failure_at = models.DateTimeField(null=True, blank=True)
    # Params and retry policy copied at trigger time, so a later rule edit does not change this run.
    payload = models.JSONField(default=dict, blank=True)
    result = models.JSONField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_kind = models.CharField(max_length=40, blank=True)
    dedupe_hits = models.PositiveIntegerField(default=0, help_text="Triggers that found this run already there.")
    # Last time a "execute run" message was sent; the sweeper re-sends only after a grace period.
    dispatched_at = models.DateTimeField(null=True, blank=True)
    # The run lease: who may execute it, until when, and the fencing token of the current holder.
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    fence = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-trigger_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["biz_key"], name="run_unique_biz_key"),
            models.CheckConstraint(
                condition=~Q(state="running") | Q(lease_expires_at__isnull=False), name="run_running_has_lease"
            ),
        ]
        indexes = [
            # run_list_due (sweeper): claimable runs by run_after.
            models.Index(
                fields=["run_after"], condition=Q(state__in=["pending", "waiting_retry"]), name="run_due_idx"
            ),
            # run_list_expired_leases (sweeper): running runs by lease expiry.
            models.Index(fields=["lease_expires_at"], condition=Q(state="running"), name="run_lease_idx"),
            # admin and dashboard: recent runs of a rule.
            models.Index(fields=["rule", "-trigger_at"], name="run_rule_recent_idx"),
            models.Index(fields=["state", "-trigger_at"], name="run_state_recent_idx"),
        ]

    def __str__(self) -> str:
        return self.biz_key

    @property
    def policy(self) -> dict:
        return self.payload.get("policy", {})


class Attempt(models.Model):
    class Outcome(models.TextChoices):
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        RETRY = "retry", "Failed, will retry"
        FAILED = "failed", "Failed for good"
        LEASE_EXPIRED = "lease_expired", "Lease expired (worker lost)"
        FENCED = "fenced", "Fenced out (lease taken)"

    run = models.ForeignKey(TaskRun, on_delete=models.CASCADE, related_name="attempt_set")
    number = models.PositiveIntegerField()
    fence = models.PositiveBigIntegerField()
    worker = models.CharField(max_length=200)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=Outcome.choices, default=Outcome.RUNNING)
    error_kind = models.CharField(max_length=40, blank=True)
    error_digest = models.CharField(max_length=16, blank=True, help_text="Stable fingerprint of the error.")
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["run", "number"]
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="attempt_unique_number")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.number}"


class Lease(models.Model):
    """A time-bounded, fenced claim on a key ("rule:<name>", "object:<key>").

    The run lease lives on the TaskRun row itself, so that the fencing check and the result write
    are one row in one transaction; this table carries the same three fields for every other key.
    """

    key = models.CharField(max_length=255, unique=True)
    owner = models.CharField(max_length=200, blank=True)
    token = models.PositiveBigIntegerField(default=0, help_text="Fencing token; grows on every acquisition.")
    acquired_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    run = models.ForeignKey(TaskRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["key"]

    def __str__(self) -> str:
        return self.key


class Decision(models.Model):
    """A recorded "did not run" outcome for one slot of a rule (invariant 3)."""

    class Reason(models.TextChoices):
        MISSED = "missed", "Missed beyond the catch-up window"
        SUPERSEDED = "superseded", "Superseded by a later slot (catch-up latest)"
        INVALID_RULE = "invalid_rule", "Rule could not be evaluated"

    rule = models.ForeignKey("tasks.TriggerRule", on_delete=models.CASCADE, related_name="decisions")
    slot = models.DateTimeField()
    reason = models.CharField(max_length=30, choices=Reason.choices)
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-slot"]
        constraints = [models.UniqueConstraint(fields=["rule", "slot"], name="decision_one_per_slot")]

    def __str__(self) -> str:
        return f"{self.rule_id}@{self.slot:%Y-%m-%dT%H:%M:%SZ}: {self.reason}"


class SchedulerTick(models.Model):
    """Liveness of the scheduler: one row per beat identity, updated by every tick."""

    name = models.CharField(max_length=200, unique=True)
    last_tick_at = models.DateTimeField()
    last_claimed = models.PositiveIntegerField(default=0)
    last_dedupe_hits = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return self.name
