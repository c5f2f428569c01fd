# ruff: noqa: F811  (the browser fixture imported from the fit tests is redefined as an argument)
"""The rule's History page on a phone (390 px), English and zh-Hans: nothing scrolls sideways and
no cell is so narrow that words break letter by letter."""

from datetime import time

import pytest
from django.urls import reverse
from django.utils import timezone

from tasks.triggers.operator import rule_pause
from tests.e2e.test_desk_browser import _login, pytestmark  # noqa: F401
from tests.e2e.test_desk_fit_browser import PHONE, _overflow, make_browser  # noqa: F401
from tests.support.desk import make_user
from tests.support.rules import make_rule

NARROWEST = 120  # px: a cell narrower than this on a phone breaks its words letter by letter


@pytest.mark.parametrize("lang", ["en-US", "zh-CN"])
def test_the_history_fits_a_phone(make_browser, live_server, lang):
    from selenium.webdriver.common.by import By

    make_user("olga", "Operators")
    rule = make_rule("daily-report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai")
    rule.objective, rule.objective_time = "wall", time(9, 30)
    rule._change_reason = "a freshness objective for the 09:30 report, agreed with the finance team"
    rule.save(now=timezone.now())
    rule_pause(rule=rule, actor="olga", now=timezone.now(), reason="upstream maintenance window")
    browser = make_browser(PHONE, lang=lang)
    _login(browser, live_server, "olga")
    browser.get(live_server.url + reverse("admin:tasks_triggerrule_history", args=[rule.pk]))
    scroll, client = _overflow(browser)
    assert scroll <= client, f"{lang}: {scroll} > {client}"
    widths = [c.size["width"] for c in browser.find_elements(By.CSS_SELECTOR, "#change-history td")]
    assert widths and min(widths) >= NARROWEST, widths
