"""The diagnostic side-effect table of the harness.record skill."""

from typing import TYPE_CHECKING

from django.db import models
from django.utils.translation import gettext_lazy as _

if TYPE_CHECKING:
    from tasks.skills.sdk import SkillContext


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

    @classmethod
    def record(cls, ctx: "SkillContext") -> dict[str, int]:
        """The one writer (the skill and the action): who ran, under which fence, at the run's clock."""
        row = cls.objects.create(
            run_id=ctx.run_id,
            biz_key=ctx.biz_key,
            rule_name=ctx.rule_name,
            slot=ctx.slot,
            fence=ctx.fence,
            attempt=ctx.attempt,
            worker=ctx.worker,
            created_at=ctx.current_time(),
        )
        return {"record_id": row.id}
