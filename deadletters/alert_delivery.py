"""Sending one alert to one channel: email, JSON webhook, log. Raises DeliveryError on any failure,
with a reason that never contains a webhook URL (they carry tokens)."""

import json
import logging
import re
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.mail import send_mail

from deadletters import alert_rules as rules
from deadletters.alert_texts import alert_message
from deadletters.alert_urls import alert_url_error
from deadletters.models import AlertChannel
from tasks import outbound

log = logging.getLogger("harness.alerts.channel")

WEBHOOK_TIMEOUT_SECONDS = 10.0
_SPLIT = re.compile(r"[,\s;]+")


class DeliveryError(Exception):
    """The channel did not take the alert; the outbox keeps the reason and retries (bounded)."""


def recipients_of(channel: AlertChannel) -> list[str]:
    return [a for a in _SPLIT.split(channel.recipients or "") if a]


def deliver(channel: AlertChannel, payload: dict) -> None:
    if channel.kind == AlertChannel.Kind.EMAIL:
        _email(channel, payload)
    elif channel.kind == AlertChannel.Kind.WEBHOOK:
        _webhook(channel, payload)
    elif channel.kind == AlertChannel.Kind.LOG:
        msg = alert_message(payload, language=channel.language)
        log.log(
            logging.ERROR if payload.get("severity") == rules.URGENT else logging.WARNING,
            "[%s] %s\n%s",
            channel.name,
            msg.title,
            msg.text,
        )
    else:
        raise DeliveryError(f"unknown channel kind {channel.kind!r}")


def _email(channel: AlertChannel, payload: dict) -> None:
    msg = alert_message(payload, language=channel.language)
    to = recipients_of(channel)
    try:
        # No recipients: the site ADMINS, as mail_admins would, but with our own "[harness]" subject.
        to = to or [address for _name, address in settings.ADMINS]
        if not to:
            raise DeliveryError("no recipients and no ADMINS configured")
        send_mail(msg.title, msg.text, settings.SERVER_EMAIL, to, fail_silently=False)
    except DeliveryError:
        raise
    except Exception as exc:  # SMTP, DNS, a mistyped backend: all retried the same way
        raise DeliveryError(f"email: {type(exc).__name__}: {exc}") from exc


def _webhook(channel: AlertChannel, payload: dict) -> None:
    body = rules.webhook_body(payload, channel.format, alert_message(payload, language=channel.language))
    safe = rules.redact_url(channel.url)
    # Checked again here, not only on save: a row edited behind the admin's back sends nothing.
    if (why := alert_url_error(channel.url)) is not None:
        raise DeliveryError(f"webhook {safe}: refused, {why}")
    try:
        with httpx.Client(timeout=WEBHOOK_TIMEOUT_SECONDS) as client:
            response = outbound.send(client, "POST", channel.url, json=body)
    except outbound.OutboundRefused as exc:
        raise DeliveryError(f"webhook {safe}: refused, {exc}") from exc
    except httpx.HTTPError as exc:
        raise DeliveryError(f"webhook {safe}: {type(exc).__name__}: {_scrub(str(exc), channel.url)}") from exc
    if response.is_redirect:
        # The Location may carry another token; the alert goes to the channel's own URL or nowhere.
        raise DeliveryError(f"webhook {safe}: HTTP {response.status_code}, a redirect: not followed")
    try:
        answer = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        answer = None
    ok, why = rules.webhook_accepted(channel.format, response.status_code, answer)
    if not ok:
        raise DeliveryError(f"webhook {safe}: {why}")


def _scrub(text: str, url: str) -> str:
    """`text` without the URL's path and query, where tokens live (also inside the address-pinned
    URL a transport error may quote)."""
    if not url:
        return text
    text = text.replace(url, rules.redact_url(url))
    parts = urlsplit(url)
    for token in (parts.query, parts.path):
        if len(token) > 1:
            text = text.replace(token, "/…")
    return text
