"""Dead-letter tickets: what a human needs to act on a run that failed for good."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from deadletters.alert_texts import KIND_LABELS
from deadletters.alert_urls import alert_url_error, alert_url_message
from tasks.rules import keys


class DeadLetter(models.Model):
    class State(models.TextChoices):
        PENDING_MANUAL = "pending_manual", _("Pending manual action")
        REPLAYED = "replayed", _("Replayed")
        CLOSED = "closed", _("Closed")

    run = models.ForeignKey("runs.TaskRun", on_delete=models.PROTECT, related_name="deadletters", verbose_name=_("run"))
    biz_key = models.CharField(_("biz key"), max_length=255, db_index=True)
    rule_name = models.CharField(_("rule name"), max_length=100, blank=True)
    source = models.CharField(_("source"), max_length=20)
    raw_payload = models.JSONField(_("raw payload"), default=dict, blank=True)
    first_failure_at = models.DateTimeField(_("first failure at"))
    last_failure_at = models.DateTimeField(_("last failure at"))
    attempts = models.PositiveIntegerField(_("attempts"))
    error_kind = models.CharField(_("error kind"), max_length=40)
    last_error_digest = models.CharField(_("last error digest"), max_length=16)
    last_error = models.TextField(_("last error"), blank=True)
    raw_output = models.TextField(
        _("raw output"),
        blank=True,
        help_text=_("The model's raw output, when it failed validation."),
    )
    state = models.CharField(_("state"), max_length=20, choices=State.choices, default=State.PENDING_MANUAL)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("owner"),
        help_text=_("Who on call is handling this ticket."),
    )
    note = models.TextField(_("note"), blank=True, help_text=_("Why it was closed, or what was done."))
    replayed_at = models.DateTimeField(_("replayed at"), null=True, blank=True)
    closed_at = models.DateTimeField(_("closed at"), null=True, blank=True)
    # The run's trace id, to find the trigger, the attempts and the model calls in logs and traces.
    trace_id = models.CharField(_("trace id"), max_length=32, blank=True)
    created_at = models.DateTimeField(_("created at"))
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("dead letter")
        verbose_name_plural = _("dead letters")
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
            # The desk's list in its order (-created_at, then id): with it the join to each ticket's
            # run is 100 primary-key look-ups, not a hash join over every run.
            models.Index(fields=["-created_at", "-id"], name="deadletter_recent_idx"),
        ]
        permissions = [
            ("replay_deadletter", "Can replay a dead letter"),
            ("close_deadletter", "Can close a dead letter"),
            ("assign_deadletter", "Can assign a dead letter"),
        ]

    def __str__(self) -> str:
        # No state here: a replayed ticket's state alone would read as resolved (the page says the outcome).
        return f"#{self.pk} {keys.unescape(self.biz_key)}"  # the key as the client wrote it


class Severity(models.TextChoices):
    # Ordered by rank (see deadletters.alert_rules.SEVERITY_RANK): a channel takes its minimum and above.
    NOTICE = "notice", _("Notice")
    WARNING = "warning", _("Warning")
    URGENT = "urgent", _("Urgent")


class AlertChannel(models.Model):
    """Where alerts go: data, so on-call can add a webhook or mute one without a deploy."""

    class Kind(models.TextChoices):
        EMAIL = "email", _("Email")
        WEBHOOK = "webhook", _("JSON webhook")
        LOG = "log", _("Log")

    class Format(models.TextChoices):
        GENERIC = "generic", _("Generic JSON (the whole alert)")
        SLACK = "slack", _("Slack incoming webhook")
        FEISHU = "feishu", _("Feishu / Lark bot")
        DINGTALK = "dingtalk", _("DingTalk robot")

    name = models.CharField(_("name"), max_length=100, unique=True)
    kind = models.CharField(_("kind"), max_length=10, choices=Kind.choices)
    url = models.URLField(
        _("webhook URL"),
        max_length=1000,
        blank=True,
        help_text=_("Webhook channels only. May carry a token: it is never logged or listed in full."),
    )
    recipients = models.TextField(
        _("recipients"),
        blank=True,
        help_text=_("Email channels only: addresses separated by commas or new lines. Empty: the site ADMINS."),
    )
    format = models.CharField(
        _("message format"),
        max_length=10,
        choices=Format.choices,
        default=Format.GENERIC,
        help_text=_("The JSON shape the receiver expects (webhook channels)."),
    )
    min_severity = models.CharField(
        _("minimum severity"),
        max_length=10,
        choices=Severity.choices,
        default=Severity.WARNING,
        help_text=_("Alerts below this severity are not sent to this channel."),
    )
    language = models.CharField(
        _("language"),
        max_length=10,
        choices=[("en", _("English")), ("zh-hans", _("Simplified Chinese"))],
        default="en",
        help_text=_("The language of the alert titles and texts this channel sends."),
    )
    enabled = models.BooleanField(_("enabled"), default=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("alert channel")
        verbose_name_plural = _("alert channels")
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=["email", "webhook", "log"]), name="alertchannel_kind_valid"),
            models.CheckConstraint(
                condition=Q(min_severity__in=["notice", "warning", "urgent"]), name="alertchannel_severity_valid"
            ),
            # A webhook channel without a URL could never deliver; say so at save time, not at 3 a.m.
            models.CheckConstraint(condition=~Q(kind="webhook") | ~Q(url=""), name="alertchannel_webhook_has_url"),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        # Delivery checks again (deadletters.alert_delivery): a row saved without validation sends nothing.
        if self.kind == self.Kind.WEBHOOK and self.url and alert_url_error(self.url) is not None:
            raise ValidationError({"url": alert_url_message(self.url)})


class Alert(models.Model):
    """The outbox: one row per (event, channel), written in the event's own transaction.

    The row with no channel is the event's entry in the built-in log, written for every alert;
    its partial unique constraint on dedupe_key is what makes an event alert once, however often
    it is reported. Delivery happens later, in a worker, with bounded retries kept here.
    """

    class State(models.TextChoices):
        PENDING = "pending", pgettext_lazy("alert state", "Pending")
        SENT = "sent", _("Sent")
        FOLDED = "folded", _("Folded into a summary")
        FAILED = "failed", _("Failed (retries exhausted)")

    channel = models.ForeignKey(
        AlertChannel,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="alerts",
        db_index=False,  # alert_storm_idx leads with it
        verbose_name=_("channel"),
    )
    severity = models.CharField(_("severity"), max_length=10, choices=Severity.choices)
    kind = models.CharField(_("kind"), max_length=30)
    dedupe_key = models.CharField(_("dedupe key"), max_length=300)
    # Storm grouping: rule and alert kind, within a fixed window (deadletters.alert_rules).
    group_key = models.CharField(_("storm group"), max_length=200)
    window_start = models.DateTimeField(_("storm window"))
    payload = models.JSONField(_("payload"), default=dict)
    state = models.CharField(_("state"), max_length=10, choices=State.choices, default=State.PENDING)
    summary = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="folded",
        verbose_name=_("summarised in"),
    )
    created_at = models.DateTimeField(_("created"))
    next_attempt_at = models.DateTimeField(_("next attempt"), null=True, blank=True)
    sent_at = models.DateTimeField(_("sent"), null=True, blank=True)
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    last_error = models.TextField(_("last error"), blank=True)

    class Meta:
        verbose_name = _("alert")
        verbose_name_plural = _("alert outbox")
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["dedupe_key"], condition=Q(channel__isnull=True), name="alert_one_log_entry_per_event"
            ),
            models.UniqueConstraint(
                fields=["channel", "dedupe_key"], condition=Q(channel__isnull=False), name="alert_once_per_channel"
            ),
        ]
        indexes = [
            # alert_deliver_due: pending deliveries whose next attempt is due.
            models.Index(fields=["next_attempt_at"], condition=Q(state="pending"), name="alert_due_idx"),
            # Storm counting at record time and the summaries of ended windows.
            models.Index(fields=["channel", "group_key", "window_start"], name="alert_storm_idx"),
            models.Index(
                fields=["window_start"],
                condition=Q(state="folded", summary__isnull=True),
                name="alert_unsummarised_idx",
            ),
            # alert_prune (retention) and the outbox list, newest first.
            models.Index(fields=["created_at"], name="alert_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.get_severity_display()} {KIND_LABELS.get(self.kind, self.kind)} #{self.pk}"
