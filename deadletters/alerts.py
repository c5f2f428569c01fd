"""Alerts for final failures: the log and mail_admins. Every alert carries run id and biz_key."""

import logging

from django.conf import settings
from django.core.mail import mail_admins
from django.urls import reverse

from .models import DeadLetter

log = logging.getLogger("harness.alerts")
# What every final-failure alert carries; the rule lint checks run_id and biz_key are among them.
ALERT_FIELDS = frozenset({"run_id", "biz_key", "rule", "error_kind", "link"})


def alert_final_failure(*, ticket: DeadLetter, reason: str) -> None:
    """Tell people. Never raises: a broken mail server must not undo a recorded failure."""
    link = settings.HARNESS["ADMIN_BASE_URL"].rstrip("/") + reverse(
        "admin:deadletters_deadletter_change", args=[ticket.pk]
    )
    subject = f"[harness] run {ticket.run_id} failed for good: {ticket.biz_key}"
    body = (
        f"run id:     {ticket.run_id}\n"
        f"biz_key:    {ticket.biz_key}\n"
        f"rule:       {ticket.rule_name or '-'}\n"
        f"error kind: {ticket.error_kind}\n"
        f"attempts:   {ticket.attempts}\n"
        f"why final:  {reason}\n"
        f"last error: {ticket.last_error}\n"
        f"ticket:     {link}\n"
    )
    log.error(
        "final failure run_id=%s biz_key=%s rule=%s error_kind=%s ticket=%s",
        ticket.run_id,
        ticket.biz_key,
        ticket.rule_name,
        ticket.error_kind,
        link,
    )
    try:
        mail_admins(subject, body, fail_silently=False)
    except Exception:  # the alert was logged above; mail is best effort
        log.exception("mail_admins failed for run_id=%s biz_key=%s", ticket.run_id, ticket.biz_key)


def alert_slot_expired(*, rule_name: str, slot, missing: list[str], now) -> None:
    """A slot waited for its readiness flags until the deadline and expired. Never raises."""
    subject = f"[harness] rule {rule_name} slot {slot:%Y-%m-%dT%H:%M:%SZ} expired: dependencies not ready"
    body = (
        f"rule:     {rule_name}\n"
        f"slot:     {slot.isoformat()}\n"
        f"missing:  {', '.join(missing) or '-'}\n"
        f"expired:  {now.isoformat()}\n"
        f"explain:  python manage.py harness explain {rule_name} {slot.isoformat()}\n"
    )
    log.error("slot expired not ready rule=%s slot=%s missing=%s", rule_name, slot.isoformat(), ",".join(missing))
    try:
        mail_admins(subject, body, fail_silently=False)
    except Exception:  # the alert was logged above; mail is best effort
        log.exception("mail_admins failed for rule=%s slot=%s", rule_name, slot.isoformat())
