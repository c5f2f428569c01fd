# ruff: noqa: F811  (the browser fixture imported from the fit tests is redefined as an argument)
"""Missed slots re-run by selection, in headless Chromium, English and zh-Hans, 1440 and 390 px: beat
really stops long enough for a 5-second rule to miss slots, on-call ticks them on the decision list,
sees the plan first (nothing created), confirms, and each missed slot runs exactly once; planning the
same slots again refuses every one with its run. RERUN_SHOTS=dir saves screenshots."""

import os
from datetime import timedelta
from pathlib import Path

from django.urls import reverse
from django.utils import timezone

from runs.models import Decision, TaskRun
from tests.e2e.helpers import START_TIMEOUT, recording_rule
from tests.support.browser import BROWSER_MARKS, LAPTOP, PHONE, login, make_browser, overflow, until  # noqa: F401 - make_browser: a fixture
from tests.support.desk import make_user
from tests.support.processes import wait_for

PERIOD = 5  # seconds between the rule's slots
GRACE = 2  # a slot claimed later than this is late; with catch-up "none" it is missed
DOWN = 3 * PERIOD + GRACE  # beat stopped this long: at least two slots missed
CHOSEN = {"en": "chosen;", "zh": "已选"}
HAS_RUN = {"en": "already has a run", "zh": "已有运行"}

pytestmark = BROWSER_MARKS


def _shot(browser, name: str) -> None:
    folder = os.environ.get("RERUN_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(folder) / f"{name}.png"))


def _plan(browser, live_server, rule) -> list[tuple[str, str]]:
    """Tick every missed slot of the rule on the decision list and ask for the plan: its rows'
    (decision id, refusal code)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    query = f"?rule__id__exact={rule.id}&reason__exact={Decision.Reason.MISSED}"
    browser.get(live_server.url + reverse("admin:runs_decision_changelist") + query)
    browser.execute_script("document.getElementById('action-toggle').click()")
    Select(browser.find_element(By.NAME, "action")).select_by_value("rerun_slots")
    browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()
    until(browser, lambda d: d.find_elements(By.ID, "rerun-table"), "the plan")
    rows = browser.find_elements(By.CSS_SELECTOR, "#rerun-table tbody tr")
    return [(r.get_attribute("id").removeprefix("rerun-decision-"), r.get_attribute("data-refused")) for r in rows]


def test_missed_slots_are_re_run_by_selection_plan_first_each_exactly_once(
    make_browser, live_server, harness, settings
):
    from selenium.webdriver.common.by import By

    settings.HARNESS = {**settings.HARNESS, "SLOT_GRACE_SECONDS": GRACE}
    grace = {"HARNESS_SLOT_GRACE_SECONDS": str(GRACE)}
    make_user("omar", "On-call")
    rule = recording_rule("every-5s", kind="interval", interval_seconds=PERIOD, catchup="none")
    harness.worker(extra_env=grace)
    beat = harness.beat(extra_env=grace)
    wait_for(
        lambda: TaskRun.objects.filter(rule=rule, state="succeeded").exists(),
        timeout=START_TIMEOUT,
        what="a slot run on time",
    )
    beat.stop()
    stopped = timezone.now()
    screens = {}
    for lang, size in (("en-US", LAPTOP), ("en-US", PHONE), ("zh-CN", LAPTOP), ("zh-CN", PHONE)):
        browser = make_browser(size, lang=lang)
        login(browser, live_server, "omar")  # while beat is down
        screens[(lang[:2], size[0])] = browser
    wait_for(lambda: timezone.now() >= stopped + timedelta(seconds=DOWN), timeout=DOWN + 5, what="the outage")
    harness.beat("beat2", extra_env=grace)
    # A loaded machine's restarted beat may record the missed slots over more than one tick: wait for
    # the two the outage is long enough to miss, not for the first.
    missed = wait_for(
        lambda: (rows := list(Decision.objects.filter(rule=rule, reason=Decision.Reason.MISSED)))[1:] and rows,
        timeout=START_TIMEOUT,
        what="the missed slots (at least two), recorded by the restarted beat",
    )
    slots = sorted(d.slot for d in missed)
    assert not TaskRun.objects.filter(rule=rule, slot__in=slots).exists()

    # The plan first, in each language and width: every missed slot will run; nothing is created yet.
    for (lang, width), browser in screens.items():
        if (lang, width) == ("zh", PHONE[0]):
            continue  # this one plans again after the re-run, below
        rows = _plan(browser, live_server, rule)
        assert sorted(int(i) for i, _ in rows) == sorted(d.id for d in missed) and {r for _, r in rows} == {""}
        assert CHOSEN[lang] in browser.find_element(By.ID, "rerun-plan").text
        scroll, client = overflow(browser)
        assert scroll <= client, f"{lang} {width}: {scroll} > {client}"
        _shot(browser, f"rerun-plan-{lang}-{width}")
    assert not TaskRun.objects.filter(rule=rule, slot__in=slots).exists()

    confirming = screens[("en", LAPTOP[0])]
    spacing = confirming.find_element(By.ID, "id_spacing")
    spacing.clear()
    spacing.send_keys("0")
    confirming.find_element(By.ID, "rerun-confirm").click()
    until(confirming, lambda d: "Re-ran" in d.find_element(By.CSS_SELECTOR, ".messagelist").text, "the message")
    wait_for(
        lambda: TaskRun.objects.filter(rule=rule, slot__in=slots, state="succeeded").count() == len(slots),
        timeout=START_TIMEOUT,
        what="every missed slot run",
    )
    for slot in slots:  # exactly once each, with the key its slot always had
        (run,) = TaskRun.objects.filter(rule=rule, slot=slot)
        assert run.source == TaskRun.Source.BACKFILL

    # The same slots again: each refused with its run, in zh-Hans on a phone.
    phone = screens[("zh", PHONE[0])]
    rows = _plan(phone, live_server, rule)
    assert {r for _, r in rows} == {"has_run"} and len(rows) == len(slots)
    assert HAS_RUN["zh"] in phone.find_element(By.ID, "rerun-table").text
    assert phone.find_element(By.ID, "rerun-confirm").get_attribute("disabled")
    scroll, client = overflow(phone)
    assert scroll <= client, f"zh 390: {scroll} > {client}"
    _shot(phone, "rerun-refused-zh-390")
    assert TaskRun.objects.filter(rule=rule, slot__in=slots).count() == len(slots)
