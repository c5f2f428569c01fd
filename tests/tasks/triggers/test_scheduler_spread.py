"""Spread on saved rules: the tick starts a slot's run at slot + offset and keeps the slot's key,
label and business date; a pool's default applies; guards decide at the nominal slot; a spread
that does not fit the schedule is refused in both languages."""

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ValidationError
from django.utils import translation

from runs.models import Decision, TaskRun
from tasks.models import Pool
from tasks.rules import evaluation, spread
from tasks.triggers.scheduler import scheduler_tick
from tasks.triggers.work import rule_render_key, slot_values
from tests.support.rules import build_rule, make_rule

T0 = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)  # 09:00 in Shanghai


@pytest.mark.django_db
def test_the_tick_starts_the_run_at_slot_plus_offset_and_keeps_the_slot():
    plain = make_rule("plain", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", due=T0)
    spread_rule = make_rule(
        "report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", spread_seconds=300, due=T0
    )
    scheduler_tick(now=T0)
    run = TaskRun.objects.get(rule=spread_rule)
    expected = spread.offset("report", T0, timedelta(seconds=300), next_slot=T0 + timedelta(days=1))
    assert timedelta(0) < expected < timedelta(seconds=300)
    assert run.slot == T0
    assert run.run_after == T0 + expected
    assert run.biz_key == rule_render_key(spread_rule, T0)
    assert run.payload["slot_local"] == "2026-12-01T09:00:00+08:00"
    assert slot_values(spread_rule, T0)["business_date"] == "2026-12-01"
    assert run.payload["spread"] == {"seconds": 300, "pool": ""}
    assert run.dispatched_at is None, "not sent before its start: the sweeper sends it when due"
    assert TaskRun.objects.get(rule=plain).run_after == T0


@pytest.mark.django_db
def test_a_rule_without_its_own_spread_takes_its_pools_largest():
    Pool.objects.create(name="openai", reason="provider", spread_seconds=120)
    Pool.objects.create(name="reports", reason="team", spread_seconds=30)
    rule = make_rule("sync", kind="cron", cron="0 * * * *", due=T0)
    rule.pools.set(Pool.objects.filter(name__in=["openai", "reports"]))
    scheduler_tick(now=T0)
    run = TaskRun.objects.get(rule=rule)
    assert run.payload["spread"] == {"seconds": 120, "pool": "openai"}
    assert run.run_after == T0 + spread.offset("sync", T0, timedelta(seconds=120), next_slot=T0 + timedelta(hours=1))


@pytest.mark.django_db
def test_a_pools_spread_longer_than_the_rules_interval_never_reaches_the_next_slot():
    pool = Pool.objects.create(name="openai", reason="provider", spread_seconds=600)
    rule = make_rule("every-minute", kind="interval", interval_seconds=60, due=T0)
    rule.pools.add(pool)
    scheduler_tick(now=T0)
    assert T0 <= TaskRun.objects.get(rule=rule).run_after < T0 + timedelta(seconds=60)


def test_business_hours_are_decided_at_the_nominal_slot_and_the_opening_is_spread():
    guards = evaluation.Guards(timezone="UTC", hours_start=time(9), hours_end=time(17), outside_hours="defer")
    slot = datetime(2026, 12, 1, 8, 59, tzinfo=UTC)  # before opening: deferred to 09:00, then spread
    verdict = evaluation.evaluate_slot(guards, slot, now=slot, facts=evaluation.Facts(), spread=timedelta(seconds=90))
    assert verdict.action == evaluation.RUN
    assert verdict.details["deferred_to"] == "2026-12-01T09:00:00+00:00"
    assert verdict.run_after == datetime(2026, 12, 1, 9, 1, 30, tzinfo=UTC)
    # A slot at 16:59 is inside the hours: it runs, even though its start (17:00:29) is after them.
    late = datetime(2026, 12, 1, 16, 59, tzinfo=UTC)
    verdict = evaluation.evaluate_slot(guards, late, now=late, facts=evaluation.Facts(), spread=timedelta(seconds=89))
    assert verdict.action == evaluation.RUN and verdict.run_after == late + timedelta(seconds=89)


def test_the_start_never_passes_the_start_window():
    guards = evaluation.Guards(timezone="UTC", start_window=timedelta(seconds=60))
    verdict = evaluation.evaluate_slot(guards, T0, now=T0, facts=evaluation.Facts(), spread=timedelta(seconds=500))
    assert verdict.run_after == T0 + timedelta(seconds=60)
    # A late tick inside the window: the start is now, or the spread start if that is later.
    now = T0 + timedelta(seconds=10)
    verdict = evaluation.evaluate_slot(guards, T0, now=now, facts=evaluation.Facts(), spread=timedelta(seconds=5))
    assert verdict.run_after == now


@pytest.mark.django_db
def test_a_skipped_slot_is_still_one_decision_at_its_nominal_instant():
    rule = make_rule("weekdays", kind="cron", cron="0 9 * * *", weekdays="mon", spread_seconds=300, due=T0)  # Tue
    scheduler_tick(now=T0)
    assert list(Decision.objects.filter(rule=rule).values_list("slot", flat=True)) == [T0]
    assert not TaskRun.objects.filter(rule=rule).exists()


@pytest.mark.parametrize(
    ("fields", "english", "chinese"),
    [
        (
            {"kind": "interval", "interval_seconds": 60, "spread_seconds": 60},
            "A spread of 60 s must be shorter than the interval (60 s), so a start never reaches the next slot.",
            "分散时长 60 秒必须短于间隔（60 秒），这样启动时间才不会落入下一个时间槽。",  # noqa: RUF001
        ),
        (
            {"kind": "cron", "cron": "*/5 * * * *", "spread_seconds": 300},
            "must be shorter than the schedule's shortest gap between two slots (300 s",
            "必须短于调度中两个时间槽之间的最短间隔（300 秒",  # noqa: RUF001
        ),
        (
            {"kind": "cron", "cron": "0 9 * * *", "spread_seconds": 300, "start_window_seconds": 120},
            "A spread of 300 s must be shorter than the start window (120 s), or late starts would be cancelled.",
            "分散时长 300 秒必须短于启动窗口（120 秒），否则晚启动的运行会被取消。",  # noqa: RUF001
        ),
    ],
)
@pytest.mark.django_db
def test_a_spread_that_does_not_fit_is_refused_with_a_sentence(fields, english, chinese):
    for language, words in (("en", english), ("zh-hans", chinese)):
        with translation.override(language), pytest.raises(ValidationError) as refused:
            build_rule("r", **fields).full_clean()
        assert words in " ".join(refused.value.message_dict["spread_seconds"])


@pytest.mark.django_db
def test_a_spread_that_fits_is_accepted():
    build_rule("r", kind="cron", cron="0 9 * * *", spread_seconds=3600, start_window_seconds=7200).full_clean()


def scrape(now: datetime) -> dict[str, float]:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from runs.desk.metrics import metrics_registry

    text = generate_latest(metrics_registry(clock=lambda: now)).decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


@pytest.mark.django_db
def test_metrics_show_the_busiest_second_of_planned_starts_with_and_without_spread():
    for i in range(30):
        make_rule(f"clustered-{i}", kind="cron", cron="0 9 * * *", due=T0 + timedelta(minutes=1))
        make_rule(f"spread-{i}", kind="cron", cron="0 9 * * *", spread_seconds=60, due=T0)
    scheduler_tick(now=T0)  # the spread rules' runs: 30 over the minute ahead
    spread_peak = scrape(T0)["harness_planned_starts_peak_per_second"]
    assert 1 <= spread_peak <= 6
    # The clustered rules' 30 runs, all planned for one second (a catch-up-free tick just before their slot).
    TaskRun.objects.filter(rule__name__startswith="spread-").delete()
    TaskRun.objects.filter(rule__name__startswith="clustered-").delete()
    scheduler_tick(now=T0 + timedelta(minutes=1))
    planned = scrape(T0)["harness_planned_starts_peak_per_second"]
    assert planned == 30
    TaskRun.objects.update(start_at=T0 + timedelta(minutes=1, milliseconds=300))
    assert scrape(T0 + timedelta(minutes=2))["harness_run_starts_peak_per_second"] == 30


@pytest.mark.django_db
def test_explain_says_when_the_slot_was_due_and_when_its_run_started():
    from tasks.triggers.explain import slot_explain

    rule = make_rule("report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", spread_seconds=300, due=T0)
    scheduler_tick(now=T0)
    run = TaskRun.objects.get(rule=rule)
    with translation.override("en"):
        pending = slot_explain(rule=rule, slot=T0, now=T0)["summary"]
        started = run.run_after + timedelta(milliseconds=200)
        TaskRun.objects.filter(pk=run.pk).update(start_at=started, state=TaskRun.State.SUCCEEDED)
        done = slot_explain(rule=rule, slot=T0, now=started)["summary"]
    local = started.astimezone(ZoneInfo("Asia/Shanghai"))
    assert "due Tue 2026-12-01 09:00:00 CST (UTC+0800), starts " in pending and "(spread 300 s)" in pending
    assert f"due Tue 2026-12-01 09:00:00 CST (UTC+0800), started {local:%H:%M:%S} (spread 300 s)" in done


@pytest.mark.django_db
def test_a_plan_shows_a_spread_edit_as_moved_starts_not_a_dangerous_change():
    from tasks.models import TriggerRule
    from tasks.rules import plan as planned
    from tasks.triggers.plan import rule_plan

    rule = make_rule("report", kind="cron", cron="0 9 * * *", now=T0)
    edited = TriggerRule.objects.get(pk=rule.pk)
    edited.spread_seconds = 300
    plan = rule_plan(rule, edited, now=T0, days=1)
    assert [c.said.code for c in plan.consequences] == [spread.MOVED_STARTS]
    assert not plan.dangerous
    assert ("spread_seconds", 0, 300) in plan.changes
    assert planned.KEY_SHAPE not in {c.said.code for c in plan.consequences}


@pytest.mark.django_db
def test_the_preview_lists_each_fires_planned_start_beside_its_slot(admin_client):
    """The API's preview (and the admin's, from the same rule_preview) gives each fire its start:
    the slot plus the rule's stable offset, in the rule's zone; a rule without spread has none."""
    make_rule("report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", spread_seconds=300, due=T0)
    make_rule("plain", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", due=T0)
    fires = admin_client.get("/api/v1/rules/report/preview", {"count": 3}).json()
    assert len(fires) == 3
    for fire in fires:
        slot = datetime.fromisoformat(fire["utc"].replace("Z", "+00:00"))
        start = slot + spread.offset("report", slot, timedelta(seconds=300), next_slot=slot + timedelta(days=1))
        assert start.astimezone(ZoneInfo("Asia/Shanghai")).strftime("%H:%M:%S") in fire["start"]
    assert all(not fire["start"] for fire in admin_client.get("/api/v1/rules/plain/preview").json())


@pytest.mark.django_db
def test_the_status_board_shows_a_spread_rules_next_start_under_its_next_fire(admin_client):
    make_rule("report", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", spread_seconds=300, due=T0)
    make_rule("plain", kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", due=T0)
    start = T0 + spread.offset("report", T0, timedelta(seconds=300), next_slot=T0 + timedelta(days=1))
    page = admin_client.get("/admin/").content.decode()
    report_row = page[page.index(">report<") :]
    report_row = report_row[: report_row.index("</tr>")]
    assert "starts" in report_row
    assert start.astimezone(ZoneInfo("Asia/Shanghai")).strftime("%H:%M:%S") in report_row
    plain_row = page[page.index(">plain<") :]
    assert "starts" not in plain_row[: plain_row.index("</tr>")]
