"""Settings, all from the environment (harness_site/environment.py, django-environ for the URL formats).

Every value is checked as it is read; a bad one is a line naming the variable, the problem and a good
example, and `env.finish()` at the end stops the process with all of them, no traceback."""

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import TypedDict
from urllib.parse import urlsplit

import environ

from harness_site.environment import Environment
from harness_site.logs import logging_config
from tasks.outbound import plain_url_error
from tasks.secrets import GRANTS_EXAMPLE, grant_name_error, grants_parse

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

environ.Env.read_env(BASE_DIR / ".env", overwrite=False)
env = Environment(os.environ)


# Keys that are public (.env.example, tutorials, Django's startproject marker) sign nothing.
_PLACEHOLDER_KEYS = {
    "change-me",
    "changeme",
    "secret",
    "secret-key",
    "your-secret-key",
    "test-only",
    "dev-only-insecure-key",
}
MIN_SECRET_KEY_LENGTH = 32


def secret_key_weakness(key: str) -> str | None:
    """Why `key` must not sign sessions with DEBUG off, or None when it will do."""
    if key.lower() in _PLACEHOLDER_KEYS:
        return "it is a published placeholder (e.g. the value in .env.example)"
    if key.startswith("django-insecure-"):
        return "it is marked django-insecure- (a development key)"
    if len(key) < MIN_SECRET_KEY_LENGTH or len(set(key)) < 5:
        return f"it is shorter than {MIN_SECRET_KEY_LENGTH} characters or repeats too few of them"
    return None


DEBUG = env.boolean("DEBUG", default=False)
SECRET_KEY = env.text("SECRET_KEY", default="" if not DEBUG else "dev-only-insecure-key")
_RANDOM_KEY = "$(python -c 'import secrets; print(secrets.token_urlsafe(48))')"
if not SECRET_KEY:
    env.refuse("SECRET_KEY", "required when DEBUG is off", _RANDOM_KEY)
    SECRET_KEY = "unset-" + "x" * 40
elif not DEBUG and (_weak := secret_key_weakness(SECRET_KEY)):
    # The key itself is never repeated: it may be a real one, merely short.
    env.refuse("SECRET_KEY", f"refused with DEBUG off: {_weak}", _RANDOM_KEY)
ALLOWED_HOSTS = env.items("ALLOWED_HOSTS", default=["localhost", "127.0.0.1"])

# HTTPS (README, "Production"): each off by default, since `./harness up` serves plain http on
# loopback; production sets all of them, and `manage.py check --deploy` is then clean (CI runs it).
# Behind a TLS proxy, SECURE_PROXY_SSL_HEADER names the header it sets to "https" (X-Forwarded-Proto):
# only a proxy that always sets or strips it may be trusted so, or a client could claim https itself.
_proxy_header = env.text("SECURE_PROXY_SSL_HEADER", default="")
if _proxy_header and re.fullmatch(r"[A-Za-z0-9-]+", _proxy_header):
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _proxy_header.upper().replace("-", "_"), "https")
elif _proxy_header or "SECURE_PROXY_SSL_HEADER" in os.environ:
    env.refuse(
        "SECURE_PROXY_SSL_HEADER",
        "not a header name (letters, digits and -; the value it must carry is https)",
        "X-Forwarded-Proto",
        value=_proxy_header,
    )
SECURE_SSL_REDIRECT = env.boolean("SECURE_SSL_REDIRECT", default=False)
# A load balancer's health probe and a Prometheus scrape often speak plain http inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env.whole("SECURE_HSTS_SECONDS", default=0, low=0, high=2 * 365 * 86400)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.boolean("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.boolean("SECURE_HSTS_PRELOAD", default=False)
SESSION_COOKIE_SECURE = env.boolean("SESSION_COOKIE_SECURE", default=False)
CSRF_COOKIE_SECURE = env.boolean("CSRF_COOKIE_SECURE", default=False)
CSRF_TRUSTED_ORIGINS = env.items("CSRF_TRUSTED_ORIGINS", default=[])
for _origin in CSRF_TRUSTED_ORIGINS:
    if not _origin.startswith(("http://", "https://")) or not urlsplit(_origin).netloc:
        env.refuse(
            "CSRF_TRUSTED_ORIGINS", f"{_origin!r} is not an origin (scheme and host)", "https://harness.example.com"
        )

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # Index expressions with an operator class (runs/key_index.py: the key search's pg_trgm index).
    "django.contrib.postgres",
    "django_celery_beat",
    "simple_history",
    "tasks",
    "runs",
    "deadletters",
    "harness_site.audit",
    # Login throttling (django-axes): failed admin logins counted per username and address.
    "axes",
    # The REST API under /api/v1/ (harness_site/api): DRF, its OpenAPI 3 schema, and Swagger UI and
    # Redoc served from our own static files (the sidecar), never from a CDN.
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    # htmx for the desk's live refresh: its pinned htmx.min.js is served as a static file, no CDN.
    "django_htmx",
]

MIDDLEWARE = [
    # First: every API refusal as problem details, even Django's own; oversized bodies refused unread.
    "harness_site.api.surface.ApiProblemMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The admin speaks the browser's language (Accept-Language) among LANGUAGES; after sessions, before common.
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # The operator's display zone (UTC, browser, rule) for admin pages; request.htmx for live refresh.
    "harness_site.display.DisplayZoneMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Puts the request's user on rule history rows (django-simple-history).
    "simple_history.middleware.HistoryRequestMiddleware",
    # Last, as django-axes asks: turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]
# Reverting a rule from its history would skip the form's validation; edit the rule instead.
SIMPLE_HISTORY_REVERT_DISABLED = True

ROOT_URLCONF = "harness_site.urls"
WSGI_APPLICATION = "harness_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            "libraries": {"harness": "harness_site.templatetags.harness"},
        },
    },
]

# The embedded default is a SQLite file in WAL mode; IMMEDIATE transactions take the write
# lock up front so two workers never deadlock upgrading a read lock (SQLite has no row locks).
DATABASES = {"default": env.database("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'harness.sqlite3'}")}
# Read whatever the database, so that a bad value is refused before the day it would count.
CONN_MAX_AGE = env.whole("CONN_MAX_AGE", default=60, low=0, high=86400)
# PostgreSQL: a bounded connection pool per process when HARNESS_DB_POOL_MAX > 0 (0: off).
DB_POOL_MAX = env.whole("HARNESS_DB_POOL_MAX", default=0, low=0, high=1000)
# Read by the Procfile's agents worker (threads, and its own pool); checked here so a bad value stops
# that worker's start-up like any other setting instead of reaching Celery's command line.
AGENT_CONCURRENCY = env.whole("HARNESS_AGENT_CONCURRENCY", default=16, low=1, high=10000)
AGENT_DB_POOL_MAX = env.whole("HARNESS_AGENT_DB_POOL_MAX", default=4, low=0, high=1000)
DB_POOL_MIN = env.whole("HARNESS_DB_POOL_MIN", default=1, low=0, high=1000)
DB_POOL_TIMEOUT = env.number("HARNESS_DB_POOL_TIMEOUT", default=30.0, low=0, high=3600, low_open=True)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=30000;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
        }
    )
elif DB_POOL_MAX > 0:
    # A bounded pool per process (psycopg_pool, through Django): a thread takes a connection for
    # each short write and gives it back, so runs that wait on a model hold none (runs.engine.store's
    # connection_release). A thread finding the pool empty waits up to HARNESS_DB_POOL_TIMEOUT s.
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps connections; Django keeps none
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": min(DB_POOL_MIN, DB_POOL_MAX),
        "max_size": DB_POOL_MAX,
        "timeout": DB_POOL_TIMEOUT,
    }
else:
    DATABASES["default"].setdefault("CONN_MAX_AGE", CONN_MAX_AGE)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Every way a user gets a password (the admin's forms, changepassword, createsuperuser, `harness
# admin-login`) runs these; 12 characters refuses the short classics (harness1, 12345678) outright.
MIN_PASSWORD_LENGTH = 12
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": MIN_PASSWORD_LENGTH},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
    {"NAME": "harness_site.passwords.GuessableValidator"},
]

# Login throttling with django-axes: after HARNESS_LOGIN_FAILURE_LIMIT failed logins for one username
# from one address, that pair is refused (even with the right password) for the cool-off; a success
# resets the count. Other users, and the same user from elsewhere, are unaffected, so a guesser cannot
# lock everyone out. Superusers unlock early under Axes > Access attempts (or manage.py axes_reset).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.whole("HARNESS_LOGIN_FAILURE_LIMIT", default=5, low=1, high=1000)
AXES_COOLOFF_TIME = timedelta(
    minutes=env.whole("HARNESS_LOGIN_COOLOFF_MINUTES", default=15, low=1, high=525600, why_low="no lockout at all")
)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# The admin's login page with the reason, status 429 (harness_site/lockout.py).
AXES_LOCKOUT_CALLABLE = "harness_site.lockout.lockout_response"
# Only failures are kept (AccessAttempt, one row per username and address); not every successful login.
AXES_DISABLE_ACCESS_LOG = True
# Not its banner in every worker, beat and manage.py start-up; lockouts are still logged.
AXES_VERBOSE = False

# The default when the browser asks for none of LANGUAGES (many of our operators read Chinese first).
LANGUAGE_CODE = env.one_of("LANGUAGE_CODE", default="en-us", choices=["en-us", "zh-hans", "en"])
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "harness_site" / "locale"]
# Stored instants are UTC; a rule's own IANA zone is a field on the rule, the host zone never matters.
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# The desk's own CSS and JavaScript (harness_site is not an app, so name its folder).
STATICFILES_DIRS = [BASE_DIR / "harness_site" / "static"]
# Every date and time printed says its zone and the second (harness_site/formats).
FORMAT_MODULE_PATH = ["harness_site.formats"]

# --- REST API (harness_site/api, docs/api.md) ------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Authorization: Bearer <ApiToken>, narrowed to the token's scopes; or a session + CSRF.
        "harness_site.api.auth.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["harness_site.api.auth.DeskPermission"],
    "DEFAULT_PARSER_CLASSES": ["harness_site.api.problems.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "harness_site.api.problems.problem_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Agent Harness API",
    "DESCRIPTION": "Rules, runs, delayed one-time runs and dead letters. Errors are RFC 9457 problem details.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "ENUM_NAME_OVERRIDES": {
        "RunStateEnum": "runs.models.TaskRun.State",
        "DeadLetterStateEnum": "deadletters.models.DeadLetter.State",
        "IncidentKindEnum": "runs.models.Incident.Kind",
        "KindEnum": "tasks.models.TriggerRule.Kind",  # the rule's kind keeps its name beside the incident's
    },
}

# "Name:email" or a bare address.
ADMINS = [tuple(a.split(":", 1)) if ":" in a else ("", a) for a in env.items("ADMINS", default=[])]
for _name, _address in ADMINS:
    if "@" not in _address:
        env.refuse("ADMINS", f"{_address!r} is not an email address", "On-call:oncall@example.com")
SERVER_EMAIL = env.text("SERVER_EMAIL", default="harness@localhost")
if "@" not in SERVER_EMAIL:
    env.refuse("SERVER_EMAIL", "not an email address", "harness@example.com", value=SERVER_EMAIL)
EMAIL_BACKEND = env.text("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
if _email_url := env.url(
    "EMAIL_URL",
    default="",
    schemes=environ.Env.EMAIL_SCHEMES,
    example="smtp://user:password@smtp.example.com:587/?tls=True",
    needs_host=False,
):
    globals().update(environ.Env.email_url_config(_email_url))

# --- Celery -----------------------------------------------------------------------------
# The embedded broker is Celery's file-system transport (made event-loop capable, with claims and
# redelivery: harness_site/broker.py): nothing to install, one machine only.
BROKER_DIR = Path(env.text("HARNESS_BROKER_DIR", default=str(VAR_DIR / "broker")))
CELERY_BROKER_URL = env.url(
    "CELERY_BROKER_URL",
    default="filesystem://",
    schemes=["filesystem", "redis", "rediss", "amqp", "amqps", "pyamqp"],
    example="redis://redis.internal:6379/0",
    needs_host=False,
)
if CELERY_BROKER_URL.startswith("filesystem://"):
    try:
        for sub in ("queue", "processed", "control", "claims"):
            (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    except OSError as _exc:
        env.refuse(
            "HARNESS_BROKER_DIR",
            f"cannot create its folders ({_exc.strerror})",
            "/srv/harness/broker",
            value=str(BROKER_DIR),
        )
    CELERY_BROKER_TRANSPORT = "harness_site.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # kombu polls once a second by default: that alone added ~1 s of lateness to every run.
        "polling_interval": 0.1,
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "store_processed": False,
        # Messages a worker has received and not yet acknowledged (harness_site/broker.py): a dead
        # worker's are put back in the queue within about a second.
        "claims_folder": str(BROKER_DIR / "claims"),
        # Broadcast/pidbox files too, so nothing lands in the working directory.
        "control_folder": str(BROKER_DIR / "control"),
    }
elif CELERY_BROKER_URL.startswith("redis://"):
    # kombu's Redis transport, with one client kept per connection pool (harness_site/broker.py).
    # rediss:// keeps kombu's own: kombu sets its TLS defaults by the scheme's name.
    CELERY_BROKER_TRANSPORT = "harness_site.broker:RedisTransport"
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
CELERY_TASK_IGNORE_RESULT = True
# No result backend is configured (the run row is the result); without this, each thread of a
# threads-pool worker builds its own backend, reading every package's entry points (about 45 ms of CPU).
CELERY_RESULT_BACKEND_THREAD_SAFE = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# Messages are hints (the database row is the truth), acknowledged late (after the task). What a
# crashed worker had received and not finished comes back as follows (tests/e2e/test_worker_faults_e2e.py):
#   * file broker: its claimed messages go back to the queue about a second after it dies
#     (harness_site/broker.py; measured: prefetched runs started elsewhere 1.2 s after kill -9);
#   * Redis: kombu restores unacknowledged messages only after the visibility timeout (1 hour), so
#     the sweeper re-sends them once the worker is silent for 10 s and they are neither queued nor
#     held (runs/engine/sweeper.py; measured: 13-14 s after kill -9).
# A run that was executing keeps its lease until it expires (the rule's lease TTL), then is retried.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Ticks and sweeps get a queue of their own, served by a small dedicated worker (see Procfile),
# so long agent runs that occupy every pool process cannot stall the scheduler.
CELERY_TASK_DEFAULT_QUEUE = "celery"
CONTROL_QUEUE = "harness_control"
# Runs go to "celery" (prefork: skills that compute) or "agents" (threads: skills that wait), as
# their skill or rule says (tasks/skills/sdk.py RUN_QUEUES; docs/agents.md, "Execution modes").
CELERY_TASK_QUEUES: dict[str, dict[str, str]] = {"celery": {}, "agents": {}, CONTROL_QUEUE: {}}
CELERY_TASK_ROUTES = {
    "runs.scheduler_tick": {"queue": CONTROL_QUEUE},
    "runs.sweep": {"queue": CONTROL_QUEUE},
    "tasks.sensors_scan": {"queue": CONTROL_QUEUE},
    "deadletters.alerts_check": {"queue": CONTROL_QUEUE},
}
# Celery's Django fixup closes the database connection around every task unless this is set;
# reusing it halves the cost of a short run (measured: 16.5 ms -> 6.4 ms start-to-finish p50).
CELERY_DB_REUSE_MAX = env.whole("CELERY_DB_REUSE_MAX", default=1000, low=1, high=1_000_000)
CELERY_BEAT_SCHEDULER = "runs.beat_scheduler:Scheduler"  # DatabaseScheduler, the tick on the second
# How often beat re-reads the periodic-task table (edits in the admin take effect within this).
CELERY_BEAT_MAX_LOOP_INTERVAL = env.whole("HARNESS_BEAT_MAX_LOOP_INTERVAL", default=5, low=1, high=3600)
DJANGO_CELERY_BEAT_TZ_AWARE = True

REDIS_URL = env.url(
    "REDIS_URL",
    default="",
    schemes=["redis", "rediss", "unix"],
    example="redis://redis.internal:6379/1",
    needs_host=False,
)


# --- Harness ----------------------------------------------------------------------------
class HarnessSettings(TypedDict):
    """The value type of each HARNESS entry, so that mypy checks its readers (settings.HARNESS["..."])."""

    TICK_SECONDS: int
    SWEEP_SECONDS: int
    OBJECTIVE_SECONDS: int
    REDISPATCH_SECONDS: int
    SENSOR_SECONDS: int
    PREPARED_STATEMENTS: bool
    MAX_SLOTS_PER_TICK: int
    SLOT_GRACE_SECONDS: int
    DECISION_RETENTION_DAYS: int
    ADMIN_BASE_URL: str
    ALERT_CHECK_SECONDS: int
    ALERT_RETRY_SECONDS: float
    BACKPRESSURE_CACHE_SECONDS: float
    METRICS_TOKEN: str
    METRICS_BIND: str
    WORKER_HEARTBEAT_SECONDS: float
    WORKER_STALL_SECONDS: float
    WORKER_SHUTDOWN_SECONDS: float


HARNESS: HarnessSettings = {
    # Seconds between scheduler ticks; the data migration installs the beat entry with it.
    "TICK_SECONDS": env.whole("HARNESS_TICK_SECONDS", default=1, low=1, high=3600, why_low="a busy loop"),
    "SWEEP_SECONDS": env.whole("HARNESS_SWEEP_SECONDS", default=1, low=1, high=3600, why_low="a busy loop"),
    # At most this often the sweeper evaluates the freshness objectives of open slots (runs/engine/objectives.py).
    "OBJECTIVE_SECONDS": env.whole("HARNESS_OBJECTIVE_SECONDS", default=15, low=1, high=3600),
    # A message is sent again only after it has been nowhere (neither queued nor held by a worker)
    # this long since it was sent: the commit-to-publish delay and a consumer's reporting delay.
    "REDISPATCH_SECONDS": env.whole("HARNESS_REDISPATCH_SECONDS", default=10, low=1, high=86400),
    # Seconds between file-sensor scans (beat entry "harness: file sensors").
    "SENSOR_SECONDS": env.whole("HARNESS_SENSOR_SECONDS", default=30, low=1, high=86400, why_low="a busy loop"),
    # PostgreSQL: the hot path's statements are prepared once per connection (runs/engine/store/postgres.py). Turn off
    # behind a pooler that cannot keep prepared statements (PgBouncer in transaction mode before 1.21).
    "PREPARED_STATEMENTS": env.boolean("HARNESS_PREPARED_STATEMENTS", default=True),
    # Upper bound on slots one rule may materialise per tick (bounded catch-up work).
    "MAX_SLOTS_PER_TICK": env.whole("HARNESS_MAX_SLOTS_PER_TICK", default=1000, low=1, high=1_000_000),
    # A slot claimed within this long of its instant is on time; a later one follows its rule's
    # catch-up policy (under "none": a missed decision). Long enough that a database restart or a
    # beat failover loses no slot; /healthz turns not-ok as soon as a slot is overdue beyond it.
    "SLOT_GRACE_SECONDS": env.whole("HARNESS_SLOT_GRACE_SECONDS", default=60, low=1, high=86400),
    # Decisions ("why didn't it run") older than this are deleted by the sweeper (bounded retention).
    "DECISION_RETENTION_DAYS": env.whole("HARNESS_DECISION_RETENTION_DAYS", default=90, low=1, high=36500),
    # Base of links in alerts; by default the address `./harness up` serves (HARNESS_PORT), not a fixed 8000.
    "ADMIN_BASE_URL": env.url(
        "HARNESS_ADMIN_BASE_URL",
        default=f"http://127.0.0.1:{env.whole('HARNESS_PORT', default=8000, low=1, high=65535)}",
        schemes=["http", "https"],
        example="https://harness.example.com",
    ),
    # Seconds between alert checks (beat entry "harness: alerts"): stalled scheduler, storm
    # summaries, delivery retries.
    "ALERT_CHECK_SECONDS": env.whole(
        "HARNESS_ALERT_CHECK_SECONDS", default=30, low=1, high=86400, why_low="a busy loop"
    ),
    # Seconds before a failed alert delivery is tried again; the delay doubles each time (up to 10
    # minutes, 5 tries in all: deadletters/alert_rules.py).
    "ALERT_RETRY_SECONDS": env.number("HARNESS_ALERT_RETRY_SECONDS", default=10.0, low=0, high=3600, low_open=True),
    # Backpressure (runs/engine/backpressure.py): a process counts pending runs at most this often per scope,
    # adding the runs it admitted since; watermark edits take effect within it.
    "BACKPRESSURE_CACHE_SECONDS": env.number("HARNESS_BACKPRESSURE_CACHE_SECONDS", default=1.0, low=0, high=3600),
    # Prometheus /metrics on the web app answers only a request bearing this token (unset: /metrics is
    # off there). `manage.py metrics_serve` serves the same metrics without a token on METRICS_BIND, an
    # address of its own (docs/observability.md).
    "METRICS_TOKEN": env.text("HARNESS_METRICS_TOKEN", default=""),
    "METRICS_BIND": env.text("HARNESS_METRICS_BIND", default="127.0.0.1:9464"),
    # Worker liveness (harness_site/worker_watch.py, runs/engine/workers.py): each worker process reports
    # itself this often; one that has work waiting and takes none for WORKER_STALL_SECONDS is "not
    # consuming" in /healthz and exits, so that its runner (Procfile, systemd) starts it again.
    "WORKER_HEARTBEAT_SECONDS": env.number(
        "HARNESS_WORKER_HEARTBEAT_SECONDS", default=2.0, low=0, high=3600, low_open=True
    ),
    "WORKER_STALL_SECONDS": env.number("HARNESS_WORKER_STALL_SECONDS", default=60.0, low=0, high=86400, low_open=True),
    # A warm shutdown (SIGTERM) waits this long for running tasks, then ends them: their leases expire
    # and they are retried. Without it a worker whose pool is stuck never exits.
    "WORKER_SHUTDOWN_SECONDS": env.number(
        "HARNESS_WORKER_SHUTDOWN_SECONDS", default=60.0, low=0, high=86400, low_open=True
    ),
}
MIN_METRICS_TOKEN_LENGTH = 16
if HARNESS["METRICS_TOKEN"] and len(HARNESS["METRICS_TOKEN"]) < MIN_METRICS_TOKEN_LENGTH:
    env.refuse(
        "HARNESS_METRICS_TOKEN",
        f"shorter than {MIN_METRICS_TOKEN_LENGTH} characters; use a random value",
        "$(python -c 'import secrets; print(secrets.token_urlsafe(32))')",
    )
_bind_host, _, _bind_port = HARNESS["METRICS_BIND"].rpartition(":")
if not _bind_host or not _bind_port.isascii() or not _bind_port.isdigit() or not 0 < int(_bind_port) < 65536:
    env.refuse("HARNESS_METRICS_BIND", "not host:port", "127.0.0.1:9464", value=HARNESS["METRICS_BIND"])
if HARNESS["WORKER_STALL_SECONDS"] <= HARNESS["WORKER_HEARTBEAT_SECONDS"]:
    env.refuse(
        "HARNESS_WORKER_STALL_SECONDS",
        f"not longer than HARNESS_WORKER_HEARTBEAT_SECONDS ({HARNESS['WORKER_HEARTBEAT_SECONDS']:g}): every worker "
        "would look stalled",
        "60",
        value=f"{HARNESS['WORKER_STALL_SECONDS']:g}",
    )

# Secrets are granted by the deployment, never named by an operator (docs/secrets.md): an agent's key
# or a webhook source's secret must be an environment variable under this prefix or in this list.
HARNESS_SECRET_PREFIX = env.text("HARNESS_SECRET_PREFIX", default="HARNESS_SECRET_")
HARNESS_SECRETS = env.items("HARNESS_SECRETS", default=[])
# Never grantable, whatever the prefix or the list says: they would hand out the site's own keys.
# tasks/secrets.py refuses them too, so a prefix cannot reach them either.
HARNESS_NEVER_SECRETS = frozenset(
    {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL", "CELERY_RESULT_BACKEND", "EMAIL_URL"}
)
if (
    not HARNESS_SECRET_PREFIX.endswith("_")
    or len(HARNESS_SECRET_PREFIX) < 4
    or HARNESS_SECRET_PREFIX in {"HARNESS_"}
    or any(name.startswith(HARNESS_SECRET_PREFIX) for name in HARNESS_NEVER_SECRETS)
):
    env.refuse(
        "HARNESS_SECRET_PREFIX",
        "not a prefix of its own ending in _ (it may not cover the site's own keys)",
        "HARNESS_SECRET_",
        value=HARNESS_SECRET_PREFIX,
    )
    HARNESS_SECRET_PREFIX = "HARNESS_SECRET_"
if HARNESS_NEVER_SECRETS & set(HARNESS_SECRETS):
    _listed = ", ".join(sorted(HARNESS_NEVER_SECRETS & set(HARNESS_SECRETS)))
    env.refuse("HARNESS_SECRETS", f"lists {_listed}: the site's own keys are never handed out", "OPENAI_API_KEY")

# What each granted secret is for (tasks/secrets.py, docs/secrets.md): NAME=model@URL (a model key,
# sent only under that URL root; repeat the entry for several roots), NAME=webhook (a webhook source's
# signing secret) or NAME=alert (an alert channel's). A secret serves only its declared purpose, and
# one undeclared serves none: an operator cannot point an agent at the webhook signing secret.
HARNESS_SECRET_GRANTS, _grant_problems = grants_parse(
    env.items("HARNESS_GRANTS"),
    name_error=lambda name: grant_name_error(
        name, prefix=HARNESS_SECRET_PREFIX, listed=HARNESS_SECRETS, never=HARNESS_NEVER_SECRETS
    ),
)
for _problem in _grant_problems:
    env.refuse("HARNESS_GRANTS", _problem, GRANTS_EXAMPLE)

# Where an agent may send its key: base URLs under these roots (scheme, host, optional port, optional
# path prefix; docs/secrets.md). Empty, the default: no HTTP agent may be saved or called, only the
# built-in echo provider the demo uses.
HARNESS_AGENT_URL_ALLOW = env.items("HARNESS_AGENT_URL_ALLOW", default=[])
for _entry in HARNESS_AGENT_URL_ALLOW:
    # An entry is held to the rules of the URLs compared with it (tasks/secrets.py).
    if _why := plain_url_error(_entry):
        env.refuse(
            "HARNESS_AGENT_URL_ALLOW",
            f"entry {_entry!r} is {_why}",
            "https://api.openai.com/v1,http://127.0.0.1:11434/v1",
        )

# Where alert channels may send (tasks/outbound.py, docs/secrets.md): webhook URLs under these roots,
# same matching as HARNESS_AGENT_URL_ALLOW (a query string is allowed: webhook tokens ride in it).
# Unset: the public webhook hosts of Feishu / Lark, DingTalk, Slack and WeCom, nothing else. An empty
# value allows no webhook at all.
HARNESS_ALERT_URL_ALLOW_DEFAULT = [
    "https://open.feishu.cn",
    "https://open.larksuite.com",
    "https://oapi.dingtalk.com",
    "https://hooks.slack.com",
    "https://qyapi.weixin.qq.com",
]
HARNESS_ALERT_URL_ALLOW = env.items("HARNESS_ALERT_URL_ALLOW", default=HARNESS_ALERT_URL_ALLOW_DEFAULT)
for _entry in HARNESS_ALERT_URL_ALLOW:
    if _why := plain_url_error(_entry):
        env.refuse(
            "HARNESS_ALERT_URL_ALLOW",
            f"entry {_entry!r} is {_why}",
            "https://hooks.slack.com,https://alerts.internal.example:8443/hooks",
        )

# LOG_FORMAT=text (readable lines, the trace and run in brackets) or json (one object per line with
# trace_id, run_id, biz_key, rule, attempt): harness_site/logs.py. Celery's workers and beat use it too.
LOG_FORMAT = env.one_of("LOG_FORMAT", default="text", choices=["text", "json"])
LOG_LEVEL = env.one_of(
    "LOG_LEVEL", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], normalize=str.upper
)
# The periodic chores' INFO lines (every tick and sweep, about nine a second) are left out unless asked for.
LOG_ROUTINE = env.boolean("LOG_ROUTINE", default=False)
LOGGING = logging_config(log_format=LOG_FORMAT, level=LOG_LEVEL, routine=LOG_ROUTINE)

# A mistyped HARNESS_* variable would otherwise be ignored silently: every one must be a name read above.
env.refuse_unread("HARNESS_", besides=HARNESS_SECRET_PREFIX)

# Every value has been read: stop here, one line per bad one, before anything runs on them.
env.finish()
