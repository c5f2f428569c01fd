"""Admin login is throttled by django-axes, so a password cannot be guessed online: after HARNESS_LOGIN_FAILURE_LIMIT
failures for one username from one address, even the right password is refused with a clear message
on the login page, until the cool-off passes; a success resets the count; another user, or the same
user from another address, is not locked out."""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

PASSWORD = "right-pass-123456"


@pytest.fixture
def users():
    model = get_user_model()
    return [model.objects.create_user(n, password=PASSWORD, is_staff=True) for n in ("olga", "omar")]


def _login(client: Client, username: str, password: str, *, ip: str = "10.0.0.7"):
    return client.post(
        reverse("admin:login"),
        {"username": username, "password": password, "next": "/admin/"},
        REMOTE_ADDR=ip,
    )


def _logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def _fail(client: Client, username: str, times: int, **kw) -> None:
    for _ in range(times):
        response = _login(client, username, "wrong-password", **kw)
        assert response.status_code in (200, 429)


def test_it_refuses_the_right_password_after_too_many_failures_with_a_message(users):
    client = Client()
    _fail(client, "olga", settings.AXES_FAILURE_LIMIT)

    response = _login(client, "olga", PASSWORD)

    assert response.status_code == 429 and not _logged_in(client)
    html = response.content.decode()
    assert "Too many failed logins" in html and "15 minutes" in html
    assert 'id="login-form"' not in html or "errornote" in html


def test_it_does_not_lock_out_another_user_or_the_same_user_elsewhere(users):
    _fail(Client(), "olga", settings.AXES_FAILURE_LIMIT)

    other = Client()
    assert _login(other, "omar", PASSWORD).status_code == 302 and _logged_in(other)
    elsewhere = Client()
    assert _login(elsewhere, "olga", PASSWORD, ip="10.0.0.8").status_code == 302 and _logged_in(elsewhere)


def test_a_success_resets_the_count(users):
    client = Client()
    _fail(client, "olga", settings.AXES_FAILURE_LIMIT - 1)
    assert _login(client, "olga", PASSWORD).status_code == 302
    client.logout()

    _fail(client, "olga", settings.AXES_FAILURE_LIMIT - 1)

    assert _login(client, "olga", PASSWORD).status_code == 302 and _logged_in(client)


def test_it_lets_the_user_in_again_after_the_cool_off(users):
    client = Client()
    _fail(client, "olga", settings.AXES_FAILURE_LIMIT)
    assert _login(client, "olga", PASSWORD).status_code == 429
    # The failures happened a cool-off ago (the row's clock, moved back, as time passing would).
    AccessAttempt.objects.update(
        attempt_time=AccessAttempt.objects.get().attempt_time - settings.AXES_COOLOFF_TIME - timedelta(seconds=1)
    )

    assert _login(client, "olga", PASSWORD).status_code == 302 and _logged_in(client)


def test_the_lockout_page_speaks_chinese(users):
    client = Client(HTTP_ACCEPT_LANGUAGE="zh-hans")
    _fail(client, "olga", settings.AXES_FAILURE_LIMIT)

    html = _login(client, "olga", PASSWORD).content.decode()

    assert "登录失败次数过多" in html
