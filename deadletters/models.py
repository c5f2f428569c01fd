"""Dead-letter tickets: what a human needs to act on a run that failed for good."""

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
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING_MANUAL)
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

    def __str__(self) -> str:
        return f"{self.biz_key} ({self.get_state_display()})"
