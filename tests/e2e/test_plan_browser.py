"""The rule form's "Review change" step in headless Chromium, in English and zh-Hans, on a laptop and
a phone: an edit shows its plan (changes, consequences, the past replayed, the next fires) and is
saved only from there. With SAVE_SCREENSHOTS=1 it refreshes docs/screenshots."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from tasks.models import TriggerRule
from tasks.rules import schedule
from tasks.triggers.scheduler import scheduler_tick
from tests.support.browser import BROWSER_MARKS, LAPTOP, PHONE, login, overflow, shot, until
from tests.support.desk import daily_report, desk_driver, make_user

pytestmark = BROWSER_MARKS


@pytest.fixture
def make_browser():
    drivers = []

    def make(size, **kw):
        drivers.append(desk_driver(size, **kw))
        return drivers[-1]

    yield make
    for d in drivers:
        d.quit()


WORDS = {
    "en-US": {"title": "Review change", "past": "past slots would have gone otherwise", "saved": "was changed"},
    "zh-CN": {"title": "审阅变更", "past": "个结果会不同", "saved": "成功修改"},
}


def _history() -> TriggerRule:
    """A 09:00 Shanghai report that ran on each of the last five days (through the scheduler's tick)."""
    now = timezone.now()
    rule = daily_report(name="daily-report", timezone="Asia/Shanghai")
    first = schedule.next_slot(rule.schedule_spec(), now - timedelta(days=5))
    TriggerRule.objects.filter(pk=rule.pk).update(next_fire_at=first)
    rule.refresh_from_db()
    while rule.next_fire_at <= now:
        scheduler_tick(now=rule.next_fire_at + timedelta(seconds=1))
        rule.refresh_from_db()
    return rule


@pytest.mark.parametrize("lang", ["en-US", "zh-CN"], ids=["en", "zh"])
def test_an_edit_is_reviewed_as_its_plan_then_saved(make_browser, live_server, lang):
    from selenium.webdriver.common.by import By

    make_user("olga", "Operators")
    rule = _history()
    words = WORDS[lang]
    for size, tag in ((LAPTOP, ""), (PHONE, "-phone")):
        browser = make_browser(size, lang=lang)
        login(browser, live_server, "olga")
        browser.get(live_server.url + reverse("admin:tasks_triggerrule_change", args=[rule.pk]))
        # The guards fold away on a saved rule's page: the value is typed into the folded field.
        browser.execute_script("document.getElementById('id_weekdays').value = 'sat-sun'")
        browser.find_element(By.NAME, "_save").click()
        until(browser, lambda d: d.find_elements(By.ID, "plan-confirm"), "the review page")

        assert words["title"] in browser.find_element(By.CSS_SELECTOR, "#content h1").text
        assert "sat-sun" in browser.find_element(By.ID, "plan-changes").text
        assert words["past"] in browser.find_element(By.ID, "plan-past-summary").text
        assert browser.find_elements(By.CSS_SELECTOR, "#plan-past tbody tr")  # the weekdays now excluded
        assert overflow(browser)[0] <= overflow(browser)[1], (size, lang)
        shot(browser, f"rule-review{'-zh' if lang.startswith('zh') else ''}{tag}")
        rule.refresh_from_db()
        assert rule.weekdays == ""  # nothing saved before the confirmation

        if tag:  # the phone only looks; the laptop saves
            continue
        browser.find_element(By.ID, "plan-save").click()
        until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".messagelist .success"), "the saved message")
        assert words["saved"] in browser.find_element(By.CSS_SELECTOR, ".messagelist").text
        rule.refresh_from_db()
        assert rule.weekdays == "sat-sun"
        TriggerRule.objects.filter(pk=rule.pk).update(weekdays="", version=rule.version)
