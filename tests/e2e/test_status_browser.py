# ruff: noqa: F811  (the browser fixture imported from the fit tests is redefined as an argument)
"""The 3 a.m. desk in headless Chromium, in English and zh-Hans, at 1440 and 390 px: the status page
is the landing page and says what is wrong first (worst first, missed slots, live); the dead-letter
desk shows the part of each key that differs and the error's first line; a raw key with `:` and CJK
characters finds its run and its ticket, and reads unescaped. STATUS_SHOTS=dir saves screenshots."""

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from deadletters.models import DeadLetter
from runs.models import Decision, SchedulerTick, TaskRun
from tests.support.browser import BROWSER_MARKS, LAPTOP, PHONE, login, make_browser, overflow, until  # noqa: F401 - make_browser: a fixture
from tests.support.desk import make_failed_run, make_user
from tests.support.rules import make_rule

ERROR = "ConnectionError: export target refused the upload\nTraceback (most recent call last):\n  ..."

pytestmark = BROWSER_MARKS


def _seed():
    make_user("omar", "On-call")
    now = timezone.now()
    broken = make_rule("demo-broken-export", kind="cron", cron="*/5 * * * *", timezone="Asia/Shanghai")
    for i in range(3):
        slot = datetime(2026, 12, 1, 1, 5 * i, tzinfo=UTC)
        failed = make_failed_run(
            f"rule/{broken.pk}/slot/demo-broken-export:{slot:%Y-%m-%dT%H:%M:%SZ}",
            now=now - timedelta(minutes=i),
            rule=broken,
        )
        TaskRun.objects.filter(pk=failed.pk).update(slot=slot, last_error=ERROR)
        DeadLetter.objects.filter(run=failed).update(last_error=ERROR)
    missing = make_rule("hourly-sync", kind="cron", cron="0 * * * *", timezone="Europe/Berlin")
    for h in range(1, 4):
        Decision.objects.create(rule=missing, slot=now - timedelta(minutes=h), reason="missed", created_at=now)
    fine = make_rule("daily-report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai")
    TaskRun.objects.create(
        biz_key=f"rule/{fine.pk}/once-key/callback%3Aorder-7",
        rule=fine,
        rule_name=fine.name,
        skill="harness.noop",
        source="api",
        trigger_at=now - timedelta(minutes=20),
        run_after=now - timedelta(minutes=20),
        state="succeeded",
    )
    trial = make_failed_run(f"rule/{fine.pk}/trial-key/订单%3A7", now=now - timedelta(hours=30), rule=fine)
    DeadLetter.objects.filter(run=trial).update(state=DeadLetter.State.CLOSED)
    make_rule("paused-rule", enabled=False)
    SchedulerTick.objects.create(name="scheduler", last_tick_at=now)
    return broken, missing, fine


def _shot(browser, name: str) -> None:
    folder = os.environ.get("STATUS_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(folder) / f"{name}.png"))


@pytest.mark.parametrize("lang", ["en-US", "zh-CN"], ids=["en", "zh"])
@pytest.mark.parametrize("size", [LAPTOP, PHONE], ids=["1440", "390"])
def test_the_landing_page_the_desk_and_a_raw_key_search(make_browser, live_server, lang, size):
    from selenium.webdriver.common.by import By

    broken, missing, fine = _seed()
    browser = make_browser(size, lang=lang)
    tag = f"{lang[:2]}-{size[0]}"
    login(browser, live_server, "omar")

    # 1. The landing page is the status board, worst first, and fits.
    browser.get(live_server.url + "/admin/")
    rows = browser.find_elements(By.CSS_SELECTOR, "#status-table tbody tr")
    assert [r.get_attribute("data-health") for r in rows][:2] == ["failing", "missed"]
    assert rows[0].get_attribute("id") == f"status-rule-{broken.pk}"
    assert rows[1].get_attribute("id") == f"status-rule-{missing.pk}"
    assert browser.find_element(By.ID, "status-missed-total").text == "3"
    assert len(rows[0].find_elements(By.CSS_SELECTOR, ".history-strip > *")) == 48
    assert overflow(browser)[0] <= overflow(browser)[1], ("status", size, lang)
    _shot(browser, f"status-{tag}")
    # The dashboard and the admin's page list are one click away.
    assert (
        browser.find_element(By.ID, "status-link-dashboard")
        .get_attribute("href")
        .endswith(reverse("harness-dashboard"))
    )
    assert browser.find_element(By.ID, "status-link-apps").get_attribute("href").endswith(reverse("harness-apps"))

    # 2. The dead-letter desk: the slot that differs, the error's first line, and it fits.
    browser.get(live_server.url + reverse("admin:deadletters_deadletter_changelist") + "?state__exact=pending_manual")
    keys = [k.text for k in browser.find_elements(By.CSS_SELECTOR, "#result_list td.field-key_column code")]
    assert sorted(keys) == ["2026-12-01T01:00:00Z", "2026-12-01T01:05:00Z", "2026-12-01T01:10:00Z"], keys
    errors = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#result_list td.field-error_column code")]
    assert errors == ["ConnectionError: export target refused the upload"] * 3, errors
    assert overflow(browser)[0] <= overflow(browser)[1], ("desk", size, lang)
    _shot(browser, f"desk-{tag}")

    # 3. A raw key with ':' finds its run; one with CJK characters its ticket; both read unescaped.
    browser.get(live_server.url + reverse("admin:runs_taskrun_changelist"))
    box = browser.find_element(By.ID, "searchbar")
    box.send_keys("callback:order-7")
    box.submit()
    until(browser, lambda d: "q=callback" in d.current_url, "the search")
    found = browser.find_elements(By.CSS_SELECTOR, "#result_list td.field-key_column code")
    assert [f.text for f in found] == ["callback:order-7"]
    assert found[0].get_attribute("title") == f"rule/{fine.pk}/once-key/callback:order-7"
    browser.get(live_server.url + reverse("admin:deadletters_deadletter_changelist"))
    box = browser.find_element(By.ID, "searchbar")
    box.send_keys("订单:7")
    box.submit()
    until(browser, lambda d: "q=" in d.current_url, "the search")
    found = browser.find_elements(By.CSS_SELECTOR, "#result_list td.field-key_column code")
    assert [f.text for f in found] == ["订单:7"]
    assert overflow(browser)[0] <= overflow(browser)[1], ("search", size, lang)
    _shot(browser, f"search-{tag}")
    browser.find_element(By.CSS_SELECTOR, "#result_list th.field-id a, #result_list td.field-id a").click()
    until(browser, lambda d: "/change/" in d.current_url, "the ticket page")
    assert "订单:7" in browser.title and "%3A" not in browser.title
    assert "%3A" not in browser.find_element(By.CSS_SELECTOR, ".breadcrumbs").text


def test_the_status_page_turns_a_row_red_live(make_browser, live_server):
    from selenium.webdriver.common.by import By

    _broken, _missing, fine = _seed()
    browser = make_browser(LAPTOP)
    login(browser, live_server, "omar")
    browser.get(live_server.url + "/admin/")
    row = f"status-rule-{fine.pk}"
    assert browser.find_element(By.ID, row).get_attribute("data-health") == "ok"
    browser.execute_script("window.__notReloaded = true")
    make_failed_run(f"rule/{fine.pk}/slot/daily-report:now", now=timezone.now(), rule=fine)
    until(browser, lambda d: d.find_element(By.ID, row).get_attribute("data-health") == "failing", "live", 30)
    assert browser.execute_script("return window.__notReloaded === true"), "the page was reloaded"
