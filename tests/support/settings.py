"""Settings of the test process: harness_site.settings, with a broker of its own per pytest-xdist worker.

Under pytest-xdist (`-n 2`) several test processes run at once, each with its own test database
(pytest-django gives the SQLite file and the PostgreSQL database a `_gw0`, `_gw1`… suffix). The broker
must be theirs alone as well: the `purged_broker` fixture empties it, and a worker started by one
test must never take another test's messages. So each xdist worker gets
  * a file-system broker folder of its own: $HARNESS_BROKER_DIR/gwN (default var/test-broker/gwN), and
  * a Redis database of its own: the configured number minus N (redis://…/15 -> 15 for gw0, 14 for gw1).
The values are written to os.environ *before* harness_site.settings reads them, so that the worker,
beat and manage.py processes a test starts (tests/support/processes.py) inherit exactly the same ones.

`./harness test` runs two pytest sessions of one backend at once (the tests without real processes
beside the end-to-end ones), so a session's lane (TEST_LANE: "unit" or "e2e") is part of every name
above: a lane's databases end in `_<lane>_gwN` and its broker folders are `<lane>-gwN`, and the
end-to-end lane's Redis databases are four further down (redis://…/15 -> 11 for its gw0).
"""

import os
import secrets
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[2]


def _redis_url_for(url: str, offset: int) -> str:
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    number = base - offset
    if number < 0:
        raise RuntimeError(f"{url}: not enough Redis databases below {base} for offset {offset}")
    return urlunsplit(parts._replace(path=f"/{number}"))


# The lanes a backend's sessions may run in at once ("": a pytest run of its own), and how far down
# each one's Redis databases start (room for four pytest-xdist workers a lane).
LANE_WORKERS = 4
LANES = {"": 0, "unit": 0, "e2e": LANE_WORKERS}


def lane(environ=os.environ) -> str:
    name = environ.get("TEST_LANE", "")
    if name not in LANES:
        raise RuntimeError(f"TEST_LANE={name!r}: not a lane ({', '.join(repr(k) for k in LANES)})")
    return name


def _isolate(environ) -> None:
    worker = environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ... in an xdist worker; unset otherwise
    own = lane(environ)
    base_dir = environ.get("HARNESS_BROKER_DIR") or str(ROOT / "var" / "test-broker")
    environ["HARNESS_BROKER_DIR"] = str(Path(base_dir) / "-".join(filter(None, (own, worker or "main"))))
    number = int(worker.removeprefix("gw")) if worker else 0
    offset = LANES[own] + number
    if offset:
        for name in ("CELERY_BROKER_URL", "REDIS_URL"):
            url = environ.get(name, "")
            if url.startswith(("redis://", "rediss://")):
                if own and number >= LANE_WORKERS:  # it would take the next lane's
                    raise RuntimeError(f"{url}: at most {LANE_WORKERS} pytest-xdist workers a lane on Redis")
                environ[name] = _redis_url_for(url, offset)


_isolate(os.environ)
# The suite runs with DEBUG off, where a weak SECRET_KEY is refused (SECRET_KEY=x on a command line):
# a generated one, in os.environ so that the processes a test starts inherit it.
os.environ["SECRET_KEY"] = "tests-" + secrets.token_urlsafe(48)
# The suite's catch-up tests are written around a 10 s slot grace (short outages in test time); the
# default (60 s) has its own test in tests/tasks/triggers/test_scheduler.py. Children inherit it.
os.environ.setdefault("HARNESS_SLOT_GRACE_SECONDS", "10")

# The fake model server listens on loopback (any port); x.example is the validation tests' provider.
os.environ.setdefault("HARNESS_AGENT_URL_ALLOW", "http://127.0.0.1,https://x.example/v1")
# Alert channels post to the suite's webhook receiver on loopback (tests/support/receiver.py), named by
# its address: no name may stand in for 127.0.0.1 (tasks/outbound.py). The public hosts stay allowed
# for the admin tests' DingTalk and Slack URLs.
os.environ.setdefault(
    "HARNESS_ALERT_URL_ALLOW",
    "http://127.0.0.1,https://open.feishu.cn,https://oapi.dingtalk.com,https://hooks.slack.com",
)

# What each test secret is for (HARNESS_GRANTS, tasks/secrets.py): a secret serves only its declared
# purpose, so a test naming a new secret declares it here. Model keys go to the fake model server on
# loopback or to x.example, the validation tests' provider.
TEST_MODEL_KEYS = [
    "HARNESS_SECRET_OPENAI",
    "HARNESS_SECRET_K",
    "HARNESS_SECRET_TEST_MODEL",
    "HARNESS_SECRET_TEST_URL_MODEL",
    "HARNESS_SECRET_SURFACE_MODEL",
    "HARNESS_SECRET_H9_MODEL_KEY",
    "HARNESS_SECRET_H9_TEST_MODEL",
    "HARNESS_SECRET_H9_E2E_MODEL",
    "HARNESS_SECRET_H11_E2E_MODEL_KEY",
    "HARNESS_SECRET_TEST_TRACE_MODEL",
    "HARNESS_SECRET_TEST_TRACE_E2E_MODEL",
]
TEST_WEBHOOK_SECRETS = [
    "HARNESS_SECRET_TEST_BILLING",
    "HARNESS_SECRET_TEST_HOOK_OLD",
    "HARNESS_SECRET_TEST_HOOK_NEW",
    "HARNESS_SECRET_TEST_FLOOD",
    "HARNESS_SECRET_WORK_TEST",
    "HARNESS_SECRET_TEST_BAD_INPUT",
    "HARNESS_SECRET_TEST_TRACE_HOOK",
    "HARNESS_SECRET_TEST_TRACE_E2E_HOOK",
    "HARNESS_SECRET_HOOK_ADMIN",
    "HARNESS_SECRET_OLD",
    "HARNESS_SECRET_NEW",
]
os.environ.setdefault(
    "HARNESS_GRANTS",
    ",".join(
        [f"{name}=model@{root}" for name in TEST_MODEL_KEYS for root in ("http://127.0.0.1", "https://x.example/v1")]
        + [f"{name}=webhook" for name in TEST_WEBHOOK_SECRETS]
    ),
)

from harness_site.settings import *  # noqa: E402, F403

# Django's advice for test runs: a fast hasher. The default (PBKDF2, 1,000,000 rounds) spends about
# half a second of CPU on every test user's password; what is tested here is who may log in and what
# they may do, not the hash. The worker and beat processes a test starts keep the real settings.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# SQLite: a file, not :memory:, so that the worker processes a test starts share the test database.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}  # noqa: F405

# Flushed by DELETE, not TRUNCATE: a second per transactional test less (tests/support/flush_by_delete).
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    DATABASES["default"]["ENGINE"] = "tests.support.flush_by_delete"  # noqa: F405
