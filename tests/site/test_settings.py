"""Settings refuse what would run unsafely (issue 10, finding 12): a boolean that is not one, and a
placeholder or weak SECRET_KEY with DEBUG off. Each case starts a real Python process on the real
settings module (harness_site.settings) and reads its error."""

import os
import subprocess
import sys

import pytest

from tests.support.processes import ROOT

STRONG = "Vq3b9LkQ2xT7mN8pR4sW6yZ1aC5dE0fG-hJ_kL2"


def _start(**env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY"}}
    base["DJANGO_SETTINGS_MODULE"] = "harness_site.settings"
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("value", ["maybe", "ture", "2", "", "enabled", "true\n"])
def test_it_refuses_a_boolean_that_is_not_one(value):
    done = _start(DEBUG=value, SECRET_KEY=STRONG)

    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and "DEBUG=" in done.stderr and "true or false" in done.stderr


@pytest.mark.parametrize("value", ["true", "True", "1", "yes", "ON", "false", "0", "no", "Off"])
def test_it_accepts_the_usual_spellings_of_a_boolean(value):
    assert _start(DEBUG=value, SECRET_KEY=STRONG).returncode == 0


@pytest.mark.parametrize(
    "key",
    [
        "change-me",  # the value in .env.example
        "changeme",
        "secret",
        "test-only",
        "django-insecure-0123456789abcdefghijklmnopqrstuvwxyz0123456789",  # startproject's marker
        "short-but-random-Xq81",  # fewer than 32 characters
        "a" * 60,  # one character repeated
    ],
)
def test_it_refuses_a_placeholder_or_weak_secret_key_with_debug_off(key):
    done = _start(DEBUG="false", SECRET_KEY=key)

    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and "SECRET_KEY" in done.stderr and "token_urlsafe" in done.stderr
    assert repr(key) not in done.stderr and f"={key}" not in done.stderr  # says why, never repeats the key


def test_it_accepts_a_strong_key_and_any_key_in_debug():
    assert _start(DEBUG="false", SECRET_KEY=STRONG).returncode == 0
    assert _start(DEBUG="true", SECRET_KEY="change-me").returncode == 0


def test_the_test_suite_itself_runs_with_a_strong_key():
    """The suite runs with DEBUG off; tests/support/settings.py gives it (and the processes it starts) a
    generated key, whatever weak value the command line passed (SECRET_KEY=x)."""
    from django.conf import settings

    assert not settings.DEBUG and len(settings.SECRET_KEY) >= 32 and os.environ["SECRET_KEY"] == settings.SECRET_KEY


def test_the_test_commands_knobs_are_known_settings():
    # `HARNESS_E2E_WORKERS=1 ./harness test` puts them in every process's environment.
    done = _start(DEBUG="false", SECRET_KEY=STRONG, HARNESS_TEST_WORKERS="1", HARNESS_E2E_WORKERS="1")

    assert done.returncode == 0, done.stderr[-2000:]


def test_a_mistyped_harness_setting_is_refused():
    done = _start(DEBUG="false", SECRET_KEY=STRONG, HARNESS_TICK_SECONDZ="1")

    assert done.returncode != 0 and "unknown setting(s) HARNESS_TICK_SECONDZ" in done.stderr
