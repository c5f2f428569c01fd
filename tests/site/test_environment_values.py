"""Every setting is checked at start-up: a bad value stops `manage.py check` (and so any start-up) with
one line naming the variable, what is wrong with the value and an example of a good one, exit status 78
(EX_CONFIG), no traceback. One case per setting that .env.example lists (and each of ours it does not)."""

import re
import subprocess
import sys

import pytest

from tests.support.processes import ROOT, child_env
from tests.support.startup import Started, start_ups

# (variable, bad value, words the line must say about it); extra variables a case needs after ";".
CASES = [
    ("DEBUG", "maybe", "not a boolean"),
    ("SECRET_KEY", "change-me", "published placeholder"),
    ("ALLOWED_HOSTS", "", None),  # an empty list is Django's to refuse (check --deploy): not ours
    ("CSRF_TRUSTED_ORIGINS", "harness.example.com", "not an origin"),
    ("SECURE_PROXY_SSL_HEADER", "X Forwarded Proto", "not a header name"),
    ("SECURE_SSL_REDIRECT", "yes please", "not a boolean"),
    ("SECURE_HSTS_SECONDS", "a year", "not a whole number"),
    ("SECURE_HSTS_SECONDS", "-1", "below 0"),
    ("SECURE_HSTS_INCLUDE_SUBDOMAINS", "maybe", "not a boolean"),
    ("SECURE_HSTS_PRELOAD", "maybe", "not a boolean"),
    ("SESSION_COOKIE_SECURE", "maybe", "not a boolean"),
    ("CSRF_COOKIE_SECURE", "maybe", "not a boolean"),
    ("DATABASE_URL", "garbage", "not a URL"),
    ("DATABASE_URL", "mysqlx://db.internal/harness", "unknown scheme mysqlx://"),
    ("DATABASE_URL", "postgres://u:hunter2@db.internal:99999/harness", "port"),
    ("DATABASE_URL", "postgres://db.internal:5432/", "names no database"),
    ("CONN_MAX_AGE", "abc", "not a whole number"),
    ("CONN_MAX_AGE", "-1", "below 0"),
    ("CELERY_BROKER_URL", "kafka://broker.internal:9092", "unknown scheme kafka://"),
    ("CELERY_BROKER_URL", "redis://redis.internal:port/0", "port"),
    ("HARNESS_BROKER_DIR", "/proc/harness-broker", "cannot create its folders"),
    ("REDIS_URL", "http://redis.internal:6379/1", "unknown scheme http://"),
    ("HARNESS_TICK_SECONDS", "abc", "not a whole number"),
    ("HARNESS_TICK_SECONDS", "0", "below 1 (a busy loop)"),
    ("HARNESS_TICK_SECONDS", "1.5", "not a whole number"),
    ("HARNESS_TICK_SECONDS", "\uff11", "not a whole number"),  # a full-width digit
    ("HARNESS_SWEEP_SECONDS", "0", "below 1"),
    ("HARNESS_OBJECTIVE_SECONDS", "0", "below 1"),
    ("HARNESS_REDISPATCH_SECONDS", "ten", "not a whole number"),
    ("HARNESS_MAX_SLOTS_PER_TICK", "0", "below 1"),
    ("HARNESS_PREPARED_STATEMENTS", "maybe", "not a boolean"),
    ("HARNESS_DB_POOL_MAX", "-1", "below 0"),
    ("HARNESS_AGENT_CONCURRENCY", "0", "below 1"),
    ("HARNESS_AGENT_DB_POOL_MAX", "lots", "not a whole number"),
    ("HARNESS_DB_POOL_MIN", "many", "not a whole number"),
    ("HARNESS_DB_POOL_TIMEOUT", "0", "too small"),
    ("HARNESS_SLOT_GRACE_SECONDS", "-60", "below 1"),
    ("HARNESS_DECISION_RETENTION_DAYS", "99999999", "above 36500"),
    ("HARNESS_SENSOR_SECONDS", "-5", "below 1 (a busy loop)"),
    ("HARNESS_BEAT_MAX_LOOP_INTERVAL", "0", "below 1"),
    ("HARNESS_ADMIN_BASE_URL", "harness.example.com", "not a URL"),
    ("HARNESS_ADMIN_BASE_URL", "ftp://harness.example.com", "unknown scheme ftp://"),
    ("HARNESS_PORT", "80000", "above 65535"),
    ("HARNESS_ALERT_CHECK_SECONDS", "0", "below 1"),
    ("HARNESS_ALERT_RETRY_SECONDS", "0", "too small"),
    ("HARNESS_ALERT_RETRY_SECONDS", "nan", "not a number"),
    ("HARNESS_BACKPRESSURE_CACHE_SECONDS", "-1", "too small"),
    ("HARNESS_BACKPRESSURE_CACHE_SECONDS", "inf", "not a number"),
    ("LOG_FORMAT", "xml", "not one of text, json"),
    ("LOG_LEVEL", "LOUD", "not one of DEBUG"),
    ("LOG_ROUTINE", "sometimes", "not a boolean"),
    ("HARNESS_METRICS_TOKEN", "tok-7Qx", "shorter than 16 characters"),
    ("HARNESS_METRICS_BIND", "9464", "not host:port"),
    ("HARNESS_WORKER_HEARTBEAT_SECONDS", "0", "too small"),
    ("HARNESS_WORKER_STALL_SECONDS", "1", "not longer than HARNESS_WORKER_HEARTBEAT_SECONDS"),
    ("HARNESS_WORKER_SHUTDOWN_SECONDS", "abc", "not a number"),
    ("LANGUAGE_CODE", "fr", "not one of en-us, zh-hans"),
    ("ADMINS", "On-call:nobody", "not an email address"),
    ("EMAIL_URL", "garbage", "not a URL"),
    ("EMAIL_URL", "smtpx://smtp.example.com", "unknown scheme smtpx://"),
    ("SERVER_EMAIL", "harness", "not an email address"),
    ("EMAIL_BACKEND", "", None),  # Django's to refuse when mail is sent: any dotted path may be a backend
    ("HARNESS_SECRET_PREFIX", "SECRET_", "may not cover the site's own keys"),
    ("HARNESS_SECRETS", "SECRET_KEY", "the site's own keys are never handed out"),
    ("HARNESS_GRANTS", "HARNESS_SECRET_OPENAI=signing", "is not NAME=model@URL"),
    ("HARNESS_GRANTS", "HARNESS_SECRET_OPENAI=model", "names the URL root"),
    ("HARNESS_GRANTS", "SECRET_KEY=webhook", "not granted, ever"),
    ("HARNESS_AGENT_URL_ALLOW", "ftp://files.example.com", "not a URL"),
    ("HARNESS_AGENT_URL_ALLOW", "https://api.example.com/v1/..;/x", "not a plain URL"),
    ("HARNESS_ALERT_URL_ALLOW", "hooks.slack.com", "not a URL"),
    ("HARNESS_ALERT_URL_ALLOW", "https://hooks.slack.com/services/..;/x", "not a plain URL"),
    ("HARNESS_LOGIN_FAILURE_LIMIT", "abc", "not a whole number"),
    ("HARNESS_LOGIN_FAILURE_LIMIT", "0", "below 1"),
    ("HARNESS_LOGIN_COOLOFF_MINUTES", "0", "below 1 (no lockout at all)"),
    ("CELERY_DB_REUSE_MAX", "0", "below 1"),
]
REFUSED = [c for c in CASES if c[2] is not None]
# Not ours to check: the OpenTelemetry SDK reads and checks its own variables; a secret's value is the
# deployment's (its strength is checked where it is used).
NOT_OURS = {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "HARNESS_SECRET_OPENAI"}
# A value that would be a secret is never repeated in the line.
NEVER_SHOWN = {"SECRET_KEY", "HARNESS_METRICS_TOKEN"}


def start(**extra: str) -> subprocess.CompletedProcess:
    env = child_env(**extra)
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def env_example_names() -> set[str]:
    text = (ROOT / ".env.example").read_text()
    return set(re.findall(r"^#? ?([A-Z][A-Z0-9_]*)=", text, flags=re.MULTILINE))


def test_every_setting_in_env_example_has_a_case():
    assert env_example_names() - NOT_OURS <= {name for name, _value, _words in CASES}


def case_env(name: str, value: str) -> dict[str, str]:
    extra = {"CELERY_BROKER_URL": "filesystem://"} if name == "HARNESS_BROKER_DIR" else {}
    if name == "DEBUG":
        extra["SECRET_KEY"] = "Vq3b9LkQ2xT7mN8pR4sW6yZ1aC5dE0fG-hJ_kL2"
    return {**extra, name: value}


@pytest.fixture(scope="module")
def refused_start_ups() -> dict[str, Started]:
    return start_ups({f"{n}={v}": case_env(n, v) for n, v, _w in REFUSED}, env=child_env())


@pytest.mark.parametrize(("name", "value", "words"), REFUSED, ids=[f"{n}={v}" for n, v, _w in REFUSED])
def test_a_bad_value_stops_the_start_up_with_one_line(refused_start_ups, name, value, words):
    done = refused_start_ups[f"{name}={value}"]

    assert done.returncode == 78, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr[-2000:]
    line = lines[0]
    assert line.startswith(f"configuration error: {name}"), line
    assert words in line, line
    assert f"e.g. {name}=" in line, line
    if name in NEVER_SHOWN:
        assert value not in line, line
    assert "hunter2" not in line  # a password in a URL is masked
    assert "Traceback" not in done.stderr


def test_the_values_in_env_example_start():
    text = (ROOT / ".env.example").read_text()
    values = dict(re.findall(r"^([A-Z][A-Z0-9_]*)=(.*)$", text, flags=re.MULTILINE))
    values.update(SECRET_KEY="Vq3b9LkQ2xT7mN8pR4sW6yZ1aC5dE0fG-hJ_kL2", DEBUG="false")

    done = start(**values)

    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize(
    "command", [["-m", "celery", "-A", "harness_site", "worker"], ["-m", "celery", "-A", "harness_site", "beat"]]
)
def test_workers_and_beat_stop_the_same_way(command):
    done = subprocess.run(
        [sys.executable, *command],
        cwd=ROOT,
        env=child_env(HARNESS_TICK_SECONDS="0"),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 78, done.stderr[-2000:]
    assert done.stderr.splitlines() == [
        "configuration error: HARNESS_TICK_SECONDS='0': below 1 (a busy loop); give a whole number from 1 to 3600;"
        " e.g. HARNESS_TICK_SECONDS=1"
    ]
