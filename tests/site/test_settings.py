"""Settings refuse what would run unsafely: a boolean that is not one, and a
placeholder or weak SECRET_KEY with DEBUG off. Each case runs the real settings module
(harness_site.settings) in a real Python process with that environment and reads its error; the
cases share one process per test worker (`outcomes`), each with a fresh environment and a fresh
run of the module, as a start-up would have it (one start-up per case cost 2 s of CPU each)."""

import os

import pytest

from tests.support.startup import Started, start_ups

STRONG = "Vq3b9LkQ2xT7mN8pR4sW6yZ1aC5dE0fG-hJ_kL2"
BOOLEANS_BAD = ["maybe", "ture", "2", "", "enabled", "true\n"]
BOOLEANS_GOOD = ["true", "True", "1", "yes", "ON", "false", "0", "no", "Off"]
WEAK_KEYS = [
    "change-me",  # the value in .env.example
    "changeme",
    "secret",
    "test-only",
    "django-insecure-0123456789abcdefghijklmnopqrstuvwxyz0123456789",  # startproject's marker
    "short-but-random-Xq81",  # fewer than 32 characters
    "a" * 60,  # one character repeated
]
CASES = {
    **{f"bool-bad:{v!r}": {"DEBUG": v, "SECRET_KEY": STRONG} for v in BOOLEANS_BAD},
    **{f"bool-good:{v}": {"DEBUG": v, "SECRET_KEY": STRONG} for v in BOOLEANS_GOOD},
    **{f"weak:{k}": {"DEBUG": "false", "SECRET_KEY": k} for k in WEAK_KEYS},
    "strong": {"DEBUG": "false", "SECRET_KEY": STRONG},
    "debug-weak": {"DEBUG": "true", "SECRET_KEY": "change-me"},
    "knobs": {"DEBUG": "false", "SECRET_KEY": STRONG, "HARNESS_TEST_WORKERS": "1", "HARNESS_E2E_WORKERS": "1"},
    "mistyped": {"DEBUG": "false", "SECRET_KEY": STRONG, "HARNESS_TICK_SECONDZ": "1"},
}


@pytest.fixture(scope="session")
def outcomes() -> dict[str, Started]:
    return start_ups(CASES, drop={"DEBUG", "SECRET_KEY"})


def test_each_case_ran_in_its_own_environment(outcomes):
    # A case that leaked into the next would show as a refused strong key after a weak one.
    assert set(outcomes) == set(CASES)
    assert outcomes["strong"].returncode == 0 and outcomes["weak:change-me"].returncode != 0


@pytest.mark.parametrize("value", BOOLEANS_BAD)
def test_it_refuses_a_boolean_that_is_not_one(outcomes, value):
    done = outcomes[f"bool-bad:{value!r}"]

    assert done.returncode != 0
    assert done.returncode == 78
    assert done.stderr.startswith("configuration error: DEBUG=") and "true or false" in done.stderr


@pytest.mark.parametrize("value", BOOLEANS_GOOD)
def test_it_accepts_the_usual_spellings_of_a_boolean(outcomes, value):
    assert outcomes[f"bool-good:{value}"].returncode == 0


@pytest.mark.parametrize("key", WEAK_KEYS)
def test_it_refuses_a_placeholder_or_weak_secret_key_with_debug_off(outcomes, key):
    done = outcomes[f"weak:{key}"]

    assert done.returncode != 0
    assert done.returncode == 78
    assert done.stderr.startswith("configuration error: SECRET_KEY") and "token_urlsafe" in done.stderr
    assert repr(key) not in done.stderr and f"={key}" not in done.stderr  # says why, never repeats the key


def test_it_accepts_a_strong_key_and_any_key_in_debug(outcomes):
    assert outcomes["strong"].returncode == 0, outcomes["strong"].stderr[-2000:]
    assert outcomes["debug-weak"].returncode == 0, outcomes["debug-weak"].stderr[-2000:]


def test_the_test_suite_itself_runs_with_a_strong_key():
    """The suite runs with DEBUG off; tests/support/settings.py gives it (and the processes it starts) a
    generated key, whatever weak value the command line passed (SECRET_KEY=x)."""
    from django.conf import settings

    assert not settings.DEBUG and len(settings.SECRET_KEY) >= 32 and os.environ["SECRET_KEY"] == settings.SECRET_KEY


def test_the_test_commands_knobs_are_not_settings_of_the_site(outcomes):
    # ./harness test reads them itself and hands them to no process; the site does not know them.
    done = outcomes["knobs"]

    assert done.returncode == 78
    assert "HARNESS_E2E_WORKERS: unknown setting" in done.stderr
    assert "HARNESS_TEST_WORKERS: unknown setting" in done.stderr


def test_a_mistyped_harness_setting_is_refused(outcomes):
    done = outcomes["mistyped"]

    assert done.returncode != 0
    assert "HARNESS_TICK_SECONDZ: unknown setting (did you mean HARNESS_TICK_SECONDS?" in done.stderr
