"""Fixtures for the operator's desk tests: logged-in clients per role, rules, runs and tickets."""

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from deadletters.models import DeadLetter
from deadletters.services import deadletter_open
from harness_site.audit.roles import roles_ensure
from runs.engine.operations import run_retry_now
from runs.models import Attempt, TaskRun
from tasks.models import TriggerRule
from tasks.skills.errors import ClassifiedError
from tests.support.rules import make_rule
from tests.support.zh_complete import KEEP, data_words, english_words

PASSWORD = "desk-pass-123"


def make_user(username: str, group: str | None = None, *, superuser: bool = False) -> User:
    user = User.objects.create_user(username, password=PASSWORD, is_staff=True, is_superuser=superuser)
    if group:
        roles_ensure()
        user.groups.add(Group.objects.get(name=group))
    return user


def client_for(user: User) -> Client:
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def operator(db):
    return make_user("olga", "Operators")


@pytest.fixture
def oncall(db):
    return make_user("omar", "On-call")


@pytest.fixture
def viewer(db):
    return make_user("vera", "Viewers")


@pytest.fixture
def operator_client(operator):
    return client_for(operator)


@pytest.fixture
def oncall_client(oncall):
    return client_for(oncall)


@pytest.fixture
def viewer_client(viewer):
    return client_for(viewer)


def daily_report(**over) -> TriggerRule:
    """The desk's usual rule: a report at 09:00 Berlin, one run per business date."""
    fields = {
        "name": "daily-report",
        "reason": "operators need it",
        "kind": "cron",
        "cron": "0 9 * * *",
        "timezone": "Europe/Berlin",
        "dedupe_key_template": "report:{business_date}",
        **over,
    }
    return make_rule(**fields)


def make_failed_run(
    biz_key: str = "report:2026-03-01",
    *,
    now: datetime | None = None,
    rule=None,
    kind: str = "timeout",
    digest: str = "abc123",
) -> TaskRun:
    """A run that failed for good after one attempt, with its open dead-letter ticket."""
    now = now or datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    run = TaskRun.objects.create(
        biz_key=biz_key,
        rule=rule,
        rule_name=rule.name if rule else "r",
        skill="harness.noop",
        source="scheduler",
        trigger_at=now,
        run_after=now,
        start_at=now,
        finish_at=now,
        state=TaskRun.State.FAILED,
        attempts=1,
        first_failure_at=now,
        last_error="boom",
        last_error_kind=kind,
        fence=1,
        payload={"params": {}},
        retry_max_attempts=1,
    )
    Attempt.objects.create(
        run=run,
        number=1,
        fence=1,
        worker="w1@host:1",
        started_at=now,
        finished_at=now,
        outcome=Attempt.Outcome.FAILED,
        error_kind=kind,
        error_digest=digest,
        error="boom",
    )
    deadletter_open(
        run=run,
        error=ClassifiedError(kind=kind, message="boom", digest=digest),
        reason="attempt 1 of 1: attempts exhausted",
        now=now,
    )
    return run


def make_failed_replay(run: TaskRun, *, actor, replayed_at: datetime) -> DeadLetter:
    """Replay `run`'s open ticket at `replayed_at` (the desk's one replay) and let the replay fail for
    good three seconds later: attempt 2 and a new ticket. Returns the new ticket."""
    ticket = DeadLetter.objects.get(run=run, state=DeadLetter.State.PENDING_MANUAL)
    assert run_retry_now(run_id=run.pk, ticket_id=ticket.pk, actor=actor, now=replayed_at, reason="upstream is back")
    failed_at = replayed_at + timedelta(seconds=3)
    Attempt.objects.create(
        run=run,
        number=2,
        fence=2,
        worker="w2@host:2",
        started_at=replayed_at,
        finished_at=failed_at,
        outcome=Attempt.Outcome.FAILED,
        error_kind="timeout",
        error_digest="def456",
        error="still down",
    )
    TaskRun.objects.filter(pk=run.pk).update(
        state=TaskRun.State.FAILED, attempts=2, finish_at=failed_at, last_error="still down", fence=2
    )
    run.refresh_from_db()
    error = ClassifiedError(kind="timeout", message="still down", digest="def456")
    deadletter_open(run=run, error=error, reason="attempt 2 of 2: attempts exhausted", now=failed_at)
    return DeadLetter.objects.get(run=run, state=DeadLetter.State.PENDING_MANUAL)


# --- The shared browser: every page a browser test visits is checked ---------------------------

PHONE_WIDTH = 390
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


# The page's visible text without code (pre, code: JSON, keys, errors), as the HTML checker reads it.
VISIBLE_TEXT = """
if (!document.body) return '';
var code = Array.from(document.querySelectorAll('pre, code, textarea'));
var shown = code.map(e => e.style.display);
code.forEach(e => { e.style.display = 'none'; });
var text = document.body.innerText;
code.forEach((e, i) => { e.style.display = shown[i]; });
return text;
"""


def page_problems(driver) -> list[str]:
    """What is wrong with the page the driver shows, whatever the test came for: at phone width, a
    page wider than the screen (sideways scrolling); in zh-Hans, English words, raw codes or Python
    literals in its visible text (tests/support/zh_complete.py, data values allowed)."""
    problems = []
    width = driver.desk_size[0]
    if width <= PHONE_WIDTH:
        scroll = driver.execute_script("return document.documentElement.scrollWidth")
        if scroll > width:
            wide = driver.execute_script(
                "var w = document.documentElement.clientWidth; return Array.from(document.querySelectorAll('body *'))"
                ".filter(e => e.getBoundingClientRect().right > w + 1).slice(-3)"
                ".map(e => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className).join(', ')"
            )
            problems.append(f"{scroll} px wide at {width} px: {wide}")
    if driver.desk_lang.startswith("zh"):
        text = driver.execute_script(VISIBLE_TEXT)
        words = english_words(text, KEEP | data_words())
        if words:
            problems.append(f"English on a zh-Hans page: {sorted(set(words))[:15]}")
    return problems


def desk_driver(size: tuple[int, int] = (1400, 1000), *, lang: str = "en-US", dark: bool = False):
    """Headless Debian Chromium with a phone's or a laptop's viewport, in `lang`, whose every get()
    fails the test when page_problems() finds something: so a page a test adds later is checked too."""

    class CheckedChrome(webdriver.Chrome):
        def get(self, url: str) -> None:
            super().get(url)
            problems = page_problems(self)
            assert not problems, f"{self.current_url}: {problems}"

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--window-size={size[0]},{size[1]}",
        f"--lang={lang}",
    ):
        options.add_argument(arg)
    options.add_experimental_option("prefs", {"intl.accept_languages": lang})
    driver = CheckedChrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    # The viewport, not the window, is what a phone has.
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": size[0] < 600},
    )
    driver.desk_size = size
    driver.desk_lang = lang.lower()
    if dark:
        driver.execute_cdp_cmd(
            "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}
        )
    return driver
