"""The operator's desk seen in a real browser: headless Debian Chromium driven by Selenium, against
pytest-django's live_server and a real Celery worker. Saves screenshots for the README."""

import os
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone

from deadletters.models import DeadLetter
from runs.models import Attempt, SchedulerTick, TaskRun
from tests.support.browser import BROWSER_MARKS, SCREENSHOTS, login, until
from tests.support.desk import daily_report, desk_driver, make_failed_run, make_user
from tests.support.processes import wait_for

pytestmark = BROWSER_MARKS


@pytest.fixture
def browser():
    driver = desk_driver((1400, 1000))  # checks every page it visits (tests/support/desk.py)
    yield driver
    driver.quit()


def _user(name: str, group: str) -> User:
    return make_user(name, group)


def _text(browser, css: str) -> str:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.CSS_SELECTOR, css).text


def _shot(browser, name: str) -> None:
    # For the README: `SAVE_SCREENSHOTS=1 ./harness test tests/e2e/test_desk_browser.py` refreshes them;
    # ordinary runs leave the committed files alone.
    if not os.environ.get("SAVE_SCREENSHOTS"):
        return
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    height = browser.execute_script(
        "return Math.min(2400, Math.max(document.body.scrollHeight, document.documentElement.scrollHeight))"
    )
    browser.set_window_size(1400, max(height + 120, 800))
    browser.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
    browser.set_window_size(1400, 1000)


def test_it_updates_the_preview_as_the_operator_edits_the_cron(browser, live_server):
    from selenium.webdriver.common.by import By

    _user("olga", "Operators")
    rule = daily_report(cron="0 9 * * *", timezone="Asia/Shanghai", dedupe_key_template="report:{business_date}")
    login(browser, live_server, "olga")
    browser.get(live_server.url + reverse("admin:tasks_triggerrule_change", args=[rule.pk]))
    assert _text(browser, "#rule-preview .preview-description") == "At 09:00"
    assert "CST" in _text(browser, "#rule-preview .preview-fires tbody tr")
    _shot(browser, "rule-page")
    cron = browser.find_element(By.ID, "id_cron")
    cron.clear()
    cron.send_keys("*/5 * * * *")
    until(browser, lambda d: _text(d, "#rule-preview .preview-description") == "Every 5 minutes", "new preview")
    zone = browser.find_element(By.ID, "id_timezone")
    zone.clear()
    zone.send_keys("Mars/Olympus")
    until(browser, lambda d: "not a known zone" in _text(d, "#rule-preview"), "zone error in the preview")
    zone.clear()
    zone.send_keys("Europe/Berlin")
    until(browser, lambda d: "CET" in _text(d, "#rule-preview .preview-fires"), "Berlin times")


def test_it_previews_and_saves_a_one_time_run_at_on_the_rule_zones_clock(browser, live_server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    _user("olga", "Operators")
    rule = daily_report(cron="0 9 * * *", timezone="Asia/Shanghai", dedupe_key_template="report:{slot}")
    login(browser, live_server, "olga")
    browser.get(live_server.url + reverse("admin:tasks_triggerrule_change", args=[rule.pk]))
    Select(browser.find_element(By.ID, "id_kind")).select_by_value("once")
    until(browser, lambda d: "run_at" in _text(d, "#rule-preview"), "the preview asking for the run-at")
    # The widgets' "Today" and "Now" links fill in Shanghai's clock, the one the form reads.
    browser.find_element(By.CSS_SELECTOR, "#id_run_at_0 + .datetimeshortcuts a").click()
    browser.find_element(By.CSS_SELECTOR, "#id_run_at_1 + .datetimeshortcuts a").click()
    shanghai = timezone.now().astimezone(ZoneInfo("Asia/Shanghai")).replace(tzinfo=None)
    day = browser.find_element(By.ID, "id_run_at_0").get_attribute("value")
    clock = browser.find_element(By.ID, "id_run_at_1").get_attribute("value")
    filled = datetime.fromisoformat(f"{day}T{clock}")
    assert abs(filled - shanghai) < timedelta(minutes=2), (filled, shanghai)
    until(browser, lambda d: "CST" in _text(d, "#rule-preview .preview-description"), "the preview of Now")
    for field, typed in (("id_run_at_0", "2030-01-01"), ("id_run_at_1", "09:00")):
        browser.find_element(By.ID, field).clear()
        browser.find_element(By.ID, field).send_keys(typed)
    until(
        browser,
        lambda d: "2030-01-01 01:00:00 UTC" in _text(d, "#rule-preview .preview-description"),
        "the one-time instant in the preview",
    )
    description = _text(browser, "#rule-preview .preview-description")
    assert "Tue 2030-01-01 09:00:00 CST (UTC+0800)" in description
    assert "2030-01-01 01:00:00 UTC" in _text(browser, "#rule-preview .preview-fires tbody tr")
    browser.find_element(By.NAME, "_continue").click()
    # The edit is shown as its plan first (tests/e2e/test_plan_browser.py), then saved from there.
    until(browser, lambda d: d.find_elements(By.ID, "plan-save"), "the review page")
    browser.find_element(By.ID, "plan-save").click()
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".messagelist .success"), "the saved message")
    rule.refresh_from_db()
    assert rule.kind == "once" and rule.run_at == datetime(2030, 1, 1, 1, 0, tzinfo=UTC)
    # Shown back on Shanghai's clock.
    assert browser.find_element(By.ID, "id_run_at_1").get_attribute("value") == "09:00:00"


def test_it_trial_runs_a_rule_and_the_run_appears(browser, live_server, harness):
    from selenium.webdriver.common.by import By

    _user("olga", "Operators")
    rule = daily_report(enabled=False)
    harness.worker()
    login(browser, live_server, "olga")
    browser.get(live_server.url + reverse("admin:tasks_triggerrule_change", args=[rule.pk]))
    browser.find_element(By.ID, "rule-trial").click()
    browser.find_element(By.ID, "id_reason").send_keys("gray release check")
    browser.find_element(By.ID, "desk-form-submit").click()
    until(browser, lambda d: "/runs/taskrun/" in d.current_url, "the run page")
    assert "TRIAL" in _text(browser, "#run-timeline-panel h2")

    def succeeded(d):
        d.refresh()
        return _text(d, "#run-state") == "Succeeded"

    until(browser, succeeded, "the trial run to succeed", timeout=60)
    run = TaskRun.objects.get()
    assert run.is_trial and run.biz_key.startswith(f"rule/{run.rule_id}/trial/") and run.state == "succeeded"
    _shot(browser, "run-timeline")
    browser.get(live_server.url + reverse("admin:runs_taskrun_changelist"))
    _shot(browser, "runs")


def test_it_replays_a_dead_letter(browser, live_server, harness):
    from selenium.webdriver.common.by import By

    _user("omar", "On-call")
    for i in range(3):
        make_failed_run(f"report:2026-03-0{i + 1}", kind="timeout" if i else "invalid_param", digest=f"fp{i % 2}")
    ticket = DeadLetter.objects.get(biz_key="report:2026-03-01")
    harness.worker()
    login(browser, live_server, "omar")
    browser.get(live_server.url + reverse("admin:deadletters_deadletter_changelist") + "?state__exact=pending_manual")
    assert "Open backlog: 3" in _text(browser, "#deadletter-backlog")
    _shot(browser, "deadletter-desk")
    browser.get(live_server.url + reverse("admin:deadletters_deadletter_change", args=[ticket.pk]))
    _shot(browser, "deadletter-ticket")
    browser.find_element(By.ID, "ticket-replay").click()
    browser.find_element(By.ID, "desk-confirm-submit").click()
    until(browser, lambda d: "Replay queued" in _text(d, ".messagelist"), "the replay message")
    wait_for(
        lambda: TaskRun.objects.get(biz_key=ticket.biz_key).state == "succeeded",
        timeout=60,
        what="the replayed run to succeed",
    )
    run = TaskRun.objects.get(biz_key=ticket.biz_key)
    assert run.attempts == 2 and TaskRun.objects.filter(biz_key=ticket.biz_key).count() == 1
    ticket.refresh_from_db()
    assert ticket.state == "replayed"


def test_it_force_releases_a_lease(browser, live_server):
    from selenium.webdriver.common.by import By

    _user("omar", "On-call")
    now = timezone.now()
    run = TaskRun.objects.create(
        biz_key="report:stuck",
        skill="harness.noop",
        source="scheduler",
        trigger_at=now,
        run_after=now + timedelta(hours=1),
        state="running",
        lease_owner="w7@lost-host:99",
        lease_expires_at=now + timedelta(minutes=30),
        fence=2,
        attempts=1,
        start_at=now - timedelta(minutes=3),
    )
    Attempt.objects.create(run=run, number=1, fence=2, worker="w7@lost-host:99", started_at=now - timedelta(minutes=3))
    login(browser, live_server, "omar")
    browser.get(live_server.url + reverse("admin:runs_runlease_changelist"))
    assert "w7@lost-host:99" in _text(browser, "#result_list")
    _shot(browser, "leases")
    browser.get(live_server.url + reverse("admin:runs_taskrun_change", args=[run.pk]))
    browser.find_element(By.ID, "run-release").click()
    browser.find_element(By.ID, "id_reason").send_keys("host lost-host is gone")
    browser.find_element(By.ID, "desk-confirm-submit").click()
    until(browser, lambda d: "Lease force-released" in _text(d, ".messagelist"), "the release message")
    run.refresh_from_db()
    assert (run.state, run.fence, run.lease_owner) == ("waiting_retry", 3, "")


def test_it_shows_the_dashboard(browser, live_server):
    _user("vera", "Viewers")
    now = timezone.now()
    TaskRun.objects.bulk_create(
        [
            TaskRun(
                biz_key=f"k{i}",
                skill="harness.noop",
                source="scheduler",
                trigger_at=now - timedelta(minutes=17 * i),
                run_after=now - timedelta(minutes=17 * i),
                state=["succeeded", "succeeded", "failed", "pending"][i % 4],
                start_at=now - timedelta(minutes=17 * i) + timedelta(seconds=i % 7),
                finish_at=now - timedelta(minutes=17 * i) + timedelta(seconds=3 + i % 11),
                dedupe_hits=i % 5 == 0,
            )
            for i in range(80)
        ]
    )
    daily_report()
    make_failed_run("report:dl", now=now)
    SchedulerTick.objects.create(name="scheduler", last_tick_at=now)
    login(browser, live_server, "vera")
    browser.get(live_server.url + reverse("harness-dashboard"))
    assert _text(browser, "#dash-duplicates-count") == "0"
    _shot(browser, "dashboard")
