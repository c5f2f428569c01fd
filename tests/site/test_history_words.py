"""The rule's History page in zh-Hans: a choice reads by its label (not `wall`), a pause's reason by
its words (not a `paused:` prefix), nothing as True / False / None; checked with the completeness
checker without excusing the stored values."""

from datetime import time

import pytest
from django.urls import reverse
from django.utils import timezone

from tasks.triggers.operator import rule_pause
from tests.support.desk import client_for, make_user
from tests.support.rules import make_rule
from tests.support.zh_complete import KEEP, _Text, english_words

pytestmark = pytest.mark.django_db


def test_the_history_reads_choices_and_pauses_in_chinese():
    rule = make_rule("daily-report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", reason="运营需要")
    rule.objective, rule.objective_time = "wall", time(9, 30)
    rule._change_reason = "加新鲜度目标"
    rule.save(now=timezone.now())
    rule_pause(rule=rule, actor="olga", now=timezone.now(), reason="上游维护")
    page = client_for(make_user("olga", "Operators")).get(
        reverse("admin:tasks_triggerrule_history", args=[rule.pk]), HTTP_ACCEPT_LANGUAGE="zh-Hans"
    )
    parser = _Text()
    parser.feed(page.content.decode())
    text = " ".join(parser.chunks)
    assert "已暂停: 上游维护" in text and "paused:" not in text
    assert " wall " not in f" {text} " and "09:30:00" in text
    # Only the names the operator chose are data here; a stored code such as `wall` is not excused.
    assert english_words(text, KEEP | {"olga", "daily-report", "daily", "report"}) == [], text
