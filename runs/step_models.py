"""Records at the model boundary (issue 5): checkpointed steps, external calls, proposed actions.

Imported by runs/models.py so Django sees them as models of the runs app.
"""

from django.db import models
from django.db.models import Q


class RunStep(models.Model):
    """A completed (or deliberately skipped) step of a run's skill.

    Written under the run's fence, so only the lease holder checkpoints; unique by (run, name), so a
    retried or replayed attempt finds it and resumes after it instead of doing the step again.
    """

    run = models.ForeignKey("runs.TaskRun", on_delete=models.CASCADE, related_name="steps")
    name = models.CharField(max_length=100)
    attempt = models.PositiveIntegerField(help_text="The attempt that completed the step.")
    output = models.JSONField(null=True, blank=True)
    digest = models.CharField(max_length=64, help_text="SHA-256 of the output's canonical JSON.")
    skipped = models.BooleanField(default=False, help_text="A write step skipped by a dry run.")
    completed_at = models.DateTimeField()

    class Meta:
        app_label = "runs"
        ordering = ["run", "completed_at", "id"]
        constraints = [models.UniqueConstraint(fields=["run", "name"], name="runstep_unique_name")]

    def __str__(self) -> str:
        return f"{self.run_id}:{self.name}"


class ExternalCall(models.Model):
    """One call to a model provider. Holds a hash of the input, never the key; the prompt text
    only when the agent opts in (store_prompts)."""

    run = models.ForeignKey("runs.TaskRun", null=True, blank=True, on_delete=models.CASCADE, related_name="calls")
    attempt = models.PositiveIntegerField(null=True, blank=True)
    step = models.CharField(max_length=100, blank=True)
    agent = models.ForeignKey("tasks.Agent", null=True, blank=True, on_delete=models.SET_NULL, related_name="calls")
    agent_name = models.CharField(max_length=100, help_text="Kept if the agent is deleted.")
    provider = models.CharField(max_length=20)
    endpoint = models.CharField(max_length=500)
    model = models.CharField(max_length=200)
    input_sha256 = models.CharField(max_length=64)
    status = models.PositiveIntegerField(null=True, blank=True, help_text="HTTP status; empty if none came back.")
    error_kind = models.CharField(max_length=40, blank=True)
    error_digest = models.CharField(max_length=16, blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_valid = models.BooleanField(null=True, blank=True, help_text="Whether the output passed validation.")
    prompt_text = models.TextField(blank=True, help_text="Only when the agent stores prompts.")
    started_at = models.DateTimeField()

    class Meta:
        app_label = "runs"
        ordering = ["-started_at", "-id"]
        indexes = [
            # agent_spend (budgets): one agent's calls in the current window.
            models.Index(fields=["agent", "started_at"], name="call_agent_window_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.agent_name} {self.status or self.error_kind} @ {self.started_at:%Y-%m-%dT%H:%M:%SZ}"

    @property
    def total_tokens(self) -> int:
        return (self.prompt_tokens or 0) + (self.completion_tokens or 0)


class ActionProposal(models.Model):
    """An action a skill proposed at medium or high risk: it runs only after a human approves."""

    class Risk(models.TextChoices):
        LOW = "low", "Low"
        MEDIUM = "medium", "Medium"
        HIGH = "high", "High"

    class Status(models.TextChoices):
        PENDING = "pending", "Awaiting approval"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        EXPIRED = "expired", "Expired unanswered"

    run = models.ForeignKey("runs.TaskRun", on_delete=models.CASCADE, related_name="proposals")
    step = models.CharField(max_length=100)
    action = models.CharField(max_length=100)
    risk = models.CharField(max_length=10, choices=Risk.choices)
    args = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    proposed_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    decided_by = models.CharField(max_length=150, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True)

    class Meta:
        app_label = "runs"
        ordering = ["-proposed_at", "-id"]
        permissions = [("decide_actionproposal", "Can approve or reject proposed actions")]
        constraints = [
            # One proposal per step of a run: a re-executed attempt finds it instead of asking twice.
            models.UniqueConstraint(fields=["run", "step"], name="proposal_unique_step"),
        ]
        indexes = [
            # approval_expire_due (sweeper): pending proposals by expiry.
            models.Index(fields=["expires_at"], condition=Q(status="pending"), name="proposal_pending_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.action} ({self.risk}) for run {self.run_id}: {self.status}"
