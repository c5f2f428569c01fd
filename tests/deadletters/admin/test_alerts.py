# ruff: noqa: RUF001  (Chinese text uses full-width punctuation)
"""The alert channel admin (bad input on the form, tokens never shown, "send test alert") and the
read-only alert outbox."""

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from deadletters.alert_queue import alert_deliver_due
from deadletters.alerts import alert_send_test
from deadletters.models import Alert, AlertChannel
from tests.support.desk import make_failed_run
from tests.support.zh_complete import assert_zh_complete

pytestmark = pytest.mark.django_db

ADD = reverse("admin:deadletters_alertchannel_add")
LIST = reverse("admin:deadletters_alertchannel_changelist")
TOKEN_URL = "https://oapi.dingtalk.com/robot/send?access_token=TOPSECRET"


def form(**over) -> dict:
    data = {
        "name": "oncall-hook",
        "kind": "webhook",
        "url": TOKEN_URL,
        "format": "dingtalk",
        "recipients": "",
        "min_severity": "warning",
        "language": "zh-hans",
        "enabled": "on",
    }
    data.update(over)
    return {k: v for k, v in data.items() if v is not None}


@pytest.mark.parametrize(
    ("over", "field_message"),
    [
        ({"url": ""}, "A webhook channel needs a URL."),
        ({"url": "ftp://example.com/hook"}, "The webhook URL must start with http:// or https://."),
        ({"url": "not a url"}, "Enter a valid URL."),
        (
            {"kind": "email", "url": "", "recipients": "oncall@example.com, not-an-address"},
            "not-an-address is not an email address.",
        ),
        ({"kind": "pager"}, "Select a valid choice."),
        ({"min_severity": "catastrophic"}, "Select a valid choice."),
        ({"name": ""}, "This field is required."),
    ],
)
def test_it_shows_bad_input_on_the_channel_form_and_saves_nothing(admin_client, over, field_message):
    before = AlertChannel.objects.count()  # the default channel the data migration installs
    response = admin_client.post(ADD, form(**over))
    assert response.status_code == 200
    assert field_message in response.content.decode()
    assert AlertChannel.objects.count() == before


def test_it_saves_a_webhook_channel_and_never_shows_its_token(admin_client):
    response = admin_client.post(ADD, form())
    assert response.status_code == 302
    channel = AlertChannel.objects.get(name="oncall-hook")
    assert channel.url == TOKEN_URL

    listing = admin_client.get(LIST).content.decode()
    assert "https://oapi.dingtalk.com/…" in listing and "TOPSECRET" not in listing
    change = admin_client.get(reverse("admin:deadletters_alertchannel_change", args=[channel.pk])).content.decode()
    assert "TOPSECRET" not in change


def test_leaving_the_url_blank_on_edit_keeps_it(admin_client):
    channel = AlertChannel.objects.create(name="hook", kind="webhook", url=TOKEN_URL, format="dingtalk")
    response = admin_client.post(
        reverse("admin:deadletters_alertchannel_change", args=[channel.pk]),
        form(name="hook", url="", min_severity="urgent"),
    )
    assert response.status_code == 302
    channel.refresh_from_db()
    assert (channel.url, channel.min_severity) == (TOKEN_URL, "urgent")


def test_the_database_refuses_a_webhook_channel_without_a_url():
    with pytest.raises(IntegrityError), transaction.atomic():
        AlertChannel.objects.create(name="broken", kind="webhook", url="")


def test_send_test_alert_queues_one_alert_per_channel_and_it_reaches_the_receiver(admin_client, receiver):
    hook = AlertChannel.objects.create(
        name="hook", kind="webhook", url=receiver.url, format="slack", min_severity="urgent"
    )  # a test alert goes whatever the minimum
    response = admin_client.post(LIST, {"action": "send_test_alert", "_selected_action": [hook.pk]}, follow=True)
    assert "A test alert was queued for 1 channel" in response.content.decode()
    [alert] = Alert.objects.filter(channel=hook)
    assert (alert.kind, alert.state) == ("test", Alert.State.PENDING)

    alert_deliver_due(now=timezone.now())
    [body] = receiver.requests
    assert "test alert for channel hook" in body["text"]
    assert Alert.objects.get(id=alert.id).state == Alert.State.SENT


def test_the_outbox_is_read_only(admin_client):
    channel = AlertChannel.objects.create(name="log", kind="log")
    alert = alert_send_test(channel=channel, now=timezone.now())
    listing = admin_client.get(reverse("admin:deadletters_alert_changelist"))
    assert listing.status_code == 200 and "test alert for channel log" in listing.content.decode()
    assert admin_client.get(reverse("admin:deadletters_alert_add")).status_code == 403
    page = admin_client.get(reverse("admin:deadletters_alert_change", args=[alert.pk])).content.decode()
    assert 'name="_save"' not in page
    response = admin_client.post(reverse("admin:deadletters_alert_change", args=[alert.pk]), {"kind": "x"})
    assert response.status_code == 403
    assert Alert.objects.get(id=alert.id).kind == "test"


def test_a_zh_hans_channel_gets_chinese_titles_and_text_and_the_outbox_names_kinds(admin_client, receiver):
    AlertChannel.objects.create(
        name="feishu", kind="webhook", url=receiver.url, format="feishu", min_severity="urgent", language="zh-hans"
    )
    now = timezone.now()
    run = make_failed_run("report:zh", now=now)
    alert_deliver_due(now=now + timedelta(seconds=1))
    text = receiver.requests[-1]["content"]["text"]
    assert text.startswith(f"[harness] 紧急 运行 {run.pk} 最终失败：report:zh"), text
    assert "错误类型" in text and "failed for good" not in text
    assert_zh_complete(text, where="Feishu alert")
    outbox = admin_client.get(reverse("admin:deadletters_alert_changelist") + "?kind=final_failure").content.decode()
    assert "final failure" in outbox and Alert.objects.filter(kind="final_failure").exists()
