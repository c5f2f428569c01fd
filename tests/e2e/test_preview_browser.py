# ruff: noqa: F811  (the browser fixture imported from the fit tests is redefined as an argument)
"""The add form's live preview in a real browser: choosing a business calendar and a start day
shows which Spring Festival fires run, in the user's language, without sideways scrolling."""

import os

import pytest
from django.urls import reverse

from tasks.models import BusinessCalendar
from tests.e2e.test_desk_browser import _login, _until, pytestmark  # noqa: F401
from tests.e2e.test_desk_fit_browser import PHONE, _overflow, make_browser  # noqa: F401
from tests.support.desk import make_user

WORDS = {  # the make-up Saturday before the 2026 break, and its first day
    "en-US": ("make-up working day", "no run: 2026-02-15: Spring Festival"),
    "zh-CN": ("调休工作日", "春节"),
}


@pytest.mark.parametrize("lang", ["en-US", "zh-CN"])
def test_the_add_forms_preview_follows_the_chosen_calendar_and_day(make_browser, live_server, lang):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    make_user("olga", "Operators")
    cal = BusinessCalendar.objects.create(name="cn", country="CN")
    browser = make_browser(PHONE, lang=lang)
    _login(browser, live_server, "olga")
    browser.get(live_server.url + reverse("admin:tasks_triggerrule_add"))
    Select(browser.find_element(By.ID, "id_kind")).select_by_value("cron")
    browser.find_element(By.ID, "id_cron").send_keys("0 9 * * *")
    zone = browser.find_element(By.ID, "id_timezone")
    zone.clear()
    zone.send_keys("Asia/Shanghai")
    # The guards fold away on the form, as an operator finds them: open the fold first.
    calendar = browser.find_element(By.ID, "id_business_calendar")
    browser.execute_script("arguments[0].closest('details').open = true; arguments[0].scrollIntoView()", calendar)
    Select(calendar).select_by_value(str(cal.pk))
    # A date input's typing order follows the browser's locale: set it as the date picker does.
    browser.execute_script(
        "var f = document.getElementById('rule-preview-from'); f.value = '2026-02-14';"
        "f.dispatchEvent(new Event('change'));"
    )
    makeup, holiday = WORDS[lang]

    def shown(driver):
        cells = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#guard-preview tbody td")]
        return any(makeup in c for c in cells) and any(holiday in c for c in cells)

    _until(browser, shown, "the calendar's words in the preview")
    if os.environ.get("PREVIEW_SHOTS"):  # a look at the form while changing it
        browser.execute_script("document.getElementById('rule-preview-from').scrollIntoView()")
        browser.save_screenshot(f"{os.environ['PREVIEW_SHOTS']}/preview-{lang}-390.png")
    scroll, client = _overflow(browser)
    assert scroll <= client, f"{lang}: {scroll} > {client}"
