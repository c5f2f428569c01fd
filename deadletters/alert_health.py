"""Can alerts reach anyone? Per channel: when it last delivered, its last error, and whether it can
deliver at all (an email channel with no recipients while ADMINS is unset cannot, nor a webhook
channel whose URL HARNESS_ALERT_URL_ALLOW does not allow). For the alert
channel list and the dashboard card "urgent alerts undeliverable": an alert nobody can receive is
only noticed here. Read-only."""

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypedDict

from django.conf import settings
from django.db.models import Max, OuterRef, Q, QuerySet, Subquery

from deadletters.alert_delivery import recipients_of
from deadletters.alert_urls import alert_url_error
from deadletters.models import Alert, AlertChannel

URGENT_WINDOW = timedelta(hours=24)


class ChannelHealth(TypedDict):
    """What channels_with_health annotates on each channel."""

    last_delivered_at: datetime | None
    last_error: str | None
    last_error_at: datetime | None


if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

    HealthChannel = WithAnnotations[AlertChannel, ChannelHealth]


def channels_with_health(channels: QuerySet) -> QuerySet:
    """The channels annotated with last_delivered_at, last_error and last_error_at (three subqueries)."""
    errors = Alert.objects.filter(channel=OuterRef("pk")).exclude(last_error="").order_by("-created_at", "-id")
    return channels.annotate(
        last_delivered_at=Max("alerts__sent_at", filter=Q(alerts__state=Alert.State.SENT)),
        last_error=Subquery(errors.values("last_error")[:1]),
        last_error_at=Subquery(errors.values("created_at")[:1]),
    )


def channel_problem(channel: AlertChannel) -> str:
    """Why this channel cannot deliver now ("" when it can, as far as the configuration shows)."""
    if channel.kind == AlertChannel.Kind.EMAIL and not recipients_of(channel) and not settings.ADMINS:
        return "no_recipients"
    if channel.kind == AlertChannel.Kind.WEBHOOK and alert_url_error(channel.url) is not None:
        return "url_not_allowed"  # delivery refuses it (HARNESS_ALERT_URL_ALLOW), however often retried
    return ""


def channel_failing(channel) -> bool:
    """Its latest error is newer than its latest delivery (annotated channels only)."""
    if channel_problem(channel):
        return True
    error_at, sent_at = getattr(channel, "last_error_at", None), getattr(channel, "last_delivered_at", None)
    return error_at is not None and (sent_at is None or error_at > sent_at)


def able_channels() -> list[AlertChannel]:
    """The enabled channels that can deliver, as far as their configuration shows."""
    return [c for c in AlertChannel.objects.filter(enabled=True) if not channel_problem(c)]


def urgent_undeliverable(*, now: datetime, able: list[AlertChannel] | None = None) -> int:
    """Urgent alerts of the last 24 h whose delivery failed: every delivery to a channel that can deliver
    failed or keeps failing. One query (plus the channel list).

    With no channel able to deliver there is no delivery to fail: 0, and urgent_log_only says how many
    reached only the log. A fresh install (its email channel off while ADMINS is unset) is not broken."""
    able = able_channels() if able is None else able
    if not able:
        return 0
    recent = Alert.objects.filter(severity="urgent", created_at__gte=now - URGENT_WINDOW)
    delivered = recent.filter(channel__in=able, state=Alert.State.SENT).values("dedupe_key")
    return (
        recent.filter(channel__isnull=True)
        .exclude(dedupe_key__in=delivered)
        .filter(
            dedupe_key__in=recent.filter(channel__isnull=False)
            .filter(Q(state=Alert.State.FAILED) | (Q(state=Alert.State.PENDING) & ~Q(last_error="")))
            .values("dedupe_key")
        )
        .count()
    )


def urgent_log_only(*, now: datetime, able: list[AlertChannel] | None = None) -> int | None:
    """Urgent alerts of the last 24 h that only the log received because no channel can deliver; None
    when some channel can (then urgent_undeliverable is the figure)."""
    able = able_channels() if able is None else able
    if able:
        return None
    return Alert.objects.filter(severity="urgent", created_at__gte=now - URGENT_WINDOW, channel__isnull=True).count()
