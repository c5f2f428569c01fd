# ruff: noqa: F811  (pytest fixtures imported from tests.support.desk are redefined as arguments)
"""The system banner: what is wrong with the harness itself, on every desk page, from the same
figures as /healthz (runs/desk/harness_health.py)."""

from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone, translation

from deadletters.models import AlertChannel
from harness_site.release import code_migrations
from runs.desk.harness_health import banner_facts, calendar_sentence, queues_without_worker
from runs.models import SchedulerTick, WorkerHeartbeat
from tasks.models import BusinessCalendar
from tests.support.desk import oncall, oncall_client  # noqa: F401
from tests.support.rules import make_rule

NOW = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)
ALL_QUEUES = ",".join(settings.CELERY_TASK_QUEUES)


def figures(**over) -> dict:
    """The figures of a well harness, with `over` changed."""
    base = {
        "code": "ok",
        "last_tick_at": NOW,
        "oldest_unclaimed_slot_age_seconds": None,
        "oldest_unclaimed_slot_rule": None,
        "queues_without_worker": [],
        "workers_older_than_schema": [],
        "alerts_log_only": False,
        "calendars_without_data": [],
    }
    return {**base, **over}


def worker_row(status: str, queues: str, *, stopping: bool = False) -> dict:
    return {"status": status, "queue_list": queues.split(","), "stopping": stopping}


# --- pure: figures in, facts out --------------------------------------------------------------------


def test_a_well_harness_has_no_fact():
    assert banner_facts(figures(), now=NOW) == []


@pytest.mark.parametrize(
    ("over", "code"),
    [
        ({"code": "scheduler_stalled", "last_tick_at": NOW - timedelta(minutes=3)}, "scheduler_stalled"),
        ({"code": "scheduler_stalled", "last_tick_at": None}, "scheduler_stalled"),
        (
            {"code": "slot_overdue", "oldest_unclaimed_slot_age_seconds": 95.0, "oldest_unclaimed_slot_rule": "r"},
            "slot_overdue",
        ),
        ({"queues_without_worker": ["agents"]}, "queue_without_worker"),
        (
            {"workers_older_than_schema": [{"name": "w1@h:7", "release": "runs.0019_x", "schema": "runs.0020_y"}]},
            "worker_older_than_schema",
        ),
        ({"alerts_log_only": True}, "alerts_log_only"),
    ],
)
def test_each_fact_is_one_sentence_with_a_link(over, code):
    (fact,) = banner_facts(figures(**over), now=NOW)
    assert fact.code == code
    assert fact.sentence.endswith(".") and fact.url and fact.link


def test_a_stalled_scheduler_says_for_how_long_in_both_languages():
    stalled = figures(code="scheduler_stalled", last_tick_at=NOW - timedelta(minutes=3))
    assert "3\xa0minutes" in banner_facts(stalled, now=NOW)[0].sentence
    young = figures(code="scheduler_stalled", last_tick_at=NOW - timedelta(seconds=45))
    assert "45 seconds" in banner_facts(young, now=NOW)[0].sentence
    with translation.override("zh-hans"):
        sentence = banner_facts(stalled, now=NOW)[0].sentence
    assert "调度器" in sentence and "3\xa0分钟" in sentence


def test_a_queue_lacks_a_worker_unless_a_consuming_worker_reads_it():
    queues = list(settings.CELERY_TASK_QUEUES)
    assert queues_without_worker([]) == sorted(queues)
    assert queues_without_worker([worker_row("ok", ALL_QUEUES)]) == []
    assert queues_without_worker([worker_row("restarted", ALL_QUEUES)]) == []
    for stuck in ("not consuming", "not responding"):
        assert queues_without_worker([worker_row(stuck, ALL_QUEUES)]) == sorted(queues)
    assert queues_without_worker([worker_row("ok", ALL_QUEUES, stopping=True)]) == sorted(queues)
    assert queues_without_worker([worker_row("ok", "celery,harness_control")]) == ["agents"]


# --- the banner on the desk --------------------------------------------------------------------------


def well(now: datetime) -> None:
    """A harness with nothing wrong: a fresh tick, a worker on every queue, a channel that delivers."""
    SchedulerTick.objects.update_or_create(name="scheduler", defaults={"last_tick_at": now})
    WorkerHeartbeat.objects.create(
        name="w@h:1",
        hostname="w@h",
        pid=1,
        queues=ALL_QUEUES,
        started_at=now,
        beat_at=now,
        progress_at=now,
        migrations=code_migrations(),  # this release's worker
    )
    AlertChannel.objects.create(name="log", kind="log", min_severity="notice")


def banner(client, lang: str = "en") -> str:
    return client.get(reverse("harness-system-banner"), HTTP_ACCEPT_LANGUAGE=lang).content.decode()


@pytest.mark.django_db
def test_every_desk_page_loads_the_banner_and_it_is_empty_when_all_is_well(oncall_client):
    well(timezone.now())
    for url in (reverse("harness-status"), reverse("admin:runs_taskrun_changelist"), reverse("harness-dashboard")):
        page = oncall_client.get(url).content.decode()
        assert f'hx-get="{reverse("harness-system-banner")}"' in page, url
    html = banner(oncall_client)
    assert 'id="system-banner"' in html and 'system-banner"' not in html.split('id="system-banner"')[1]
    assert "data-code" not in html


@pytest.mark.django_db
def test_the_banner_names_a_stalled_scheduler_in_both_languages_and_is_gone_when_it_ticks(oncall_client):
    now = timezone.now()
    well(now)
    SchedulerTick.objects.filter(name="scheduler").update(last_tick_at=now - timedelta(minutes=5))
    html = banner(oncall_client)
    assert 'data-code="scheduler_stalled"' in html and "The scheduler has not ticked for" in html
    assert f'href="{reverse("harness-dashboard")}#dash-scheduler"' in html
    assert "调度器" in banner(oncall_client, "zh-hans")
    status = oncall_client.get(reverse("harness-status")).content.decode()
    assert 'id="status-harness"' in status and "1 problem" in status
    # /healthz says the same, from the same figures.
    assert oncall_client.get("/healthz").json()["reason"] == "scheduler_stalled"
    SchedulerTick.objects.filter(name="scheduler").update(last_tick_at=timezone.now())
    assert "data-code" not in banner(oncall_client)


@pytest.mark.django_db
def test_the_banner_and_healthz_name_a_queue_without_worker_and_alerts_only_in_the_log(oncall_client):
    now = timezone.now()
    SchedulerTick.objects.create(name="scheduler", last_tick_at=now)
    WorkerHeartbeat.objects.create(
        name="w@h:1",
        hostname="w@h",
        pid=1,
        queues="celery,harness_control",
        started_at=now,
        beat_at=now,
        progress_at=now,
    )
    html = banner(oncall_client)
    assert 'data-code="queue_without_worker"' in html and "agents" in html
    assert 'data-code="alerts_log_only"' in html
    health = oncall_client.get("/healthz").json()
    assert health["queues_without_worker"] == ["agents"] and health["alerts_log_only"] is True


@pytest.mark.django_db
def test_the_banner_names_a_calendar_about_to_run_out_with_a_link_to_it(oncall_client):
    well(timezone.now())
    cal = BusinessCalendar.objects.create(name="cn", country="CN")
    make_rule("cn-report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", business_calendar=cal)
    gaps = oncall_client.get("/healthz").json()["calendars_without_data"]
    html = banner(oncall_client)
    if not gaps:  # the installed library already knows the coming weeks: nothing to say
        assert "data-code" not in html
        return
    assert 'data-code="calendar_without_data"' in html
    assert reverse("admin:tasks_businesscalendar_change", args=[cal.id]) in html


@pytest.mark.parametrize(
    ("uncertain", "words", "zh"),
    [
        (None, "it knows no holiday and its rules run on every weekday", "不知道任何节假日"),
        ("hold", "skip the holidays the law fixes, and on the days the notice may move its rules' runs wait", "审批"),
        ("skip", "on the days the notice may move its rules do not run", "不运行"),
        ("run", "on the days the notice may move its rules run as on an ordinary day", "照常运行"),
    ],
)
def test_the_banner_says_what_a_calendar_without_data_does_to_its_rules(uncertain, words, zh):
    # Rules keep running past a calendar's data: by weekday, or (mainland China) by the law's
    # holidays and the calendar's policy for the days a notice would move.
    gap = {"calendar": "cn", "no_data_from": "2027-01-01", "days_left": 27, "uncertain_days": uncertain}
    said = calendar_sentence(gap)
    assert "cn" in said and "2027-01-01" in said and words in said and "will not run" not in said
    with translation.override("zh-hans"):
        assert zh in calendar_sentence(gap)


@pytest.mark.django_db
def test_the_banner_is_a_fixed_number_of_queries_whatever_the_calendars_and_workers(oncall_client):
    now = timezone.now()
    well(now)
    cal = BusinessCalendar.objects.create(name="cal", country="CN")
    make_rule("r", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", business_calendar=cal)
    banner(oncall_client)  # warm: session, permissions

    def statements() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert oncall_client.get(reverse("harness-system-banner")).status_code == 200
        return len(queries)

    few = statements()
    for i in range(10):
        cal = BusinessCalendar.objects.create(name=f"cal-{i}", country="CN")
        make_rule(f"r-{i}", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", business_calendar=cal)
        WorkerHeartbeat.objects.create(
            name=f"w{i}@h:1", hostname=f"w{i}@h", pid=1, queues="celery", started_at=now, beat_at=now, progress_at=now
        )
    assert statements() == few
    assert few <= 15  # 12, the calendars' notices, the schema's and the workers' migrations (older workers)


@pytest.mark.django_db
def test_the_banner_asks_for_a_login(client):
    response = client.get(reverse("harness-system-banner"))
    assert response.status_code == 302 and "/login/" in response["Location"]
