"""The diagnostic side-effect table of the harness.record skill."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class DiagnosticRecord(models.Model):
    """One row per execution of the `harness.record` skill, written under the run's fence."""

    run_id = models.BigIntegerField(_("run id"), db_index=True)
    biz_key = models.CharField(_("biz key"), max_length=255, db_index=True)
    rule_name = models.CharField(_("rule name"), max_length=100, blank=True)
    slot = models.DateTimeField(_("slot"), null=True, blank=True)
    fence = models.PositiveBigIntegerField(_("fence"))
    attempt = models.PositiveIntegerField(_("attempt"))
    worker = models.CharField(_("worker"), max_length=200, blank=True)
    created_at = models.DateTimeField(_("created at"))

    class Meta:
        verbose_name = _("diagnostic record")
        verbose_name_plural = _("diagnostic records")
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.biz_key} (fence {self.fence})"
