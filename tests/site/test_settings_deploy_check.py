"""`manage.py check --deploy` is clean with the production variables the README lists, each of them
needed: without them Django warns (HSTS, SSL redirect, secure session and CSRF cookies). The lint step of
`./harness test` runs the same check with the same variables, so CI keeps it clean."""

import json
import re
import subprocess
import sys

import pytest

from tests.support.processes import ROOT, child_env

# As the README makes one (token_urlsafe(48)): check --deploy wants 50 characters or more.
STRONG = "Vq3b9LkQ2xT7mN8pR4sW6yZ1aC5dE0fG-hJ_kL2mN8pR4sW6yZ1aC5dE0fG-hJ_k"


def readme_production_variables() -> dict[str, str]:
    """The `export NAME=value` lines of the README's production section that are written out in full."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Production", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^export ([A-Z_]+)=(\S+)$", section, flags=re.MULTILINE))


def security_variables() -> dict[str, str]:
    return {k: v for k, v in readme_production_variables().items() if k.startswith(("SECURE_", "SESSION_", "CSRF_"))}


def check_deploy(**extra: str) -> subprocess.CompletedProcess:
    env = child_env(DEBUG="false", SECRET_KEY=STRONG, ALLOWED_HOSTS="harness.example.com", **extra)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_readme_lists_a_variable_for_each_deploy_warning():
    assert set(security_variables()) >= {
        "SECURE_PROXY_SSL_HEADER",
        "SECURE_SSL_REDIRECT",
        "SECURE_HSTS_SECONDS",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "SECURE_HSTS_PRELOAD",
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
    }


def test_check_deploy_is_clean_with_the_readmes_production_variables():
    done = check_deploy(**security_variables())

    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert "no issues" in done.stdout


def test_check_deploy_warns_without_them():
    done = check_deploy()

    assert done.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in done.stderr + done.stdout


def test_the_variables_become_djangos_settings():
    code = (
        "import django, json; django.setup(); from django.conf import settings as s; print(json.dumps(["
        "s.SECURE_PROXY_SSL_HEADER, s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, s.SECURE_HSTS_INCLUDE_SUBDOMAINS,"
        " s.SECURE_HSTS_PRELOAD, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE]))"
    )
    env = child_env(SECRET_KEY=STRONG, **security_variables())
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr[-2000:]
    header, redirect, hsts, subdomains, preload, session, csrf = json.loads(done.stdout)
    assert header == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert redirect and hsts >= 31536000 and subdomains and preload and session and csrf


@pytest.mark.parametrize("value", ["X Forwarded Proto", "X-Forwarded-Proto:https", ""])
def test_a_bad_proxy_header_stops_the_start_up(value):
    done = check_deploy(SECURE_PROXY_SSL_HEADER=value)

    assert done.returncode == 78
    assert done.stderr.startswith("configuration error: SECURE_PROXY_SSL_HEADER=")


def test_the_lint_step_of_harness_test_runs_check_deploy_with_the_readmes_variables():
    script = (ROOT / "harness").read_text()
    checks = script.split("\nchecks()", 1)[1].split("\n}\n", 1)[0]
    test = script.split("\ncmd_test()", 1)[1].split("\n}\n", 1)[0]

    assert "check --deploy --fail-level WARNING" in checks
    assert "labelled lint checks" in test  # the test command runs them
    for name, value in security_variables().items():
        assert f"{name}={value}" in script, name
