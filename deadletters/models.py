"""Dead-letter tickets: what a human needs to act on a run that failed for good."""

from django.conf import settings
from django.db import models
from django.db.models import Q


class DeadLetter(models.Model):
    class State(models.TextChoices):
        PENDING_MANUAL = "pending_manual", "Pending manual action"
        REPLAYED = "replayed", "Replayed"
        CLOSED = "closed", "Closed"

    run = models.ForeignKey("runs.TaskRun", on_delete=models.PROTECT, related_name="deadletters")
    biz_key = models.CharField(max_length=255, db_index=True)
    rule_name = models.CharField(max_length=100, blank=True)
    source = models.CharField(max_length=20)
    raw_payload = models.JSONField(default=dict, blank=True)
    first_failure_at = models.DateTimeField()
    last_failure_at = models.DateTimeField()
    attempts = models.PositiveIntegerField()
    error_kind = models.CharField(max_length=40)
    last_error_digest = models.CharField(max_length=16)
    last_error = models.TextField(blank=True)
    raw_output = models.TextField(blank=True, help_text="The model's raw output, when it failed validation.")
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING_MANUAL)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="Who on call is handling this ticket.",
    )
    note = models.TextField(blank=True, help_text="Why it was closed, or what was done.")
    replayed_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # Invariant 6: exactly one open ticket per run, however many workers fail it at once.
            models.UniqueConstraint(
                fields=["run"], condition=Q(state="pending_manual"), name="deadletter_one_open_per_run"
            ),
        ]
        indexes = [
            # The desk's open backlog.
            models.Index(fields=["-created_at"], condition=Q(state="pending_manual"), name="deadletter_open_idx"),
        ]
        permissions = [
            ("replay_deadletter", "Can replay a dead letter"),
            ("close_deadletter", "Can close a dead letter"),
            ("assign_deadletter", "Can assign a dead letter"),
        ]

    def __str__(self) -> str:
        return f"{self.biz_key} ({self.get_state_display()})"
