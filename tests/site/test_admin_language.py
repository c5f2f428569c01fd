"""The admin in English and Simplified Chinese: chosen by the browser (Accept-Language, through
LocaleMiddleware) or by the LANGUAGE_CODE setting; Django's own admin strings and ours both switch."""
# ruff: noqa: RUF001  (Chinese text uses full-width punctuation)

import json
import re
from datetime import UTC, datetime

import pytest
from django.urls import reverse
from django.utils import translation

from tasks.models import TriggerRule
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# Django's own admin strings and ours, as each language shows them on the index.
INDEX_EN = (
    "Recent actions",
    "Change password",
    "Operations",
    "Trigger rules",
    "Dead letters",
    "Alert channels",
    "Live run leases",
)
INDEX_ZH = ("最近动作", "修改密码", "运维", "触发规则", "死信", "告警通道", "告警发件箱", "活动运行租约", "调度器心跳")
# The rule page: Django's buttons and ours (fieldsets, help texts).
RULE_EN = ("Save and continue editing", "Unique name; appears in business keys.", "Windows and calendar")
RULE_ZH = (
    "保存并继续编辑",
    "修改 触发规则",
    "唯一名称；会出现在业务键中。",
    "补跑",
    "时间窗与日历",
    "解读调度所用的 IANA 时区",
)


@pytest.fixture(autouse=True)
def _reset_language():
    yield
    translation.activate("en-us")


@pytest.fixture
def rule() -> TriggerRule:
    return make_rule(
        "daily-report",
        kind=TriggerRule.Kind.CRON,
        cron="0 9 * * *",
        timezone="Asia/Shanghai",
        dedupe_key_template="{rule}:{business_date}",
    )


def page(client, url: str, **headers) -> str:
    response = client.get(url, headers=headers)
    assert response.status_code == 200
    return response.content.decode()


def assert_all(html: str, strings) -> None:
    missing = [s for s in strings if s not in html]
    assert not missing, missing


def assert_none(html: str, strings) -> None:
    present = [s for s in strings if s in html]
    assert not present, present


def test_it_speaks_english_by_default(admin_client):
    html = page(admin_client, reverse("harness-apps"))
    assert_all(html, INDEX_EN)
    assert_none(html, INDEX_ZH)
    assert 'lang="en' in html


@pytest.mark.parametrize("accept", ["zh-hans", "zh-Hans,zh;q=0.9,en;q=0.8", "zh-CN,zh;q=0.9", "zh"])
def test_the_index_speaks_chinese_when_the_browser_asks(admin_client, accept):
    html = page(admin_client, reverse("harness-apps"), accept_language=accept)
    assert_all(html, INDEX_ZH)
    assert "Recent actions" not in html and "Alert channels" not in html
    assert 'lang="zh-hans"' in html


def test_the_rule_page_speaks_chinese_when_the_browser_asks(admin_client, rule):
    url = reverse("admin:tasks_triggerrule_change", args=[rule.pk])
    html = page(admin_client, url, accept_language="zh-hans")
    assert_all(html, RULE_ZH)
    assert_none(html, RULE_EN)


def test_the_rule_page_speaks_english_by_default(admin_client, rule):
    html = page(admin_client, reverse("admin:tasks_triggerrule_change", args=[rule.pk]))
    assert_all(html, RULE_EN)
    assert_none(html, RULE_ZH)


def test_a_language_we_do_not_have_falls_back_to_the_setting(admin_client, settings):
    html = page(admin_client, reverse("harness-apps"), accept_language="fr-FR,fr;q=0.9")
    assert_all(html, INDEX_EN)
    settings.LANGUAGE_CODE = "zh-hans"
    html = page(admin_client, reverse("harness-apps"), accept_language="fr-FR,fr;q=0.9")
    assert_all(html, INDEX_ZH)


def test_the_setting_chooses_the_language_when_the_browser_says_nothing(admin_client, settings):
    settings.LANGUAGE_CODE = "zh-hans"
    assert_all(page(admin_client, reverse("harness-apps")), INDEX_ZH)


def test_the_alert_channel_form_explains_bad_input_in_chinese(admin_client):
    response = admin_client.post(
        reverse("admin:deadletters_alertchannel_add"),
        {
            "name": "hook",
            "kind": "webhook",
            "url": "",
            "format": "slack",
            "recipients": "",
            "min_severity": "urgent",
            "enabled": "on",
        },
        headers={"accept_language": "zh-hans"},
    )
    assert response.status_code == 200
    assert "Webhook 通道必须填写地址。" in response.content.decode()


def test_the_committed_catalogue_is_complete_and_compiled():
    """Every entry of django.po is translated, and the committed django.mo says the same (CI has no gettext)."""
    import gettext
    from pathlib import Path

    from django.conf import settings

    folder = Path(settings.BASE_DIR, "harness_site", "locale", "zh_Hans", "LC_MESSAGES")
    entries = _po_entries((folder / "django.po").read_text())
    assert len(entries) > 100
    with (folder / "django.mo").open("rb") as mo:
        compiled = gettext.GNUTranslations(mo)
    for (context, msgid, plural), msgstr in entries.items():
        assert msgstr, f"untranslated: {msgid!r}"
        # A plural entry is looked up as Django does, by ngettext: plain gettext() of its msgid
        # finds it only on newer patch releases of Python 3.11 (3.11.7, not Debian's 3.11.2).
        if plural is None:
            found = compiled.pgettext(context, msgid) if context else compiled.gettext(msgid)
        else:
            found = compiled.npgettext(context, msgid, plural, 1) if context else compiled.ngettext(msgid, plural, 1)
        assert found == msgstr, f"django.mo is stale for {msgid!r}; run compilemessages"


def _po_entries(text: str) -> dict[tuple[str | None, str, str | None], str]:
    import ast

    entries, key, current = {}, None, {}
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if current.get("msgid"):
                # The same msgid may have contexts; a plural entry is found by its plural form too.
                entry = (current.get("msgctxt"), current["msgid"], current.get("msgid_plural"))
                entries[entry] = current.get("msgstr", current.get("msgstr[0]", ""))
            current, key = {}, None
        elif line.startswith(("msgctxt ", "msgid ", "msgid_plural ", "msgstr ", "msgstr[0] ")):
            key, _, literal = line.partition(" ")
            current[key] = ast.literal_eval(literal)
        elif line.startswith('"') and key:
            current[key] += ast.literal_eval(line)
    return entries


# --- the operator's desk pages -----------------------------------------------------------------
# Each page's own strings, as English shows them by default and Chinese under Accept-Language: zh-hans.
DASHBOARD_EN = ("Dedupe hits, last 24 h", "biz_keys with more than one run", "Next fires", "Open the desk")
DASHBOARD_ZH = ("仪表盘", "最近 24 小时的去重命中", "有多个运行的业务键", "后续触发时间", "打开死信工作台")
DESK_EN = ("Open backlog:", "By error kind", "By error fingerprint")
DESK_ZH = ("未处理积压：", "按规则", "按错误类型", "按错误指纹")
RUN_EN = ("Timeline", "queue delay", "Attempts", "Payload snapshot", "Retry now")
RUN_ZH = ("时间线", "排队延迟", "尝试", "载荷快照", "立即重试", "首次尝试在 w1@host:1")
CONFIRM_EN = ("Replay dead letter", "gets a new attempt (number 2)", "No, go back", "Recorded in the audit log.")
CONFIRM_ZH = ("重放死信", "将以原业务键获得一次新尝试（第 2 次）", "不，返回", "记录在审计日志中。")


@pytest.fixture
def failed_run():
    from tests.support.desk import make_failed_run

    return make_failed_run()


def _desk_pages(failed_run) -> dict[str, tuple[str, tuple, tuple]]:
    from deadletters.models import DeadLetter

    ticket = DeadLetter.objects.get(run=failed_run)
    return {
        "dashboard": (reverse("harness-dashboard"), DASHBOARD_EN, DASHBOARD_ZH),
        "dead-letter desk": (reverse("admin:deadletters_deadletter_changelist"), DESK_EN, DESK_ZH),
        "run page": (reverse("admin:runs_taskrun_change", args=[failed_run.pk]), RUN_EN, RUN_ZH),
        "confirmation": (reverse("admin:deadletters_deadletter_replay", args=[ticket.pk]), CONFIRM_EN, CONFIRM_ZH),
    }


@pytest.mark.parametrize("name", ["dashboard", "dead-letter desk", "run page", "confirmation"])
def test_the_desk_pages_speak_chinese_when_the_browser_asks(admin_client, failed_run, name):
    url, english, chinese = _desk_pages(failed_run)[name]
    html = page(admin_client, url, accept_language="zh-hans")
    assert_all(html, chinese)
    assert_none(html, english)


@pytest.mark.parametrize("name", ["dashboard", "dead-letter desk", "run page", "confirmation"])
def test_the_desk_pages_speak_english_by_default(admin_client, failed_run, name):
    url, english, chinese = _desk_pages(failed_run)[name]
    html = page(admin_client, url)
    assert_all(html, english)
    assert_none(html, chinese)


@pytest.mark.parametrize(
    ("changelist", "english", "chinese"),
    [
        (
            "admin:deadletters_deadletter_changelist",
            "Replay selected with their original business keys",
            "用原业务键重放所选死信",
        ),
        (
            "admin:runs_taskrun_changelist",
            "Retry selected runs now (waiting or failed)",
            "立即重试所选运行（等待中或失败的）",
        ),
    ],
)
def test_the_action_dropdown_speaks_the_browsers_language(admin_client, failed_run, changelist, english, chinese):
    zh = page(admin_client, reverse(changelist), accept_language="zh-hans")
    assert f">{chinese}</option>" in zh and english not in zh
    en = page(admin_client, reverse(changelist))
    assert f">{english}</option>" in en and chinese not in en


def test_a_desk_message_speaks_chinese(admin_client, failed_run):
    from deadletters.models import DeadLetter

    ticket = DeadLetter.objects.get(run=failed_run)
    response = admin_client.post(
        reverse("admin:deadletters_deadletter_replay", args=[ticket.pk]),
        {"reason": "upstream fixed"},
        headers={"accept_language": "zh-hans"},
        follow=True,
    )
    assert response.status_code == 200
    assert "已排队重放：" in response.content.decode()


def test_the_two_list_picker_speaks_chinese(admin_client):
    """The pools and groups picker's scripts ask for strings Django 5.2's zh_Hans catalogue lacks
    ("Choose %s by selecting them…"): the project's djangojs catalogue supplies them."""
    script = page(admin_client, reverse("admin:jsi18n"), accept_language="zh-hans")
    catalog = json.loads(re.search(r"const newcatalog = (\{.*?\});", script, re.S)[1])
    assert (
        catalog['Choose %s by selecting them and then select the "Choose" arrow button.']
        == "选中要加入的%s，再点“选择”箭头按钮。"
    )
    assert catalog["Choose all %s"] == "全选%s" and catalog["Remove all %s"] == "删除全部%s"
