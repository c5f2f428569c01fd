"""Who did what, when and why: one row per operator action, written in the action's transaction."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class AuditEntry(models.Model):
    class Action(models.TextChoices):
        RULE_RUN_NOW = "rule.run_now", _("Rule run now")
        RULE_TRIAL = "rule.trial_run", _("Rule trial run")
        RULE_PAUSE = "rule.pause", _("Rule paused")
        RULE_RESUME = "rule.resume", _("Rule resumed")
        RULE_BACKFILL = "rule.backfill", _("Rule backfilled")
        # Written by tasks/services.py when a rules file is imported: each rule it created or changed.
        RULE_IMPORT = "rule.import", _("Rule imported")
        # Written by tasks/triggers/once.py: a delayed one-time run (API or schedule_once).
        RUN_SCHEDULE_ONCE = "run.schedule_once", _("Delayed run scheduled")
        RUN_RETRY = "run.retry_now", _("Run retried now")
        RUN_CANCEL = "run.cancel", _("Run cancelled")
        LEASE_RELEASE = "lease.force_release", _("Lease force-released")
        DEADLETTER_REPLAY = "deadletter.replay", _("Dead letter replayed")
        DEADLETTER_CLOSE = "deadletter.close", _("Dead letter closed")
        DEADLETTER_ASSIGN = "deadletter.assign", _("Dead letter assigned")
        # Written by runs/engine/approvals.py when someone decides a skill's proposed action.
        PROPOSAL_APPROVE = "proposal.approve", _("Proposed action approved")
        PROPOSAL_REJECT = "proposal.reject", _("Proposed action rejected")
        # Written by runs/engine/approvals.py when someone releases or rejects gated catch-up runs.
        CATCHUP_APPROVE = "catchup.approve", _("Catch-up runs approved")
        CATCHUP_REJECT = "catchup.reject", _("Catch-up runs rejected")
        # Written by runs/engine/backpressure.py when someone edits a scope's watermarks.
        WATERMARK_CHANGE = "watermark.change", _("Backpressure watermarks changed")

    at = models.DateTimeField(_("at"))
    # The username, not a foreign key: the record must outlive the account.
    actor = models.CharField(_("actor"), max_length=150)
    action = models.CharField(_("action"), max_length=40, choices=Action.choices)
    target_type = models.CharField(_("target type"), max_length=40, help_text=_("rule, run, lease or deadletter"))
    target_id = models.CharField(_("target id"), max_length=64)
    target_label = models.CharField(
        _("target label"),
        max_length=255,
        blank=True,
        help_text=_("Rule name or biz_key, for reading."),
    )
    reason = models.TextField(_("reason"), blank=True)
    details = models.JSONField(_("details"), default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name = _("audit entry")
        verbose_name_plural = _("audit entries")
        indexes = [models.Index(fields=["target_type", "target_id", "-at"], name="audit_target_idx")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.target_label or self.target_id}"


class DeskPreference(models.Model):
    """How one operator reads the desk: the zone times are shown in, remembered across sessions."""

    class Zone(models.TextChoices):
        RULE = "rule", _("rule zone (UTC beside it)")
        UTC = "utc", _("UTC")
        BROWSER = "browser", _("my browser's zone")

    user = models.OneToOneField(
        "auth.User", on_delete=models.CASCADE, related_name="desk_preference", verbose_name=_("user")
    )
    display_zone = models.CharField(_("display zone"), max_length=10, choices=Zone.choices, default=Zone.RULE)
    # The IANA name the browser reported when "browser" was chosen (validated before use).
    browser_zone = models.CharField(_("browser zone"), max_length=64, blank=True)

    class Meta:
        verbose_name = _("desk preference")
        verbose_name_plural = _("desk preferences")

    def __str__(self) -> str:
        return f"{self.user_id}: {self.display_zone}"
