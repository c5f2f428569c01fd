"""zh-Hans is complete: every admin page, rendered for a browser that asks for
Simplified Chinese, shows no English UI string. Data values (names, keys, skills, errors the data
carries) are excepted: every string stored in the database is allowed, and so are identifiers
(anything with _ . / : = { } or a digit) and the technical words of docs/glossary.md's keep list."""

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib import admin
from django.urls import NoReverseMatch, reverse
from django.utils import translation

from deadletters.models import DeadLetter
from runs.models import Attempt, Decision, Incident, Lease, SchedulerTick, SlotHold, TaskRun
from tasks.models import BusinessCalendar, CalendarOverride, DiagnosticRecord, ReadinessFlag
from tests.support.desk import daily_report, make_failed_run
from tests.support.zh_complete import KEEP, data_words, english_in

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
# Our apps' admin pages. django-celery-beat's, django-axes' and auth's pages speak through those
# packages' own catalogues (some of theirs are untranslated upstream); the header we add to them is
# checked on every page of ours.
OURS = {"tasks", "runs", "deadletters", "audit"}


@pytest.fixture
def everything():
    """One row of every admin page's model, in Chinese-named data where a name is ours to choose."""
    rule = daily_report(
        name="日报", reason="运营需要", timezone="Asia/Shanghai", clean=False
    )  # a name no form would take
    run = make_failed_run("rule/1/日报:2026-03-01", now=NOW, rule=rule)
    Decision.objects.create(
        rule=rule, slot=NOW - timedelta(days=1), reason=Decision.Reason.MISSED, details={}, created_at=NOW
    )
    SlotHold.objects.create(
        rule=rule, slot=NOW, reason="not_ready", recheck_at=NOW, deadline=NOW + timedelta(hours=1), created_at=NOW
    )
    Lease.objects.create(key="object:发票-42", owner="工人-a", token=7, acquired_at=NOW, expires_at=NOW)
    SchedulerTick.objects.create(name="scheduler", last_tick_at=NOW, last_claimed=3, last_dedupe_hits=1)
    Incident.objects.create(
        kind="scheduler",
        subject="scheduler",
        started_at=NOW - timedelta(days=1, minutes=3),
        detected_at=NOW,
        ended_at=NOW - timedelta(days=1) + timedelta(minutes=1),
        summary={"missed": 1},
    )
    DiagnosticRecord.objects.create(
        run_id=run.id,
        biz_key=run.biz_key,
        rule_name="日报",
        slot=NOW,
        fence=1,
        attempt=1,
        worker="工人",
        created_at=NOW,
    )
    ReadinessFlag.objects.create(name="数据.就绪", scope="2026-03-01", set_at=NOW, set_by="运维")
    TaskRun.objects.create(
        biz_key="rule/1/日报:running",
        rule=rule,
        rule_name="日报",
        skill="harness.noop",
        source="scheduler",
        trigger_at=NOW,
        run_after=NOW,
        state="running",
        lease_owner="工人",
        lease_expires_at=NOW + timedelta(hours=1),
        fence=1,
        attempts=1,
    )
    Attempt.objects.filter(run=run).update(worker="工人")
    china = BusinessCalendar.objects.create(name="中国大陆", country="CN", description="节假日与调休")
    CalendarOverride.objects.create(calendar=china, date=NOW.date(), kind="closed", reason="年末停工")
    return rule, run


def admin_pages(rule, run) -> dict[str, str]:
    """Every page a model admin has (list, add, change of its first row), plus the desk's own."""
    pages = {}
    for model in admin.site._registry:
        info = (model._meta.app_label, model._meta.model_name)
        if info[0] not in OURS:
            continue
        pages[f"{info[0]}.{info[1]} list"] = reverse(f"admin:{info[0]}_{info[1]}_changelist")
        try:
            pages[f"{info[0]}.{info[1]} add"] = reverse(f"admin:{info[0]}_{info[1]}_add")
        except NoReverseMatch:
            pass
        first = model._default_manager.order_by("pk").first()
        if first is not None:
            pages[f"{info[0]}.{info[1]} change"] = reverse(f"admin:{info[0]}_{info[1]}_change", args=[first.pk])
    ticket = DeadLetter.objects.get(run=run)
    pages.update(
        {
            "index": reverse("admin:index"),
            "dashboard": reverse("harness-dashboard"),
            "flow": reverse("harness-flow"),
            "rule explain": reverse("admin:tasks_triggerrule_explain", args=[rule.pk]) + "?slot=2026-03-01T09:00",
            "rule run now": reverse("admin:tasks_triggerrule_run_now", args=[rule.pk]),
            "rule trial": reverse("admin:tasks_triggerrule_trial", args=[rule.pk]),
            "rule pause": reverse("admin:tasks_triggerrule_pause", args=[rule.pk]),
            "rule backfill": reverse("admin:tasks_triggerrule_backfill", args=[rule.pk]),
            "rule history": reverse("admin:tasks_triggerrule_history", args=[rule.pk]),
            "run retry": reverse("admin:runs_taskrun_retry", args=[run.pk]),
            "ticket replay": reverse("admin:deadletters_deadletter_replay", args=[ticket.pk]),
            "ticket close": reverse("admin:deadletters_deadletter_close", args=[ticket.pk]),
            "ticket assign": reverse("admin:deadletters_deadletter_assign", args=[ticket.pk]),
        }
    )
    return pages


def test_every_admin_page_is_in_chinese(admin_client, everything):
    rule, run = everything
    allowed = KEEP | data_words()
    problems = {}
    try:
        for name, url in admin_pages(rule, run).items():
            response = admin_client.get(url, headers={"accept-language": "zh-hans"})
            if (name.endswith(" add") and response.status_code == 403) or response.status_code == 302:
                continue  # no add page (records written by services), or a page that sends to another
            assert response.status_code == 200, (name, url, response.status_code)
            english = english_in(response.content.decode(), allowed)
            if english:
                problems[name] = english
    finally:
        translation.activate("en-us")
    report = "\n".join(f"{page}:\n  " + "\n  ".join(lines) for page, lines in sorted(problems.items()))
    assert not problems, f"English on {len(problems)} zh-Hans page(s):\n{report}"


def test_the_check_finds_english(admin_client):
    """The detector itself: an English UI string is found, data and identifiers are not."""
    assert english_in("<p>Save and continue editing</p>", KEEP)
    assert not english_in("<p>保存 <code>Save</code> report:2026 harness.noop 日报</p>", KEEP)
    assert not english_in("<p>下次 2026-03-01 09:00:00 CST (01:00:00 UTC)</p>", KEEP)
