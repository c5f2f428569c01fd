"""Readiness flags: what a rule's dependencies wait for."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class ReadinessFlag(models.Model):
    """A named readiness flag, set for one scope (a business date such as 2026-12-01, or a key).

    A rule that depends on the flag runs a slot only while the flag is set for the slot's scope.
    Clearing a flag deletes its row; the set/clear history is in the log.
    """

    name = models.CharField(_("name"), max_length=200, help_text=_("e.g. pipeline.raw_data.ready"))
    scope = models.CharField(
        _("scope"), max_length=200, help_text=_("Business date (YYYY-MM-DD) or key the flag holds for.")
    )
    set_at = models.DateTimeField(_("set at"))
    set_by = models.CharField(_("set by"), max_length=150, blank=True)
    note = models.CharField(_("note"), max_length=500, blank=True)

    class Meta:
        verbose_name = _("readiness flag")
        verbose_name_plural = _("readiness flags")
        ordering = ["name", "scope"]
        constraints = [models.UniqueConstraint(fields=["name", "scope"], name="flag_unique_name_scope")]
        # Kept here with the other readiness signals: pings feed heartbeat rules through the same API.
        permissions = [("send_ping", "Can send heartbeat pings")]

    def __str__(self) -> str:
        return f"{self.name}@{self.scope}"
