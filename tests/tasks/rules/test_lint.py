"""The rule lint checklist: pure, every check passing and failing."""

from dataclasses import replace

import pytest
from django.utils import translation

from tasks import sentences
from tasks.rules import lint

GOOD = lint.LintInput(
    timezone="Asia/Shanghai",
    dedupe_key_template="report:{business_date}:{channel}",
    params={"channel": "email"},
    max_attempts=3,
    max_retry_window_seconds=3600,
    max_delay_seconds=300,
    jitter_min=0.5,
    jitter_max=1.5,
    catchup_max_delay_seconds=300,
    lease_ttl_seconds=300,
    skill_p99_seconds=12.0,
    alert_fields=frozenset({"run_id", "biz_key", "rule"}),
)


def _status(items, check):
    return next(i for i in items if i.check == check)


def test_it_passes_a_well_configured_rule():
    items = lint.rule_lint(GOOD)
    assert [i.status for i in items] == [lint.PASS] * 8
    assert sentences.lint_summary(lint.lint_summary(items)) == "ok"


@pytest.mark.parametrize(
    ("change", "check", "status", "words"),
    [
        ({"timezone": "localtime"}, lint.CHECK_TIMEZONE, lint.FAIL, "not a known zone"),
        ({"timezone": ""}, lint.CHECK_TIMEZONE, lint.FAIL, "required"),
        ({"timezone": "asia/shanghai"}, lint.CHECK_TIMEZONE, lint.FAIL, "did you mean"),
        ({"dedupe_key_template": "{rule}"}, lint.CHECK_DEDUPE_KEY, lint.FAIL, "no date or object"),
        ({"dedupe_key_template": "x:{"}, lint.CHECK_DEDUPE_KEY, lint.FAIL, "Malformed"),
        ({"max_attempts": 0}, lint.CHECK_RETRIES, lint.FAIL, "no attempt cap"),
        ({"max_retry_window_seconds": 0}, lint.CHECK_RETRIES, lint.FAIL, "elapsed"),
        ({"max_delay_seconds": 0}, lint.CHECK_RETRIES, lint.FAIL, "one delay"),
        ({"jitter_min": 1.0, "jitter_max": 1.0}, lint.CHECK_RETRIES, lint.FAIL, "no jitter"),
        ({"catchup_max_delay_seconds": 0}, lint.CHECK_CATCHUP, lint.FAIL, "No catch-up window"),
        ({"skill_p99_seconds": None}, lint.CHECK_LEASE, lint.WARN, "unknown"),
        ({"skill_p99_seconds": 300.0}, lint.CHECK_LEASE, lint.FAIL, "lose their lease"),
        ({"skill_p99_seconds": 299.9}, lint.CHECK_LEASE, lint.PASS, "p99 299.9s"),
        ({"alert_fields": frozenset({"run_id"})}, lint.CHECK_ALERT, lint.FAIL, "biz_key"),
    ],
)
def test_it_flags_each_problem(change, check, status, words):
    item = _status(lint.rule_lint(replace(GOOD, **change)), check)
    assert item.status == status
    assert words.lower() in sentences.lint_message(item).lower()


@pytest.mark.parametrize(
    ("template", "ok"),
    [("{rule}:{slot}", True), ("{object_id}:{action}", True), ("daily:{business_date}", True), ("{rule}", False)],
)
def test_it_accepts_a_date_or_object_placeholder(template, ok):
    params = {"object_id": 1, "action": "x"}
    item = _status(lint.rule_lint(replace(GOOD, dedupe_key_template=template, params=params)), lint.CHECK_DEDUPE_KEY)
    assert (item.status == lint.PASS) is ok


def test_it_summarises_fails_and_warns():
    items = lint.rule_lint(replace(GOOD, catchup_max_delay_seconds=0, max_attempts=0, skill_p99_seconds=None))
    assert sentences.lint_summary(lint.lint_summary(items)) == "2 fail, 1 warn"


def test_it_warns_about_a_dependency_nothing_sets():
    rule = replace(
        GOOD, depends_on=("pipeline.raw.ready", "pipeline.fx.ready"), flags_seen=frozenset({"pipeline.fx.ready"})
    )
    item = _status(lint.rule_lint(rule), lint.CHECK_DEPENDENCIES)
    assert item.status == lint.WARN
    text = sentences.lint_message(item)
    assert "pipeline.raw.ready" in text and "pipeline.fx.ready" not in text


def test_it_passes_dependencies_that_are_set():
    rule = replace(GOOD, depends_on=("pipeline.raw.ready",), flags_seen=frozenset({"pipeline.raw.ready"}))
    assert _status(lint.rule_lint(rule), lint.CHECK_DEPENDENCIES).status == lint.PASS


def _dedupe(**change) -> lint.LintItem:
    return next(i for i in lint.rule_lint(replace(GOOD, **change)) if i.check == lint.CHECK_DEDUPE_KEY)


def test_it_fails_placeholders_with_nothing_escaped_between_them():
    item = _dedupe(dedupe_key_template="{business_date}{channel}", params={"channel": "email"})
    assert (item.status, "Separate {channel}" in sentences.lint_message(item)) == (lint.FAIL, True)
    assert _dedupe(dedupe_key_template="{business_date}:{channel}", params={"channel": "e"}).status == lint.PASS


def test_it_fails_an_event_key_by_date_unless_the_rule_says_so_and_then_warns():
    dated = {"kind": "event", "dedupe_key_template": "{object_id}:{business_date}"}
    assert _dedupe(**dated).status == lint.FAIL
    assert _dedupe(**dated, event_key_by_date=True).status == lint.WARN
    assert _dedupe(kind="event", dedupe_key_template="{object_id}:{action}").status == lint.PASS


def test_the_checklist_speaks_both_languages_from_the_same_items():
    items = lint.rule_lint(replace(GOOD, max_attempts=0, max_retry_window_seconds=0, skill_p99_seconds=None))
    retries = _status(items, lint.CHECK_RETRIES)
    with translation.override("en"):
        assert sentences.lint_message(retries) == "No attempt cap; no cap on elapsed retry time."
        assert sentences.lint_summary(lint.lint_summary(items)) == "1 fail, 1 warn"
    with translation.override("zh-hans"):
        assert "attempt" not in sentences.lint_message(retries)
        assert "fail" not in sentences.lint_summary(lint.lint_summary(items))
