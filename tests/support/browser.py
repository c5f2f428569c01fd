"""What the desk's browser tests share: their marks, a logged-in headless Chromium, waiting for a page,
and the laptop and phone sizes a page must fit without scrolling sideways."""

import os
import shutil
from pathlib import Path

import pytest
from django.db import connection
from django.urls import reverse

from tests.support.desk import CHROMEDRIVER, CHROMIUM, PASSWORD, desk_driver

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
WAIT = 20
LAPTOP = (1440, 900)
PHONE = (390, 844)

BROWSER_MARKS = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)),
        reason="needs Debian's chromium and chromium-driver (.ci/run installs them)",
    ),
    # What a browser shows does not depend on the database: these run in the SQLite pass. Each costs
    # 40-65 s of a loaded machine; the pages' queries and bad input are tested on both databases
    # without a browser (tests/runs/test_query_counts.py, tests/site/test_admin_bad_input.py).
    pytest.mark.skipif(connection.vendor == "postgresql", reason="browser tests run in the SQLite pass"),
]


@pytest.fixture
def make_browser():
    drivers = []

    def make(size, **kw):
        drivers.append(desk_driver(size, **kw))
        return drivers[-1]

    yield make
    for d in drivers:
        d.quit()


def login(browser, live_server, username: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(live_server.url + reverse("admin:login"))
    browser.find_element(By.ID, "id_username").send_keys(username)
    browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    until(browser, lambda d: "/login/" not in d.current_url, "login")


def until(browser, predicate, what: str, timeout: float = WAIT):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # The preview is re-rendered while the operator types: an element read just as it is replaced is
    # stale, which means "not there yet", as a missing one does (WebDriverWait's default).
    wait = WebDriverWait(browser, timeout, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,))
    return wait.until(predicate, message=f"waiting for {what}")


def overflow(browser) -> tuple[int, int]:
    """The page's scroll width and the window's width: equal when nothing scrolls sideways."""
    return tuple(
        browser.execute_script("return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    )


def shot(browser, name: str) -> None:
    """A full-height screenshot into docs/screenshots, only with SAVE_SCREENSHOTS=1."""
    if not os.environ.get("SAVE_SCREENSHOTS"):
        return
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    width = browser.execute_script("return window.innerWidth")
    height = browser.execute_script(
        "return Math.min(2600, Math.max(document.body.scrollHeight, document.documentElement.scrollHeight))"
    )
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": max(height, 600), "deviceScaleFactor": 1, "mobile": width < 600},
    )
    browser.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
    w, h = browser.desk_size
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {"width": w, "height": h, "deviceScaleFactor": 1, "mobile": w < 600}
    )
