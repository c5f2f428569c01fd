# ruff: noqa: F811  (the browser fixture imported from the fit tests is redefined as an argument)
"""An incident page after a real outage, in headless Chromium, English and zh-Hans, 1440 and 390 px:
beat really stops long enough for a 10-second rule to miss slots, the first tick after records the
outage, and its page lists those missed slots to choose for a re-run. INCIDENT_SHOTS=dir saves
screenshots."""

import os
import time
from pathlib import Path

from django.urls import reverse

from runs.models import Decision, Incident, SchedulerTick, TaskRun
from tests.support.browser import BROWSER_MARKS, LAPTOP, PHONE, login, make_browser, overflow, until  # noqa: F401 - make_browser: a fixture
from tests.support.desk import make_user
from tests.support.processes import wait_for
from tests.support.rules import make_rule

SCREENS = [("en-US", LAPTOP), ("en-US", PHONE), ("zh-CN", LAPTOP), ("zh-CN", PHONE)]
HEADING = {"en": "Scheduler outage", "zh": "调度器中断"}
START = 120  # seconds: a loaded machine's worker and beat take a while to start
# Beat stays down longer than the stall period (ten 1-second ticks, at least 30 s), so the first
# tick after it is an outage; a 10-second rule misses its slots of that time (catch-up none).
DOWN = 45

pytestmark = BROWSER_MARKS


def _shot(browser, name: str) -> None:
    folder = os.environ.get("INCIDENT_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(folder) / f"{name}.png"))


def test_an_incident_page_after_a_real_outage_lists_its_missed_slots(make_browser, live_server, harness):
    from selenium.webdriver.common.by import By

    make_user("omar", "On-call")
    rule = make_rule("every-10s", interval_seconds=10)
    harness.worker()
    beat = harness.beat()
    wait_for(lambda: TaskRun.objects.filter(rule=rule).exists(), timeout=START, what="the rule's first run")
    beat.stop()
    stopped = SchedulerTick.objects.get(name="scheduler").last_tick_at
    time.sleep(DOWN)  # the outage itself: no tick, no alerts pass
    harness.beat("beat2")
    wait_for(
        lambda: Incident.objects.filter(kind="scheduler", ended_at__isnull=False).exists(),
        timeout=START,
        what="the outage recorded by the first tick after it",
    )
    incident = Incident.objects.get(kind="scheduler")
    assert incident.started_at == stopped
    missed = list(
        Decision.objects.filter(rule=rule, reason="missed", slot__gt=incident.started_at, slot__lte=incident.ended_at)
    )
    assert len(missed) >= 2  # 45 s down, the last of them within the grace and run late

    url = live_server.url + reverse("admin:runs_incident_change", args=[incident.id])
    for lang, size in SCREENS:
        browser = make_browser(size, lang=lang)
        login(browser, live_server, "omar")
        browser.get(url)
        until(browser, lambda d: d.find_elements(By.ID, "incident-missed"), "the incident page")
        assert HEADING[lang[:2]] in browser.find_element(By.ID, "incident-header").text
        boxes = browser.find_elements(By.CSS_SELECTOR, "#incident-missed input[name=_selected_action]")
        assert sorted(int(b.get_attribute("value")) for b in boxes) == sorted(d.id for d in missed)
        assert browser.find_elements(By.CSS_SELECTOR, "#incident-grid .cells i.missed")
        scroll, client = overflow(browser)
        assert scroll <= client, f"{lang} {size[0]}: {scroll} > {client}"
        _shot(browser, f"incident-{lang[:2]}-{size[0]}")
