"""Alert health: each channel's last delivery and last error with a red mark on a
failing one, the dashboard's "urgent alerts undeliverable", and the seeded email channel disabled
while ADMINS is unset (it would fail every urgent alert of a fresh install)."""

import html
import importlib
from datetime import timedelta

import pytest
from django.apps import apps
from django.urls import reverse
from django.utils import timezone

from deadletters.alert_health import urgent_log_only, urgent_undeliverable
from deadletters.alert_queue import alert_deliver_due
from deadletters.models import Alert, AlertChannel
from tests.support.desk import make_failed_run

pytestmark = pytest.mark.django_db

SEEDED = "On-call email (ADMINS)"
CLOSED_PORT = "http://127.0.0.1:9/hook"  # discard port: nothing listens, the connection is refused


def test_the_seeded_email_channel_is_disabled_while_admins_is_unset(settings):
    assert not settings.ADMINS
    assert AlertChannel.objects.get(name=SEEDED).enabled is False
    migration = importlib.import_module("deadletters.migrations.0002_default_channel")
    AlertChannel.objects.filter(name=SEEDED).delete()
    settings.ADMINS = [("On call", "oncall@example.com")]
    migration.install(apps, None)
    assert AlertChannel.objects.get(name=SEEDED).enabled is True


def test_a_failing_channel_is_marked_with_its_last_error_and_counted_on_the_dashboard(admin_client):
    broken = AlertChannel.objects.create(name="hook", kind="webhook", url=CLOSED_PORT, min_severity="urgent")
    now = timezone.now()
    make_failed_run("report:a", now=now)
    alert_deliver_due(now=now + timedelta(seconds=1))
    row = Alert.objects.get(channel=broken)
    assert row.last_error and row.state in (Alert.State.PENDING, Alert.State.FAILED)
    page = html.unescape(admin_client.get(reverse("admin:deadletters_alertchannel_changelist")).content.decode())
    assert '<span class="bad" title="failing">✘</span>' in page
    assert row.last_error[:20] in page
    # The email channel the migration installed says why it cannot deliver.
    assert "no recipients and ADMINS is unset" in page
    assert urgent_undeliverable(now=now) == 1
    dash = html.unescape(admin_client.get(reverse("harness-dashboard")).content.decode())
    assert 'id="dash-alerts-undeliverable">1<' in dash


def test_a_delivering_channel_is_green_and_nothing_is_undeliverable(admin_client):
    AlertChannel.objects.filter(name=SEEDED).delete()
    log = AlertChannel.objects.create(name="log", kind="log", min_severity="urgent")
    now = timezone.now()
    make_failed_run("report:a", now=now)
    alert_deliver_due(now=now + timedelta(seconds=1))
    assert Alert.objects.get(channel=log).state == Alert.State.SENT
    page = html.unescape(admin_client.get(reverse("admin:deadletters_alertchannel_changelist")).content.decode())
    assert '<span class="ok" title="delivering">✔</span>' in page
    assert urgent_undeliverable(now=now) == 0


def test_with_no_channel_set_up_urgent_alerts_are_log_only_not_undeliverable(admin_client):
    now = timezone.now()
    make_failed_run("report:a", now=now)
    make_failed_run("report:b", now=now)
    # Only the seeded email channel, disabled (a fresh install): nothing failed to deliver, the log has them.
    assert urgent_undeliverable(now=now) == 0
    assert urgent_log_only(now=now) == 2
    dash = html.unescape(admin_client.get(reverse("harness-dashboard")).content.decode())
    assert 'id="dash-alerts-undeliverable"' not in dash
    assert 'class="big warn" id="dash-alerts-log-only"' in dash
    assert "No alert channel is set up: 2 urgent alerts went to the log only." in dash
    assert 'class="big bad"' not in dash.split('id="dash-alerts"')[1].split('class="card"')[0]
