"""Event sources and what their deliveries left behind (docs/events.md)."""

from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from tasks import secrets
from tasks.models.rule import TriggerRule
from tasks.rules import events, signatures


class TriggerSource(models.Model):
    """Who may fire an event rule, and how its events are read (docs/events.md).

    The HMAC secret is never stored: `secret_env` names the environment variable that holds it,
    so the database, the admin and the logs never see it. Only variables the deployment granted as
    secrets can be named (tasks/secrets.py); `secret_env_next` is the second secret of a rotation.
    """

    class Scheme(models.TextChoices):
        HARNESS = signatures.HARNESS, _("Harness v2: X-Harness-* headers, the delivery id signed")
        HARNESS_V1 = signatures.HARNESS_V1, _("Harness v1 (deprecated): the delivery id not signed")
        STANDARD = signatures.STANDARD, _("Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature")

    class Kind(models.TextChoices):
        WEBHOOK = "webhook", _("Webhook: signed HTTP POST to /hooks/<name>/")
        QUEUE = "queue", _("Queue: Celery task tasks.event_intake")
        FILE = "file", _("File arrival: folder sensor")
        PYTHON = "python", _("Python: tasks.triggers.events.event_intake()")

    name = models.SlugField(
        _("name"), max_length=100, unique=True, help_text=_("In the URL /hooks/<name>/ and {source} in keys.")
    )
    enabled = models.BooleanField(_("enabled"), default=True)
    kind = models.CharField(_("kind"), max_length=10, choices=Kind.choices, default=Kind.WEBHOOK)
    description = models.CharField(_("description"), max_length=500, blank=True)
    identity = models.CharField(
        _("identity"),
        max_length=150,
        help_text=_("Who this source stands for; recorded as the run's triggered_by, e.g. svc:billing."),
    )
    rule = models.ForeignKey(
        TriggerRule,
        verbose_name=_("rule"),
        on_delete=models.PROTECT,
        related_name="sources",
        limit_choices_to={"kind": "event"},
        help_text=_("The event rule each accepted event triggers."),
    )
    signature_scheme = models.CharField(
        _("signature scheme"),
        max_length=20,
        choices=Scheme.choices,
        default=Scheme.HARNESS,
        help_text=_("Webhook sources: how requests are signed (docs/events.md)."),
    )
    secret_env = models.CharField(
        _("secret variable"),
        max_length=100,
        blank=True,
        help_text=_(
            "Webhook sources: NAME of the environment variable holding the HMAC secret (never the secret); "
            "only granted names, e.g. HARNESS_SECRET_BILLING_HOOK."
        ),
    )
    secret_env_next = models.CharField(
        _("next secret variable"),
        max_length=100,
        blank=True,
        help_text=_(
            "Webhook sources, during a rotation: NAME of the variable holding the second secret; "
            "a request signed with either is accepted."
        ),
    )
    object_id_path = models.CharField(
        _("object id path"), max_length=200, default="object_id", help_text=_("Dotted payload path.")
    )
    action_path = models.CharField(
        _("action path"), max_length=200, default="action", help_text=_("Dotted payload path.")
    )
    version_path = models.CharField(
        _("version path"), max_length=200, default="version", help_text=_("Dotted payload path.")
    )
    snapshot_fields = models.JSONField(
        _("snapshot fields"),
        default=list,
        blank=True,
        help_text=_('Payload fields copied into the run at intake, e.g. ["amount", "customer.tier"].'),
    )
    reference_fields = models.JSONField(
        _("reference fields"),
        default=list,
        blank=True,
        help_text=_('Payload fields kept as references, e.g. ["document_url"]; not documents.'),
    )
    max_body_bytes = models.PositiveIntegerField(
        _("max body bytes"),
        default=65536,
        validators=[MinValueValidator(1), MaxValueValidator(10 * 1024 * 1024)],
        help_text=_("Larger bodies are refused unread (413)."),
    )
    watch_dir = models.CharField(
        _("watched folder"), max_length=500, blank=True, help_text=_("File sources: absolute folder path.")
    )
    require_ready_marker = models.BooleanField(
        _("require a ready marker"),
        default=False,
        help_text=_("File sources: only files with a <name>.ready marker next to them count."),
    )
    settle_seconds = models.PositiveIntegerField(
        _("settle seconds"),
        default=5,
        help_text=_("File sources without a marker: the file must be unchanged this long."),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("trigger source")
        verbose_name_plural = _("trigger sources")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def mapping(self) -> events.Mapping:
        return events.Mapping(
            object_id_path=self.object_id_path,
            action_path=self.action_path,
            version_path=self.version_path,
            snapshot_fields=tuple(self.snapshot_fields or ()),
            reference_fields=tuple(self.reference_fields or ()),
        )

    def secret_names(self) -> list[str]:
        """The variables this source's secrets are read from: one, or two during a rotation."""
        return [name for name in (self.secret_env, self.secret_env_next) if name]

    def secret_states(self) -> list[tuple[str, str]]:
        """(variable, state) per named secret: "ok", "not_granted", "not_declared" (granted, but not
        declared a webhook signing secret), "unset" or "weak". Never the value."""
        states = []
        for name in self.secret_names():
            if secrets.secret_name_error(name) is not None:
                states.append((name, "not_granted"))
                continue
            if secrets.secret_use_refusal(name, secrets.WEBHOOK) is not None:
                states.append((name, "not_declared"))
                continue
            value = secrets.secret_value(name, secrets.WEBHOOK)
            if value is None:
                states.append((name, "unset"))
            elif signatures.secret_strength_error(self.signature_scheme, value) is not None:
                states.append((name, "weak"))
            else:
                states.append((name, "ok"))
        return states

    def clean(self) -> None:
        errors: dict[str, list[str | Promise]] = {}
        if self.kind == self.Kind.WEBHOOK:
            if not self.secret_env:
                errors.setdefault("secret_env", []).append(
                    _(
                        "A webhook source needs the NAME of an environment variable holding its secret, "
                        "e.g. HARNESS_SECRET_BILLING_HOOK."
                    )
                )
            for field in ("secret_env", "secret_env_next"):
                name = getattr(self, field)
                problem = secrets.secret_name_error(name) if name else None
                if problem:
                    errors.setdefault(field, []).append(
                        _("%(name)s: %(problem)s.") % {"name": name[:100], "problem": problem}
                    )
                elif name and (refused := secrets.secret_use_refusal(name, secrets.WEBHOOK)) is not None:
                    errors.setdefault(field, []).append(secrets.secret_use_message(refused))
            if self.secret_env_next and self.secret_env_next == self.secret_env:
                errors.setdefault("secret_env_next", []).append(
                    _("The next secret must be another variable than the current one.")
                )
        if self.kind == self.Kind.FILE and not (self.watch_dir and Path(self.watch_dir).is_absolute()):
            errors.setdefault("watch_dir", []).append(
                _("A file source needs an absolute folder path, e.g. /data/inbox.")
            )
        for field in ("snapshot_fields", "reference_fields"):
            try:
                events.validate_field_paths(getattr(self, field), field=field)
            except ValueError as exc:
                errors.setdefault(field, []).append(str(exc))
        for field in ("object_id_path", "action_path", "version_path"):
            try:
                events.validate_field_paths([getattr(self, field)], field=field)
            except ValueError as exc:
                errors.setdefault(field, []).append(str(exc))
        if self.rule_id and self.rule.kind != TriggerRule.Kind.EVENT:
            errors.setdefault("rule", []).append(
                f"Rule {self.rule.name!r} is a {self.rule.kind} rule; pick an event rule."
            )
        if errors:
            raise ValidationError(errors)


class EventDelivery(models.Model):
    """An accepted event: which delivery, which business key, which run. Also the replay memory:
    a delivery id is remembered per source by a unique constraint, not by a check."""

    source = models.ForeignKey(
        TriggerSource, on_delete=models.CASCADE, related_name="deliveries", db_index=False, verbose_name=_("source")
    )  # db_index=False: delivery_unique_per_source leads with it
    # NULL, not "": callers that send no id must never collide on the unique constraint.
    delivery_id = models.CharField(_("delivery id"), max_length=200, null=True, blank=True)  # noqa: DJ001
    channel = models.CharField(_("channel"), max_length=10)
    body_sha256 = models.CharField(_("body SHA-256"), max_length=64)
    received_at = models.DateTimeField(_("received at"))
    criteria = models.JSONField(_("criteria"), default=dict)
    biz_key = models.CharField(_("biz key"), max_length=255)
    # An id, not a foreign key: runs/ depends on tasks/, not the other way round.
    run_id = models.BigIntegerField(_("run id"), null=True, blank=True)
    run_created = models.BooleanField(
        _("run created"), help_text=_("False: the business event already had a run (dedupe hit).")
    )

    class Meta:
        ordering = ["-received_at", "-id"]
        verbose_name = _("event delivery")
        verbose_name_plural = _("event deliveries")
        constraints = [
            # NULL delivery ids (Python callers that send none) never collide.
            models.UniqueConstraint(fields=["source", "delivery_id"], name="delivery_unique_per_source"),
        ]
        indexes = [models.Index(fields=["received_at"], name="delivery_received_idx")]  # event_records_prune

    def __str__(self) -> str:
        return f"{self.source_id}:{self.delivery_id or '-'}"


class EventRefusal(models.Model):
    """An event that was refused and not run, with the reason: "why didn't it run?" for events.

    Refusals of authenticated events (signed and fresh, or from trusted code) are kept one by one.
    Refusals before authentication are counted in RefusalCount, and only the last few per source and
    reason are kept here as a sample (`authenticated` False), so a flood cannot fill the table.
    """

    source = models.ForeignKey(
        TriggerSource,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,  # refusal_repeat_idx leads with it
        verbose_name=_("source"),
    )
    source_name = models.CharField(_("source name"), max_length=100, help_text=_("The source as the sender named it."))
    channel = models.CharField(_("channel"), max_length=10)
    reason = models.CharField(_("reason"), max_length=40)
    status = models.PositiveSmallIntegerField(_("status"))
    detail = models.TextField(_("detail"))
    delivery_id = models.CharField(_("delivery id"), max_length=200, blank=True)
    body_sha256 = models.CharField(_("body SHA-256"), max_length=64, blank=True)
    body_bytes = models.PositiveBigIntegerField(_("body bytes"), null=True, blank=True)
    remote_addr = models.CharField(_("remote addr"), max_length=64, blank=True)
    authenticated = models.BooleanField(
        _("authenticated"),
        default=True,
        help_text=_("False: refused before the sender was authenticated; a sample of a counted refusal."),
    )
    created_at = models.DateTimeField(_("created at"))

    class Meta:
        verbose_name = _("event refusal")
        verbose_name_plural = _("event refusals")
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["created_at"], name="refusal_created_idx"),  # event_records_prune
            models.Index(fields=["source_name", "-created_at"], name="refusal_source_recent_idx"),  # admin
            models.Index(fields=["authenticated", "reason", "source"], name="refusal_sample_idx"),  # trimming
            # Is this authenticated refusal a repeat (a replayed request, a refused file seen again)?
            models.Index(fields=["source", "delivery_id"], name="refusal_repeat_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.source_name}: {self.reason}"


class EventMetric(models.Model):
    """Counter of intake outcomes per source. Unknown source names share one row (source_name ""),
    so a flood of made-up names cannot grow this table."""

    source_name = models.CharField(_("source name"), max_length=100, blank=True)
    outcome = models.CharField(
        _("outcome"), max_length=40, help_text=_("accepted, duplicate, redelivery or a refusal reason.")
    )
    count = models.PositiveBigIntegerField(_("count"), default=0)
    last_at = models.DateTimeField(_("last at"))

    class Meta:
        verbose_name = _("event metric")
        verbose_name_plural = _("event metrics")
        ordering = ["source_name", "outcome"]
        constraints = [models.UniqueConstraint(fields=["source_name", "outcome"], name="event_metric_unique")]

    def __str__(self) -> str:
        return f"{self.source_name or '(unknown)'} {self.outcome}: {self.count}"


class RefusalCount(models.Model):
    """Refusals before authentication, counted per source, reason and hour (upserted, never one row
    per request). Unknown source names share one row per reason and hour (source_name "")."""

    source_name = models.CharField(_("source name"), max_length=100, blank=True)
    reason = models.CharField(_("reason"), max_length=40)
    status = models.PositiveSmallIntegerField(_("status"))
    hour = models.DateTimeField(_("hour"), help_text=_("Start of the hour (UTC) the refusals fell in."))
    count = models.PositiveBigIntegerField(_("count"), default=0)
    last_at = models.DateTimeField(_("last at"))

    class Meta:
        verbose_name = _("counted refusal")
        verbose_name_plural = _("counted refusals")
        ordering = ["-hour", "source_name", "reason"]
        constraints = [
            models.UniqueConstraint(fields=["source_name", "reason", "hour"], name="refusal_count_unique"),
        ]
        indexes = [models.Index(fields=["hour"], name="refusal_count_hour_idx")]  # event_records_prune

    def __str__(self) -> str:
        return f"{self.source_name or '(unknown)'} {self.reason} {self.hour:%Y-%m-%d %H}:00: {self.count}"
