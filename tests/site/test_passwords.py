"""Weak passwords are refused wherever a user gets one: the admin's add-user and set-password forms,
`manage.py changepassword` (Django's own, on the same validators) and `harness admin-login`."""

import io

import pytest
from django.contrib.auth import get_user_model, password_validation
from django.core.management import CommandError, call_command

from tests.support.desk import client_for, make_user

pytestmark = pytest.mark.django_db

WEAK = ["password", "12345678", "harness1", "aaaaaaaa", "harness-harness", "abababababababab", "Admin-admin-1"]
STRONG = "quiet-Lantern-87-orbit"


@pytest.mark.parametrize("password", WEAK)
def test_the_validators_refuse_a_weak_password_with_a_reason(password):
    user = get_user_model()(username="admin", email="admin@example.com")

    with pytest.raises(password_validation.ValidationError) as refused:
        password_validation.validate_password(password, user)

    assert all(message.strip() for message in refused.value.messages)


def test_the_validators_accept_a_strong_password():
    password_validation.validate_password(STRONG, get_user_model()(username="admin"))


@pytest.mark.parametrize("password", WEAK[:4])
def test_the_admin_refuses_to_create_a_user_with_a_weak_password(password):
    client = client_for(make_user("root", superuser=True))

    page = client.post(
        "/admin/auth/user/add/",
        {"username": "newbie", "password1": password, "password2": password, "usable_password": "true"},
    )

    assert page.status_code == 200
    assert not get_user_model().objects.filter(username="newbie").exists()
    errors = page.context["adminform"].form.errors
    assert errors.get("password2") or errors.get("password1"), errors


def test_the_admin_creates_a_user_with_a_strong_password():
    client = client_for(make_user("root", superuser=True))

    page = client.post(
        "/admin/auth/user/add/",
        {"username": "newbie", "password1": STRONG, "password2": STRONG, "usable_password": "true"},
    )

    assert page.status_code == 302
    assert get_user_model().objects.get(username="newbie").check_password(STRONG)


@pytest.mark.parametrize("password", WEAK[:4])
def test_the_admin_refuses_to_set_a_weak_password(password):
    client = client_for(make_user("root", superuser=True))
    user = get_user_model().objects.create_user("someone", password=STRONG)

    page = client.post(
        f"/admin/auth/user/{user.pk}/password/",
        {"password1": password, "password2": password, "usable_password": "true"},
    )

    assert page.status_code == 200
    user.refresh_from_db()
    assert user.check_password(STRONG)


def test_admin_login_validates_the_password_it_generates(settings, tmp_path):
    # A generated password is long and random, so only a stricter policy can refuse it: the command
    # must not create an admin whose password the site's own rules would refuse.
    settings.VAR_DIR = tmp_path
    settings.AUTH_PASSWORD_VALIDATORS = [
        {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 500}}
    ]

    with pytest.raises(CommandError, match="at least 500"):
        call_command("harness", "admin-login", stdout=io.StringIO(), stderr=io.StringIO())

    assert not get_user_model().objects.filter(username="admin").exists()
    assert not (tmp_path / "admin-password.txt").exists()


def test_admin_login_passes_the_sites_password_rules(settings, tmp_path):
    settings.VAR_DIR = tmp_path

    call_command("harness", "admin-login", stdout=io.StringIO(), stderr=io.StringIO())

    admin = get_user_model().objects.get(username="admin")
    password = (tmp_path / "admin-password.txt").read_text().strip()
    password_validation.validate_password(password, admin)
