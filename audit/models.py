"""Who did what, when and why: one row per operator action, written in the action's transaction."""

from django.db import models


class AuditEntry(models.Model):
    class Action(models.TextChoices):
        RULE_RUN_NOW = "rule.run_now", "Rule run now"
        RULE_TRIAL = "rule.trial_run", "Rule trial run"
        RULE_PAUSE = "rule.pause", "Rule paused"
        RULE_RESUME = "rule.resume", "Rule resumed"
        RULE_BACKFILL = "rule.backfill", "Rule backfilled"
        RUN_RETRY = "run.retry_now", "Run retried now"
        RUN_CANCEL = "run.cancel", "Run cancelled"
        LEASE_RELEASE = "lease.force_release", "Lease force-released"
        DEADLETTER_REPLAY = "deadletter.replay", "Dead letter replayed"
        DEADLETTER_CLOSE = "deadletter.close", "Dead letter closed"
        DEADLETTER_ASSIGN = "deadletter.assign", "Dead letter assigned"

    at = models.DateTimeField()
    # The username, not a foreign key: the record must outlive the account.
    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=40, choices=Action.choices)
    target_type = models.CharField(max_length=40, help_text="rule, run, lease or deadletter")
    target_id = models.CharField(max_length=64)
    target_label = models.CharField(max_length=255, blank=True, help_text="Rule name or biz_key, for reading.")
    reason = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["target_type", "target_id", "-at"], name="audit_target_idx")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.target_label or self.target_id}"
