"""Alert channels send only where the deployment allows (HARNESS_ALERT_URL_ALLOW, tasks/outbound.py):
a URL outside the allow-list is refused on save with a sentence naming the setting and again before
every delivery; at send time no name may lead to loopback, link-local or a metadata address (DNS
rebinding), and a redirect is never followed. Deliveries go to real HTTP receivers on loopback."""

import json
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import translation

from deadletters.alert_queue import alert_deliver_due
from deadletters.models import Alert, AlertChannel
from tasks import outbound
from tests.support.desk import make_failed_run
from tests.support.processes import ROOT, child_env
from tests.support.receiver import start_receiver

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ADD = reverse("admin:deadletters_alertchannel_add")
PUBLIC_HOOKS = [
    "https://open.feishu.cn/open-apis/bot/v2/hook/abc-123",
    "https://open.larksuite.com/open-apis/bot/v2/hook/abc-123",
    "https://oapi.dingtalk.com/robot/send?access_token=abc123",
    "https://hooks.slack.com/services/T000/B000/XXXX",
    "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=abc-123",
]


@pytest.fixture(autouse=True)
def no_channels():
    AlertChannel.objects.all().delete()  # the default one the data migration installs


@pytest.fixture
def second_receiver():
    rec, server = start_receiver("/elsewhere/OTHER-TOKEN")
    yield rec
    server.shutdown()
    server.server_close()


def webhook(url: str, **over) -> AlertChannel:
    """A channel row written without validation, as an older row or a raw SQL update would be."""
    return AlertChannel.objects.create(name="hook", kind="webhook", url=url, format="slack", min_severity="notice")


def deliver_one_final_failure() -> Alert:
    make_failed_run("report:allow", now=T0)
    alert_deliver_due(now=T0)
    return Alert.objects.get(channel__isnull=False)


# --- the allow-list -----------------------------------------------------------------------------


def test_unset_it_allows_the_public_webhook_hosts_and_nothing_else():
    env = child_env()
    env.pop("HARNESS_ALERT_URL_ALLOW", None)
    code = "import json; from harness_site import settings; print(json.dumps(settings.HARNESS_ALERT_URL_ALLOW))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    roots = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(roots) == sorted(
        [
            "https://open.feishu.cn",
            "https://open.larksuite.com",
            "https://oapi.dingtalk.com",
            "https://hooks.slack.com",
            "https://qyapi.weixin.qq.com",
        ]
    )
    for url in PUBLIC_HOOKS:
        assert outbound.url_allow_error(url, roots, setting="S", what="alerts", query=True) is None, url
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.1:8000/admin/",
        "http://hooks.slack.com/services/T/B/X",  # http: the entry says https
        "https://hooks.slack.com.attacker.test/services/T/B/X",
        "https://user:pw@hooks.slack.com/services/T/B/X",
        "https://hooks.slack.com/services/..;/x",
        "https://hooks.slack.com/services/%2e%2e/x",
        "https://internal-admin.corp/hook",
    ]:
        assert outbound.url_allow_error(url, roots, setting="S", what="alerts", query=True) is not None, url


@pytest.mark.parametrize(
    "url", ["http://10.0.0.7/hook", "http://127.0.0.1:9/hook", "https://hooks.slack.com.evil.test/x"]
)
def test_the_channel_form_refuses_a_url_outside_the_allow_list_naming_the_setting(admin_client, settings, url):
    settings.HARNESS_ALERT_URL_ALLOW = ["https://hooks.slack.com"]
    data = {"name": "h", "kind": "webhook", "url": url, "format": "slack", "min_severity": "warning"}
    data |= {"language": "en", "enabled": "on", "recipients": ""}
    response = admin_client.post(ADD, data)
    assert response.status_code == 200
    page = response.content.decode()
    assert "Not allowed: this deployment sends alerts only to the URLs listed in HARNESS_ALERT_URL_ALLOW." in page
    assert not AlertChannel.objects.exists()


def test_the_channel_form_saves_a_url_under_the_allow_list(admin_client, settings):
    settings.HARNESS_ALERT_URL_ALLOW = ["https://hooks.slack.com"]
    data = {"name": "h", "kind": "webhook", "url": PUBLIC_HOOKS[3], "format": "slack", "min_severity": "warning"}
    response = admin_client.post(ADD, data | {"language": "en", "enabled": "on", "recipients": ""})
    assert response.status_code == 302
    assert AlertChannel.objects.get().url == PUBLIC_HOOKS[3]


def test_model_validation_refuses_it_in_both_languages(settings):
    # Every save path that validates (the admin form, and any API or import that calls full_clean).
    settings.HARNESS_ALERT_URL_ALLOW = ["https://hooks.slack.com"]
    channel = AlertChannel(name="h", kind="webhook", url="http://169.254.169.254/latest", format="generic")
    with pytest.raises(ValidationError) as english:
        channel.full_clean()
    assert "HARNESS_ALERT_URL_ALLOW" in english.value.message_dict["url"][0]
    with translation.override("zh-hans"), pytest.raises(ValidationError) as chinese:
        channel.full_clean()
    message = chinese.value.message_dict["url"][0]
    assert "HARNESS_ALERT_URL_ALLOW" in message and "不允许" in message, message


# --- at delivery --------------------------------------------------------------------------------


def test_the_alert_texts_still_reach_an_allowed_receiver(receiver):
    webhook(receiver.url)
    alert = deliver_one_final_failure()
    assert alert.state == Alert.State.SENT, alert.last_error
    [body] = receiver.requests
    assert "report:allow" in body["text"]
    host = receiver.url.split("/")[2]
    assert receiver.hosts == [host]  # connected to the checked address, the Host header unchanged


def test_a_row_edited_behind_the_admins_back_sends_nothing_and_says_why(receiver, settings):
    # The receiver's port is not the one allowed: as if the URL was changed by SQL after validation.
    settings.HARNESS_ALERT_URL_ALLOW = ["http://127.0.0.1:1"]
    channel = webhook(receiver.url)
    alert = deliver_one_final_failure()
    assert receiver.requests == []
    assert alert.state != Alert.State.SENT
    assert "refused" in alert.last_error and "HARNESS_ALERT_URL_ALLOW" in alert.last_error
    assert "T0K3N-SECRET" not in alert.last_error and "SECRET-QUERY" not in alert.last_error
    # The channel's page says so before the next delivery fails.
    from deadletters.alert_health import channel_problem

    assert channel_problem(channel) == "url_not_allowed"


def test_a_name_that_resolves_to_loopback_is_refused_at_send_time(receiver, settings):
    # "localhost" is allowed by name, and resolves to 127.0.0.1 (or ::1): a name may not stand for
    # loopback, only the address written out may (DNS rebinding: a name allowed when saved, then
    # pointed at this host).
    settings.HARNESS_ALERT_URL_ALLOW = ["http://localhost"]
    url = receiver.url.replace("127.0.0.1", "localhost")
    AlertChannel(name="probe", kind="webhook", url=url, format="slack").full_clean()  # allowed on save
    webhook(url)
    alert = deliver_one_final_failure()
    assert receiver.requests == []
    assert alert.state != Alert.State.SENT
    assert "refused" in alert.last_error and "loopback" in alert.last_error, alert.last_error


def test_a_redirect_to_another_host_is_not_followed(receiver, second_receiver):
    receiver.status = 307  # a 307 would resend the POST, body and all
    receiver.headers = {"Location": second_receiver.url.replace("127.0.0.1", "localhost")}
    webhook(receiver.url)
    alert = deliver_one_final_failure()
    assert len(receiver.requests) == 1
    assert second_receiver.requests == []
    assert alert.state != Alert.State.SENT
    assert "redirect: not followed" in alert.last_error
    assert "OTHER-TOKEN" not in alert.last_error and "SECRET-QUERY" not in alert.last_error


# --- the address check, pure ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "host", "refused"),
    [
        ("127.0.0.1", "hooks.example.com", "loopback"),
        ("127.8.9.10", "hooks.example.com", "loopback"),
        ("::1", "hooks.example.com", "loopback"),
        ("::ffff:127.0.0.1", "hooks.example.com", "loopback"),
        ("0.0.0.0", "hooks.example.com", "loopback"),
        ("169.254.169.254", "hooks.example.com", "link-local"),
        ("169.254.0.23", "hooks.example.com", "link-local"),
        ("fe80::1%eth0", "hooks.example.com", "link-local"),
        ("fd00:ec2::254", "hooks.example.com", "metadata"),
        ("100.100.100.200", "hooks.example.com", "metadata"),
        ("168.63.129.16", "hooks.example.com", "metadata"),
        ("127.0.0.1", "localhost", "loopback"),
        ("127.0.0.1", "2130706433", "loopback"),  # 127.0.0.1 as one number: still a name here
        ("127.0.0.1", "127.0.0.1", None),  # the deployment named the address itself
        ("::1", "[::1]", None),
        ("169.254.169.254", "169.254.169.254", None),
        ("10.1.2.3", "alerts.internal", None),  # a private network is the allow-list's business
        ("93.184.216.34", "hooks.example.com", None),
    ],
)
def test_address_refusal(address, host, refused):
    why = outbound.address_refusal(address, host=host)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why
