"""Pools: named capacity that runs draw from. Limits are data, read at admission, so an
admin edit takes effect on the next admission without a restart.

A pool limits how many runs hold a slot at once (`max_concurrency`) and/or how fast runs start (a
token bucket: `rate_count` per `rate_period_seconds`, up to `rate_burst` at once). With a key
template the limits apply per rendered key (per object, per source, per sender), else to the whole
pool. The `global` pool always exists and every run draws from it. The held slots and bucket state
live in runs (PoolSlot, PoolBucket): this model is only the definition.
"""

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.functional import Promise
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _
from simple_history.models import HistoricalRecords

from tasks.rules.flow import POOL_KEY_PLACEHOLDERS, pool_key_validate
from tasks.rules.keys import KeyTemplateError

GLOBAL_POOL = "global"


class Pool(models.Model):
    name = models.SlugField(_("name"), max_length=100, unique=True)
    reason = models.TextField(_("reason"), help_text=_("Why this pool exists and why its limits are what they are."))
    enabled = models.BooleanField(
        _("enabled"), default=True, help_text=_("Off: the pool's limits are not enforced (runs pass freely).")
    )
    max_concurrency = models.PositiveIntegerField(
        _("max concurrency"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_("Runs holding a slot at once (per key if keyed). Empty: unlimited."),
    )
    rate_count = models.PositiveIntegerField(
        _("rate count"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_("Token bucket: this many starts (or model calls, for an agent's pool) per period. Empty: no rate."),
    )
    rate_period_seconds = models.PositiveIntegerField(
        _("rate period seconds"), null=True, blank=True, validators=[MinValueValidator(1)]
    )
    rate_burst = models.PositiveIntegerField(
        _("rate burst"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_("Most tokens saved up at once. Empty: the rate count."),
    )
    key_template = models.CharField(
        _("key template"),
        max_length=200,
        blank=True,
        # Formatted when shown, not at import: a lazy string formatted here would freeze in English.
        help_text=format_lazy(
            _("Blank: one limit for the whole pool. Else a limit per rendered key; placeholders: {names}."),
            names=" ".join("{" + n + "}" for n in POOL_KEY_PLACEHOLDERS),
        ),
    )
    spread_seconds = models.PositiveIntegerField(
        _("spread seconds"),
        null=True,
        blank=True,
        help_text=_(
            "Default spread of the starts of its rules' slots (a rule's own spread wins; in several pools, "
            "the largest). Shrunk to a rule's gap to its next slot. Empty: none."
        ),
    )
    # Provider pacing: a model provider's 429 Retry-After pauses the whole pool until then.
    paused_until = models.DateTimeField(_("paused until"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    # Edits are versioned like rules; paused_until is written by workers with .update() (no history).
    history = HistoricalRecords(excluded_fields=["paused_until", "updated_at"])

    class Meta:
        app_label = "tasks"
        ordering = ["name"]
        verbose_name = _("pool")
        verbose_name_plural = _("pools")
        constraints = [
            models.CheckConstraint(
                condition=Q(rate_count__isnull=True) | Q(rate_period_seconds__isnull=False),
                name="pool_rate_needs_period",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_global(self) -> bool:
        return self.name == GLOBAL_POOL

    def clean(self) -> None:
        errors: dict[str, list[str | Promise]] = {}
        try:
            pool_key_validate(self.key_template)
        except KeyTemplateError as exc:
            errors["key_template"] = [str(exc)]
        if self.rate_count and not self.rate_period_seconds:
            errors["rate_period_seconds"] = [_("A rate needs its period, e.g. 60 for per minute.")]
        if self.rate_period_seconds and not self.rate_count:
            errors["rate_count"] = [_("A period needs its rate count.")]
        if self.is_global and self.key_template:
            errors["key_template"] = [_("The global pool is one limit for all runs: leave its key template blank.")]
        if errors:
            raise ValidationError(errors)

    def delete(self, *args, **kwargs):
        if self.is_global:
            raise ValidationError(_("The global pool cannot be deleted: every run draws from it."))
        return super().delete(*args, **kwargs)
