"""One home per sentence: the pure layer says Reasons (codes and parameters); tasks/sentences.py
words every one of them, in English and in zh-Hans; explain looks back as far in the admin, the
API and the CLI."""

import importlib
import json
import pkgutil
import re
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse
from django.utils import translation

import tasks.rules
from tasks import sentences
from tasks.models import TriggerRule
from tasks.rules import explain
from tasks.rules.reasons import CODES, Reason
from tests.support.api import api_for

PLACEHOLDER = re.compile(r"%\((\w+)\)")


def _all_codes() -> set[str]:
    # Every module of the pure layer, so a code declared anywhere in it is counted.
    for module in pkgutil.iter_modules(tasks.rules.__path__):
        importlib.import_module(f"tasks.rules.{module.name}")
    return set(CODES)


class _Any(dict):
    def __missing__(self, key):
        return f"<{key}>"


def test_every_reason_code_has_one_sentence_and_no_sentence_lacks_a_code():
    codes = _all_codes()
    assert len(codes) > 90
    assert sorted(codes - set(sentences.CATALOGUE)) == []
    assert sorted(set(sentences.CATALOGUE) - codes) == []


@pytest.mark.parametrize("code", sorted(_all_codes()))
def test_every_sentence_is_in_english_and_in_chinese_with_the_same_parameters(code):
    with translation.override("en"):
        english = str(sentences.CATALOGUE[code])
    with translation.override("zh-hans"):
        chinese = str(sentences.CATALOGUE[code])
    # A sentence that is only its parameter (a message the data carries) reads the same in both.
    if not PLACEHOLDER.fullmatch(english.removesuffix("s")):
        assert chinese != english, f"no zh-Hans translation for {code}: {english!r}"
    assert sorted(PLACEHOLDER.findall(chinese)) == sorted(PLACEHOLDER.findall(english)), code
    assert english % _Any() and chinese % _Any()  # every placeholder fills


def test_a_code_without_a_sentence_fails_loudly():
    with pytest.raises(KeyError):
        sentences.say(Reason.of("lint.no_such_code"))


# --- explain looks back NEAREST_LOOKBACK everywhere ------------------------------------------

MONDAY_0900 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)  # 09:00 Berlin
SATURDAY_NOON = datetime(2026, 12, 5, 11, 0, tzinfo=UTC)  # five days later: not a slot


@pytest.mark.django_db
def test_explain_names_the_same_nearest_slots_in_the_admin_the_api_and_the_cli(client):
    assert explain.NEAREST_LOOKBACK.days == 7
    rule = TriggerRule(
        name="weekly",
        reason="t",
        kind="cron",
        cron="0 9 * * 1",
        timezone="Europe/Berlin",
        skill="harness.noop",
        dedupe_key_template="{rule}:{slot}",
    )
    rule.full_clean()
    rule.save()
    asked = SATURDAY_NOON.isoformat()

    out = StringIO()
    call_command("harness", "explain", "weekly", asked, "--json", stdout=out)
    cli = json.loads(out.getvalue())

    user = get_user_model().objects.create_superuser("op", "op@example.com", "pw-op-123456")
    api = api_for(user).get("/api/v1/rules/weekly/explain", slot=asked).json()

    client.force_login(user)
    page = client.get(reverse("admin:tasks_triggerrule_explain", args=[rule.pk]), {"slot": asked})
    html = page.content.decode()

    # Five days back: a two-day look-back found no slot before a weekly rule's Saturday.
    assert cli["outcome"] == api["outcome"] == "not_a_slot"
    assert cli["details"]["nearest_before"] == api["details"]["nearest_before"] == MONDAY_0900.isoformat()
    assert cli["details"]["nearest_after"] == api["details"]["nearest_after"]
    assert cli["summary"] == api["summary"] and "nearest before" in cli["summary"]
    link = "?slot=" + MONDAY_0900.isoformat().replace("+", "%2B")
    assert page.status_code == 200 and link in html


@pytest.mark.django_db
def test_a_slot_that_is_not_a_date_time_is_refused_in_the_browsers_language(client):
    rule = TriggerRule.objects.create(
        name="daily", reason="t", cron="0 9 * * *", timezone="Europe/Berlin", skill="harness.noop"
    )
    client.force_login(get_user_model().objects.create_superuser("op", "op@example.com", "pw-op-123456"))
    url = reverse("admin:tasks_triggerrule_explain", args=[rule.pk])
    chinese = client.get(url, {"slot": "tomorrow-ish"}, headers={"accept_language": "zh-hans"}).content.decode()
    english = client.get(url, {"slot": "tomorrow-ish"}, headers={"accept_language": "en"}).content.decode()
    assert "不是日期时间" in chinese and "not a date-time" not in chinese
    assert "not a date-time" in english


@pytest.mark.parametrize(
    ("cron", "zh"),
    [
        ("0 9 * * 1-5", "在 09:00, 周一 到 周五"),
        ("0 9 1 JAN *", "在 09:00, 每月的 1 号, 仅在 1 月"),
        ("0 9 * * 1,3", "在 09:00, 仅在 周一 和 周三"),
    ],
)
def test_a_cron_schedule_in_chinese_names_weekdays_and_months_in_chinese(cron, zh):
    with translation.override("zh-hans"):
        assert sentences.cron_description(cron) == zh
    assert sentences.cron_description("0 9 * * 1-5") == "At 09:00, Monday through Friday"  # English stays English
