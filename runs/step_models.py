"""Records at the model boundary (issue 5): checkpointed steps, external calls, proposed actions.

Imported by runs/models.py so Django sees them as models of the runs app.
"""

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _


class RunStep(models.Model):
    """A completed (or deliberately skipped) step of a run's skill.

    Written under the run's fence, so only the lease holder checkpoints; unique by (run, name), so a
    retried or replayed attempt finds it and resumes after it instead of doing the step again.
    """

    run = models.ForeignKey("runs.TaskRun", on_delete=models.CASCADE, related_name="steps", verbose_name=_("run"))
    name = models.CharField(_("name"), max_length=100)
    attempt = models.PositiveIntegerField(_("attempt"), help_text=_("The attempt that completed the step."))
    output = models.JSONField(_("output"), null=True, blank=True)
    digest = models.CharField(_("digest"), max_length=64, help_text=_("SHA-256 of the output's canonical JSON."))
    skipped = models.BooleanField(_("skipped"), default=False, help_text=_("A write step skipped by a dry run."))
    completed_at = models.DateTimeField(_("completed at"))

    class Meta:
        app_label = "runs"
        ordering = ["run", "completed_at", "id"]
        verbose_name = _("run step")
        verbose_name_plural = _("run steps")
        constraints = [models.UniqueConstraint(fields=["run", "name"], name="runstep_unique_name")]

    def __str__(self) -> str:
        return f"{self.run_id}:{self.name}"


class ExternalCall(models.Model):
    """One call to a model provider. Holds a hash of the input, never the key; the prompt text
    only when the agent opts in (store_prompts)."""

    run = models.ForeignKey(
        "runs.TaskRun", null=True, blank=True, on_delete=models.CASCADE, related_name="calls", verbose_name=_("run")
    )
    attempt = models.PositiveIntegerField(_("attempt"), null=True, blank=True)
    step = models.CharField(_("step"), max_length=100, blank=True)
    agent = models.ForeignKey(
        "tasks.Agent", null=True, blank=True, on_delete=models.SET_NULL, related_name="calls", verbose_name=_("agent")
    )
    agent_name = models.CharField(_("agent name"), max_length=100, help_text=_("Kept if the agent is deleted."))
    provider = models.CharField(_("provider"), max_length=20)
    endpoint = models.CharField(_("endpoint"), max_length=500)
    model = models.CharField(_("model"), max_length=200)
    input_sha256 = models.CharField(_("input sha256"), max_length=64)
    status = models.PositiveIntegerField(
        _("status"),
        null=True,
        blank=True,
        help_text=_("HTTP status; empty if none came back."),
    )
    error_kind = models.CharField(_("error kind"), max_length=40, blank=True)
    error_digest = models.CharField(_("error digest"), max_length=16, blank=True)
    latency_ms = models.PositiveIntegerField(_("latency ms"), default=0)
    prompt_tokens = models.PositiveIntegerField(_("prompt tokens"), null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(_("completion tokens"), null=True, blank=True)
    output_valid = models.BooleanField(
        _("output valid"),
        null=True,
        blank=True,
        help_text=_("Whether the output passed validation."),
    )
    prompt_text = models.TextField(_("prompt text"), blank=True, help_text=_("Only when the agent stores prompts."))
    started_at = models.DateTimeField(_("started at"))

    class Meta:
        app_label = "runs"
        ordering = ["-started_at", "-id"]
        verbose_name = _("external call")
        verbose_name_plural = _("external calls")
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
        LOW = "low", _("Low")
        MEDIUM = "medium", _("Medium")
        HIGH = "high", _("High")

    class Status(models.TextChoices):
        PENDING = "pending", _("Awaiting approval")
        APPROVED = "approved", _("Approved")
        REJECTED = "rejected", _("Rejected")
        EXPIRED = "expired", _("Expired unanswered")

    run = models.ForeignKey("runs.TaskRun", on_delete=models.CASCADE, related_name="proposals", verbose_name=_("run"))
    step = models.CharField(_("step"), max_length=100)
    action = models.CharField(_("action"), max_length=100)
    risk = models.CharField(_("risk"), max_length=10, choices=Risk.choices)
    args = models.JSONField(_("args"), default=dict, blank=True)
    status = models.CharField(_("status"), max_length=10, choices=Status.choices, default=Status.PENDING)
    proposed_at = models.DateTimeField(_("proposed at"))
    expires_at = models.DateTimeField(_("expires at"))
    decided_by = models.CharField(_("decided by"), max_length=150, blank=True)
    decided_at = models.DateTimeField(_("decided at"), null=True, blank=True)
    note = models.TextField(_("note"), blank=True)

    class Meta:
        app_label = "runs"
        ordering = ["-proposed_at", "-id"]
        verbose_name = _("action proposal")
        verbose_name_plural = _("action proposals")
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
