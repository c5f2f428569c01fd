# ruff: noqa: F811, RUF001  (the browser fixture imported and used as an argument; Chinese punctuation)
"""The 3 a.m. desk tells the truth, seen in headless Chromium in English and zh-Hans, on a laptop
(1440 px) and a phone (390 px): a ticket whose replay failed says so and links the new ticket, the run
page's execution time leaves out the wait for people, explain after an outage names the scheduler's
downtime, the catch-up policy and the pause. Every page visited is also checked by the shared browser
(tests/support/desk.py): no sideways scrolling at 390 px, no English on a zh-Hans page."""

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from selenium.webdriver.common.by import By

from deadletters.models import DeadLetter
from runs.models import SchedulerTick
from tasks.triggers.operator import rule_pause
from tasks.triggers.scheduler import scheduler_tick
from tests.support.browser import BROWSER_MARKS, LAPTOP, PHONE, login, make_browser, shot  # noqa: F401 - make_browser: a fixture
from tests.support.desk import daily_report, make_failed_replay, make_failed_run, make_user, page_problems
from tests.support.rules import make_rule

FAILED_AT = datetime(2026, 11, 27, 1, 0, 5, tzinfo=UTC)
SLOT = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)  # 09:00 in Shanghai

pytestmark = BROWSER_MARKS


def _seed():
    """A ticket whose replay failed two hours later, and a rule whose 09:00 slot the scheduler reached
    112 s late (down until then) under catch-up none, paused since."""
    user = make_user("omar", "On-call")
    user.groups.add(*make_user("olga", "Operators").groups.all())
    rule = daily_report(name="daily-report", timezone="Asia/Shanghai", dedupe_key_template="report:{business_date}")
    run = make_failed_run(f"rule/{rule.pk}/report:2026-11-27", now=FAILED_AT, rule=rule)
    first = DeadLetter.objects.get(run=run)
    second = make_failed_replay(run, actor=user, replayed_at=FAILED_AT + timedelta(hours=2))
    nightly = make_rule(
        "nightly", cron="0 9 * * *", timezone="Asia/Shanghai", catchup="none", catchup_max_delay_seconds=300, due=SLOT
    )
    scheduler_tick(now=SLOT + timedelta(seconds=112))
    rule_pause(rule=nightly, actor=user, now=SLOT + timedelta(minutes=5), reason="upstream outage")
    SchedulerTick.objects.update_or_create(name="scheduler", defaults={"last_tick_at": timezone.now()})
    explain = (
        reverse("admin:tasks_triggerrule_explain", args=[nightly.pk]) + "?slot=" + SLOT.isoformat().replace("+", "%2B")
    )
    return run, first, second, explain


WORDS = {
    "en-US": {
        "failed": "Replayed: failed again",
        "ticket": "ticket #",
        "down": "no scheduler tick reached",
        "off": "catch-up is off",
        "pause": "paused since",
        "people": "waiting for people",
    },
    "zh-CN": {
        "failed": "已重放：再次失败",
        "ticket": "工单 #",
        "down": "调度器直到该时间槽过后 112 秒",
        "off": "此规则未开启补跑",
        "pause": "起已暂停",
        "people": "在等人处理",
    },
}


@pytest.mark.parametrize("lang", ["en-US", "zh-CN"], ids=["en", "zh"])
def test_a_failed_replay_the_run_time_and_explain_after_an_outage_tell_the_truth(make_browser, live_server, lang):
    run, first, second, explain = _seed()
    words = WORDS[lang]
    suffix = "" if lang == "en-US" else "-zh"
    for size, tag in ((LAPTOP, ""), (PHONE, "-phone")):
        browser = make_browser(size, lang=lang)
        login(browser, live_server, "omar")
        browser.get(live_server.url + reverse("admin:deadletters_deadletter_changelist"))
        assert words["failed"] in browser.find_element(By.ID, "result_list").text
        shot(browser, f"truth-desk{suffix}{tag}")
        if size == PHONE:
            # Sorted by two columns, the cards' labels are the columns' names, not "2 ID".
            browser.get(live_server.url + reverse("admin:deadletters_deadletter_changelist") + "?o=-1.3")
            labels = browser.execute_script(
                "return Array.from(document.querySelectorAll('#result_list [data-label]')).map(e => e.dataset.label)"
            )
            assert labels and not [label for label in labels if label[:1].isdigit()], labels
        browser.get(live_server.url + reverse("admin:deadletters_deadletter_change", args=[first.pk]))
        assert browser.find_element(By.ID, "ticket-state").text == words["failed"]
        link = browser.find_element(By.CSS_SELECTOR, "#ticket-replay-failed a")
        assert link.get_attribute("href").endswith(f"/deadletter/{second.pk}/change/")
        assert f"{words['ticket']}{second.pk}" in link.text
        shot(browser, f"truth-replay-failed{suffix}{tag}")
        browser.get(live_server.url + reverse("admin:runs_taskrun_change", args=[run.pk]))
        execution = browser.find_element(By.ID, "run-execution").text
        assert "3.000s" in execution and words["people"] in execution, execution
        browser.get(live_server.url + explain)
        said = browser.find_element(By.ID, "content").text
        for key in ("down", "off", "pause"):
            assert words[key] in said, (key, said)
        # Recent decisions stack into cards on a phone: the reason is a line, not a column a character wide.
        reason = "return document.querySelector('#explain-recent tbody td:nth-child(2)').getBoundingClientRect().width"
        assert size == LAPTOP or browser.execute_script(reason) > size[0] / 2
        shot(browser, f"truth-explain{suffix}{tag}")
        browser.get(live_server.url + reverse("harness-dashboard"))
        browser.get(live_server.url + reverse("harness-flow"))
    if lang == "zh-CN":
        # The shared check finds a planted English sentence on a zh-Hans page.
        browser.execute_script("document.body.insertAdjacentText('beforeend', 'run 75 failed for good')")
        assert any("English on a zh-Hans page" in p for p in page_problems(browser))
        browser.execute_script("document.body.insertAdjacentHTML('beforeend', '<div style=\"width:900px\">wide</div>')")
        assert any("px wide at 390 px" in p for p in page_problems(browser))
