"""The desk as an operator and an on-call engineer see it in headless Chromium, on a laptop (1440x900)
and a phone (390x844), in English and zh-Hans, light and dark: pages that do not scroll
sideways, every time labelled with its zone, the rule's history strip as links, live refresh that
shows a trial run's outcome without a reload. With SAVE_SCREENSHOTS=1 it refreshes docs/screenshots."""

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from deadletters.models import DeadLetter
from runs.models import Decision, SchedulerTick, TaskRun
from tasks.triggers.operator import rule_pause
from tests.support.browser import BROWSER_MARKS, LAPTOP, PHONE, login, make_browser, overflow, shot, until  # noqa: F401
from tests.support.desk import daily_report, make_failed_run, make_user

pytestmark = BROWSER_MARKS
LONG_ERROR = (
    "TimeoutError: the upstream report service did not answer within 30 s while fetching "
    "https://reports.example.internal/api/v2/daily?channel=wechat&date=2026-12-01 " + "x" * 160
)


def _seed():
    """A Shanghai 09:00 rule with a history (runs, a decision, a failure with its ticket), paused."""
    user = make_user("omar", "On-call")
    user.groups.add(*make_user("olga", "Operators").groups.all())
    rule = daily_report(
        name="daily-report",
        cron="0 9 * * *",
        timezone="Asia/Shanghai",
        dedupe_key_template="report:{business_date}:{channel}",
        params={"channel": "wechat"},
    )
    day = datetime(2026, 11, 20, 1, 0, tzinfo=UTC)  # 09:00 in Shanghai
    for i in range(6):
        slot = day + timedelta(days=i)
        TaskRun.objects.create(
            biz_key=f"rule/{rule.pk}/report:{slot:%Y-%m-%d}:wechat",
            rule=rule,
            rule_name=rule.name,
            skill="harness.noop",
            source="scheduler",
            slot=slot,
            trigger_at=slot,
            run_after=slot,
            start_at=slot + timedelta(seconds=1),
            finish_at=slot + timedelta(seconds=4),
            state="succeeded",
            attempts=1,
        )
    Decision.objects.create(
        rule=rule,
        slot=day + timedelta(days=6),
        reason="calendar",
        details={"why": "weekend"},
        created_at=day + timedelta(days=6),
    )
    failed = make_failed_run(
        f"rule/{rule.pk}/report:2026-11-27:wechat:" + "very-long-channel-name-" * 3,
        now=day + timedelta(days=7),
        rule=rule,
    )
    TaskRun.objects.filter(pk=failed.pk).update(slot=day + timedelta(days=7), last_error=LONG_ERROR)
    DeadLetter.objects.filter(run=failed).update(last_error=LONG_ERROR)
    rule_pause(rule=rule, actor=user, now=timezone.now(), reason="upstream outage until Monday")
    SchedulerTick.objects.create(name="scheduler", last_tick_at=timezone.now())
    return rule, TaskRun.objects.get(pk=failed.pk), DeadLetter.objects.get(run=failed)


def _pages(rule, run, ticket) -> dict[str, str]:
    return {
        "run": reverse("admin:runs_taskrun_change", args=[run.pk]),
        "ticket": reverse("admin:deadletters_deadletter_change", args=[ticket.pk]),
        "rule": reverse("admin:tasks_triggerrule_change", args=[rule.pk]),
        "desk": reverse("admin:deadletters_deadletter_changelist") + "?state__exact=pending_manual",
        "runs": reverse("admin:runs_taskrun_changelist"),
        "rules": reverse("admin:tasks_triggerrule_changelist"),
        "dashboard": reverse("harness-dashboard"),
    }


@pytest.mark.parametrize("size", [LAPTOP, PHONE], ids=["1440x900", "390x844"])
def test_the_run_ticket_rule_and_desk_pages_do_not_scroll_sideways(make_browser, live_server, size):  # noqa: F811
    from selenium.webdriver.common.by import By

    rule, run, ticket = _seed()
    browser = make_browser(size)
    login(browser, live_server, "omar")
    wide = {}
    for name, url in _pages(rule, run, ticket).items():
        browser.get(live_server.url + url)
        wide[name] = overflow(browser)
        if size == LAPTOP and name in ("desk", "runs", "rules"):
            # Tables fit their column at laptop size: no sideways scrolling inside the list either.
            inner = browser.execute_script(
                "var t = document.getElementById('result_list'); return [t.scrollWidth, t.parentNode.clientWidth]"
            )
            assert inner[0] <= inner[1], (name, inner)
    too_wide = {n: w for n, w in wide.items() if w[0] > w[1]}
    assert not too_wide, too_wide
    # The full last error is on the run page, not cut.
    browser.get(live_server.url + _pages(rule, run, ticket)["run"])
    assert LONG_ERROR[-40:] in browser.find_element(By.ID, "run-last-error").text.replace("\n", "")


def test_times_say_their_zone_and_the_history_strip_links_to_runs_and_decisions(make_browser, live_server):  # noqa: F811
    from selenium.webdriver.common.by import By

    rule, run, ticket = _seed()
    browser = make_browser(LAPTOP)
    login(browser, live_server, "omar")
    pages = _pages(rule, run, ticket)
    browser.get(live_server.url + pages["run"])
    slot = browser.find_element(By.CSS_SELECTOR, "#run-timeline-panel .line time.when").text
    # The rule's zone first, UTC beside it, to the second.
    assert slot == "2026-11-27 09:00:00 CST (01:00:00 UTC)", slot
    assert (
        browser.find_element(By.CSS_SELECTOR, "#run-timeline-panel time.when")
        .get_attribute("title")
        .startswith("2026-11-27 01:00:00 UTC")
    )
    browser.get(live_server.url + pages["ticket"])
    browser.get(live_server.url + pages["rule"])
    assert "upstream outage until Monday" in browser.find_element(By.ID, "rule-paused-by").text
    assert "omar" in browser.find_element(By.ID, "rule-paused-by").text
    # Fields that do not apply to a cron rule are hidden.
    assert not browser.find_element(By.CSS_SELECTOR, ".field-interval_seconds").is_displayed()
    assert browser.find_element(By.CSS_SELECTOR, ".field-cron").is_displayed()
    cells = browser.find_elements(By.CSS_SELECTOR, "#rule-history a")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#rule-history > *")) == 48
    assert len(cells) == 8  # six runs, one decision, one failure; oldest first
    hrefs = [c.get_attribute("href") for c in cells]
    assert all("/admin/runs/taskrun/" in h for h in hrefs[:6]), hrefs
    assert "/admin/runs/decision/" in hrefs[6] and hrefs[7].endswith(f"/admin/runs/taskrun/{run.pk}/change/")
    cells[7].click()
    until(browser, lambda d: d.current_url.endswith(f"/taskrun/{run.pk}/change/"), "the failed run's page")
    # Elsewhere, UTC labelled: the runs list.
    browser.get(live_server.url + pages["runs"])
    first = browser.find_element(By.CSS_SELECTOR, "#result_list td.field-when_column time.when").text
    assert first.endswith(" UTC") and len(first) == len("2026-11-27 01:00:00 UTC"), first
    browser.get(live_server.url + pages["desk"])
    # The display-zone switch, remembered for the user: UTC first, the rule's zone beside it.
    browser.get(live_server.url + pages["run"])
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(By.ID, "zone-select")).select_by_value("utc")
    until(
        browser,
        lambda d: (
            d.find_element(By.CSS_SELECTOR, "#run-timeline-panel .line time.when").text
            == "2026-11-27 01:00:00 UTC (09:00:00 CST)"
        ),
        "UTC first after the switch",
    )
    browser.get(live_server.url + pages["run"])
    assert browser.find_element(By.ID, "zone-select").get_attribute("value") == "utc"


def test_live_refresh_shows_a_trial_runs_outcome_without_a_reload(make_browser, live_server, harness):  # noqa: F811
    from selenium.webdriver.common.by import By

    make_user("olga", "Operators")
    rule = daily_report(enabled=False)
    harness.worker()
    browser = make_browser(LAPTOP)
    login(browser, live_server, "olga")
    browser.get(live_server.url + reverse("admin:tasks_triggerrule_trial", args=[rule.pk]))
    browser.find_element(By.ID, "id_reason").send_keys("gray release check")
    browser.find_element(By.ID, "desk-form-submit").click()
    until(browser, lambda d: "/runs/taskrun/" in d.current_url, "the run page")
    browser.execute_script("window.__notReloaded = true")
    until(browser, lambda d: d.find_element(By.ID, "run-state").text == "Succeeded", "the outcome, live", timeout=60)
    assert browser.execute_script("return window.__notReloaded === true"), "the page was reloaded"
    # Final: the page stops asking.
    until(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, "#live-region[data-live]"), "refresh to stop")
    assert "no longer refreshes" in browser.find_element(By.ID, "live-state").text
    # Pausing stops the dashboard from refreshing; the bar says so.
    browser.get(live_server.url + reverse("harness-dashboard"))
    browser.find_element(By.ID, "live-toggle").click()
    until(browser, lambda d: "paused" in d.find_element(By.ID, "live-updated").text, "the paused label")
    browser.find_element(By.ID, "live-toggle").click()


@pytest.mark.parametrize(
    ("lang", "dark", "suffix"),
    [("en-US", False, ""), ("en-US", True, "-dark"), ("zh-CN", False, "-zh"), ("zh-CN", True, "-zh-dark")],
    ids=["en", "en-dark", "zh", "zh-dark"],
)
def test_the_main_pages_in_both_languages_and_themes(make_browser, live_server, lang, dark, suffix):  # noqa: F811
    """Screenshots of every main page; the phone-size run page too. Each page must also fit."""
    rule, run, ticket = _seed()
    for size, tag in ((LAPTOP, ""), (PHONE, "-phone")):
        browser = make_browser(size, lang=lang, dark=dark)
        login(browser, live_server, "omar")
        for name, url in _pages(rule, run, ticket).items():
            if (tag and name not in ("run", "ticket")) or name == "rules":
                continue
            browser.get(live_server.url + url)
            assert overflow(browser)[0] <= overflow(browser)[1], (name, size, lang)
            shot(browser, f"desk-{name}{suffix}{tag}")
