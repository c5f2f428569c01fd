# ruff: noqa: RUF001  (Chinese text uses full-width punctuation)
"""Alerts speak their channel's language: titles and texts sent to a zh-Hans channel (a Feishu or
DingTalk group) are Chinese, every kind of alert, checked by the zh-Hans completeness checker; an
English channel reads as before. The checker itself fails on a planted English string."""

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest

from deadletters import alert_rules as r
from deadletters.alert_texts import alert_message
from runs.engine.objectives import objective_alert_payload
from runs.models import SlotObjective
from tasks.rules import objectives
from tasks.rules.reasons import Reason
from tasks.sentences import reason_dump
from tests.support.zh_complete import KEEP, assert_zh_complete

AT = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)
# One payload of every kind, as deadletters.alerts records them (figures included).
PAYLOADS = {
    r.FINAL_FAILURE: {
        "run_id": 75,
        "biz_key": "report:2026-12-01",
        "rule": "日报",
        "error_kind": "timeout",
        "attempt": 3,
        "reason": "attempt 3 of 3: attempts exhausted",
        "error": "TimeoutError: 30 s",
        "link": "http://127.0.0.1:8000/admin/deadletters/deadletter/3/change/",
    },
    r.RETRY: {
        "run_id": 75,
        "biz_key": "report:2026-12-01",
        "rule": "日报",
        "error_kind": "timeout",
        "attempt": "2 of 5",
        "attempt_n": 2,
        "attempt_max": 5,
    },
    r.SLOT_EXPIRED: {
        "rule": "日报",
        "error_kind": "not_ready_expired",
        "slot": AT.isoformat(),
        "slot_utc": "2026-12-01T01:00:00Z",
        "missing": ["数据.就绪"],
        "reason": "missing: 数据.就绪",
    },
    r.SLOT_MISSED: {
        "rule": "日报",
        "error_kind": "missed",
        "slot": AT.isoformat(),
        "slot_utc": "2026-12-01T01:00:00Z",
        "late": 112.0,
        "catchup": "none",
        "reason": "112.0s late, catch-up none",
    },
    r.SCHEDULER_STALLED: {
        "error_kind": "scheduler_stalled",
        "age": "95",
        "since": "2026-12-01T00:58:25Z",
        "stall": "60",
        "reason": "no tick since 2026-12-01T00:58:25Z; stalled after 60s",
    },
    r.TEST: {"channel": "飞书值班群"},
    r.SUMMARY: {
        "rule": "日报",
        "error_kind": "timeout",
        "count": 497,
        "summary_kind": r.FINAL_FAILURE,
        "from": "01:00",
        "until": "01:05",
        "examples_text": "report:1, report:2",
    },
}


def _objective_payload(kind: str, reason: Reason) -> dict:
    """An objective alert's payload as the objective pass records it (runs.engine.objectives)."""
    rule = SimpleNamespace(id=1, name="日报", timezone="Asia/Shanghai")
    row = SlotObjective(slot=AT, deadline=AT + timedelta(minutes=30), cause=reason_dump(reason))
    return objective_alert_payload(rule, row, kind=kind)


SINCE = AT.astimezone(ZoneInfo("Asia/Shanghai"))
PAYLOADS[r.OBJECTIVE_AT_RISK] = _objective_payload(
    r.OBJECTIVE_AT_RISK,
    Reason.of(
        objectives.CAUSE_NOT_STARTED,
        by=SINCE,
        cause=Reason.of(objectives.CAUSE_WAITING_READY, flags="数据.就绪", since=SINCE),
    ),
)
PAYLOADS[r.OBJECTIVE_BREACHED] = _objective_payload(
    r.OBJECTIVE_BREACHED, Reason.of(objectives.CAUSE_SCHEDULER_DOWN, since=SINCE)
)
PAYLOADS[r.OBJECTIVE_RECOVERED] = _objective_payload(
    r.OBJECTIVE_RECOVERED, Reason.of(objectives.CAUSE_FINISHED, at=SINCE)
)
PAYLOADS[r.CALENDAR_NO_DATA] = {
    "error_kind": r.CALENDAR_NO_DATA,
    "rule": "日报, 周报",
    "calendar": "中国大陆",
    "no_data_from": "2027-01-01",
    "days_left": 27,
    "step": "warning",
    "source": "chinesecalendar 1.11.0",
    "uncertain_days": "hold",
}
PAYLOADS[r.INCIDENT_OPENED] = {
    "error_kind": "incident_queue",
    "incident_kind": "queue",
    "subject": "agents",
    "started_utc": "2026-12-01T01:00:00",
}
PAYLOADS[r.INCIDENT_CLOSED] = {
    "error_kind": "incident_scheduler",
    "incident_kind": "scheduler",
    "subject": "scheduler",
    "started_utc": "2026-12-01T01:00:00",
    "ended_utc": "2026-12-01T01:03:00",
    "duration_s": "180",
    "missed": 16,
    "caught_up": 2,
    "rules_affected": 4,
}
# What the alert carries as data: the rule, keys, the error, the catch-up policy's name.
DATA = {"日报", "report:2026-12-01", "timeout", "TimeoutError", "none", "not_ready_expired", "missed"}
DATA |= {"scheduler_stalled", "report:1", "report:2", "harness"}
DATA |= {"incident_queue", "incident_scheduler", "agents", "scheduler"}
DATA |= {"notice", "import"}  # the command "harness notice import", quoted as typed
DATA |= {r.OBJECTIVE_AT_RISK, r.OBJECTIVE_BREACHED, r.OBJECTIVE_RECOVERED, r.CALENDAR_NO_DATA, "chinesecalendar"}
KINDS = {
    v for k, v in vars(r).items() if k.isupper() and isinstance(v, str) and k not in ("NOTICE", "WARNING", "URGENT")
}


def test_every_kind_of_alert_has_a_payload_here():
    assert set(PAYLOADS) == KINDS


def test_an_objective_alert_names_its_slot_and_deadline_in_the_rules_zone_in_each_language():
    payload = {"kind": r.OBJECTIVE_BREACHED, "severity": r.URGENT, **PAYLOADS[r.OBJECTIVE_BREACHED]}
    zh = alert_message(payload, language="zh-hans")
    assert "2026-12-01 09:00:00 CST" in zh.title and "T01:00" not in zh.title + zh.text
    assert "2026-12-01 09:30:00 CST" in zh.text and "调度器" in zh.text
    en = alert_message(payload, language="en")
    assert en.title.startswith(
        "[harness] URGENT rule 日报 slot Tue 2026-12-01 09:00:00 CST (UTC+0800): objective breached"
    )
    assert "the scheduler has not ticked since" in en.text and "objective Tue 2026-12-01 09:30:00 CST" in en.text


@pytest.mark.parametrize("kind", sorted(PAYLOADS))
def test_every_kind_of_alert_is_chinese_on_a_zh_hans_channel(kind):
    payload = {"kind": kind, "severity": r.URGENT, **PAYLOADS[kind]}
    msg = alert_message(payload, language="zh-hans")
    assert_zh_complete(f"{msg.title}\n{msg.text}", allowed=DATA, where=f"{kind} alert")
    assert msg.title.startswith("[harness] 紧急 ")
    # "link" is kept as a payload field's name (KEEP); as a label, it is worded.
    labels = [line.split(":", 1)[0].strip() for line in msg.text.splitlines() if ":" in line]
    assert "link" not in labels and "链接" in labels


@pytest.mark.parametrize(
    ("incident_kind", "subject", "zh_label", "en_label"),
    [
        ("database", "postgresql:db.internal:5432/harness", "数据库中断", "Database outage"),
        ("broker", "redis://10.0.0.7:6379/0", "消息代理中断", "Broker outage"),
    ],
)
def test_a_database_or_broker_outage_is_worded_in_each_language(incident_kind, subject, zh_label, en_label):
    payload = {
        "kind": r.INCIDENT_CLOSED,
        "severity": r.URGENT,
        **PAYLOADS[r.INCIDENT_CLOSED],
        "error_kind": f"incident_{incident_kind}",
        "incident_kind": incident_kind,
        "subject": subject,
    }
    zh = alert_message(payload, language="zh-hans")
    assert_zh_complete(f"{zh.title}\n{zh.text}", allowed=DATA | {subject, f"incident_{incident_kind}"}, where="outage")
    assert zh_label in zh.title and subject in zh.title
    assert en_label in alert_message(payload, language="en").title


def test_the_final_failure_alert_reads_so_in_each_language():
    payload = {"kind": r.FINAL_FAILURE, "severity": r.URGENT, **PAYLOADS[r.FINAL_FAILURE]}
    zh = alert_message(payload, language="zh-hans")
    assert zh.title == "[harness] 紧急 运行 75 最终失败：report:2026-12-01"
    assert "第 3 次尝试（共 3 次）：尝试次数已用完" in zh.text
    en = alert_message(payload, language="en")
    assert en.title == "[harness] URGENT run 75 failed for good: report:2026-12-01"
    assert "run id:     75" in en.text and "why:        attempt 3 of 3: attempts exhausted" in en.text


def test_an_old_alert_without_its_figures_keeps_its_stored_title():
    payload = {"kind": r.RETRY, "severity": r.WARNING, "title": "run 9 attempt 2 of 5 failed, will retry: k"}
    assert (
        alert_message(payload, language="zh-hans").title == "[harness] 警告 run 9 attempt 2 of 5 failed, will retry: k"
    )


@pytest.mark.parametrize(
    "planted",
    [
        "失败 run 75 failed for good",
        "筛选：final_failure",
        "历史：True → False",
        "值：None",
        "Choose 资源池 by selecting them",
    ],
)
def test_the_checker_fails_on_a_planted_english_string(planted):
    with pytest.raises(AssertionError, match="English or raw codes"):
        assert_zh_complete(planted, allowed=KEEP | DATA)


def test_the_checker_lets_data_zones_units_and_identifiers_pass():
    assert_zh_complete(
        "规则 日报 于 2026-12-01 09:00:00 CST (01:00:00 UTC) 运行，Asia/Shanghai，耗时 3.2 s，"
        "键 report:2026-12-01，链接 http://127.0.0.1:8000/admin/，占位符 {business_date}",
        allowed=KEEP | DATA,
    )


def test_a_calendar_alert_is_worded_from_its_figures_in_each_language():
    payload = {"kind": r.CALENDAR_NO_DATA, "severity": r.WARNING, **PAYLOADS[r.CALENDAR_NO_DATA]}
    zh = alert_message(payload, language="zh-hans")
    assert "中国大陆" in zh.title and "2027-01-01" in zh.title and "27" in zh.title
    assert "chinesecalendar 1.11.0" in zh.text
    en = alert_message(payload, language="en")
    assert en.title == "[harness] WARNING business calendar 中国大陆 has no data from 2027-01-01 (in 27 days)"


@pytest.mark.parametrize(
    ("step", "policy", "zh_words", "en_words"),
    [
        ("notice", "hold", "等待审批", "hold their runs for approval"),
        ("warning", "skip", "不运行", "do not run"),
        ("urgent", "run", "照常运行", "run as on a working day"),
        ("today", "hold", "今天", "has no data from today, 2027-01-01"),
        ("warning", "", "周一至周五", "count every weekday as a business day"),  # no law to go by
    ],
)
def test_each_step_of_a_calendar_alert_says_what_rules_do_meanwhile_in_each_language(step, policy, zh_words, en_words):
    payload = {
        "kind": r.CALENDAR_NO_DATA,
        "severity": r.URGENT,
        **PAYLOADS[r.CALENDAR_NO_DATA],
        "step": step,
        "uncertain_days": policy,
        "days_left": 0 if step == "today" else 27,
    }
    zh = alert_message(payload, language="zh-hans")
    assert_zh_complete(f"{zh.title}\n{zh.text}", allowed=DATA, where=f"calendar alert {step}/{policy}")
    assert zh_words in zh.title + zh.text
    en = alert_message(payload, language="en")
    assert en_words in en.title + en.text
