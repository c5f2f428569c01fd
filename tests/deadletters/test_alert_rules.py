"""Pure alert decisions: severity escalation, storm windows and folding, delivery retry bounds,
message shapes per receiver format, URL redaction. No database, plain datetimes."""

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from deadletters import alert_rules as r
from deadletters.alert_texts import alert_message
from tasks.rules import business_days

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "expected"),
    [
        (1, 5, r.NOTICE),  # first failure
        (2, 5, None),  # mid-chain: already announced
        (3, 5, None),
        (4, 5, r.WARNING),  # near the cap: attempt >= max - 1
        (5, 5, r.WARNING),
        (1, 3, r.NOTICE),
        (2, 3, r.WARNING),
        (1, 2, r.WARNING),  # the first failure is already near the cap: the higher wins
        (1, 1, r.WARNING),
        (7, 10, None),
        (9, 10, r.WARNING),
    ],
)
def test_it_escalates_retry_severity_by_attempt(attempt, max_attempts, expected):
    assert r.retry_severity(attempt=attempt, max_attempts=max_attempts) == expected


def test_it_gives_every_other_event_its_fixed_severity():
    assert r.EVENT_SEVERITY == {
        r.FINAL_FAILURE: r.URGENT,
        r.SLOT_EXPIRED: r.URGENT,
        r.SLOT_MISSED: r.WARNING,
        r.SCHEDULER_STALLED: r.URGENT,
        # An incident's close reaches every channel its opening paged, so on-call learns it is over.
        r.INCIDENT_OPENED: r.URGENT,
        r.INCIDENT_CLOSED: r.URGENT,
    }


NEW_YEAR = date(2027, 1, 1)


@pytest.mark.parametrize(
    ("now", "step", "severity"),
    [
        (datetime(2026, 11, 16, 23, 59, 59, tzinfo=UTC), None, None),  # 46 days: outside the horizon
        (datetime(2026, 11, 17, 0, 0, tzinfo=UTC), "notice", r.NOTICE),  # 45 days
        (datetime(2026, 12, 4, 23, 59, 59, tzinfo=UTC), "notice", r.NOTICE),  # 28 days
        (datetime(2026, 12, 5, 0, 0, tzinfo=UTC), "warning", r.WARNING),  # 27 days
        (datetime(2026, 12, 24, 23, 59, 59, tzinfo=UTC), "warning", r.WARNING),  # 8 days
        (datetime(2026, 12, 25, 0, 0, tzinfo=UTC), "urgent", r.URGENT),  # 7 days
        (datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC), "urgent", r.URGENT),  # 1 day
        (datetime(2027, 1, 1, 0, 0, tzinfo=UTC), "today", r.URGENT),  # the day itself
        (datetime(2027, 3, 9, 12, 0, tzinfo=UTC), "today", r.URGENT),  # long after: still the last step
        # Counted in UTC dates whatever zone `now` comes in: 2026-12-25 07:59 CST is 12-24 23:59 UTC.
        (datetime(2026, 12, 25, 7, 59, tzinfo=ZoneInfo("Asia/Shanghai")), "warning", r.WARNING),
        (datetime(2026, 12, 25, 8, 0, tzinfo=ZoneInfo("Asia/Shanghai")), "urgent", r.URGENT),
        (datetime(2026, 12, 31, 19, 0, tzinfo=ZoneInfo("America/New_York")), "today", r.URGENT),
    ],
)
def test_a_calendar_alert_escalates_as_its_first_date_without_data_approaches(now, step, severity):
    found = r.calendar_step(no_data_from=NEW_YEAR, now=now)
    assert (found and found.name, found and found.severity) == (step, severity)


def test_each_calendar_step_has_its_own_key_once_per_calendar_and_year():
    keys = {
        r.calendar_dedupe_key(calendar="cn", no_data_from=day, step=step)
        for step in r.CALENDAR_STEPS
        for day in (NEW_YEAR, date(2027, 1, 2), date(2027, 1, 4))  # the gap moves with the days after 1 Jan
    }
    assert len(keys) == len(r.CALENDAR_STEPS)
    assert r.calendar_dedupe_key(calendar="cn", no_data_from=NEW_YEAR, step=r.CALENDAR_STEPS[0]) != (
        r.calendar_dedupe_key(calendar="cn-sh", no_data_from=NEW_YEAR, step=r.CALENDAR_STEPS[0])
    )
    assert r.calendar_dedupe_key(calendar="cn", no_data_from=NEW_YEAR, step=r.CALENDAR_STEPS[0]) != (
        r.calendar_dedupe_key(calendar="cn", no_data_from=date(2028, 1, 1), step=r.CALENDAR_STEPS[0])
    )


def test_the_first_calendar_step_is_the_calendars_horizon():
    # A step further ahead than calendar_gaps looks would never be reached.
    assert r.CALENDAR_STEPS[0].days_before == business_days.DEFAULT_HORIZON.days
    assert [s.days_before for s in r.CALENDAR_STEPS] == sorted((s.days_before for s in r.CALENDAR_STEPS), reverse=True)


@pytest.mark.parametrize(
    ("severity", "minimum", "reaches"),
    # Spelled out, not derived from SEVERITY_RANK (that would restate the code under test).
    [
        (r.NOTICE, r.NOTICE, True),
        (r.NOTICE, r.WARNING, False),
        (r.NOTICE, r.URGENT, False),
        (r.WARNING, r.NOTICE, True),
        (r.WARNING, r.WARNING, True),
        (r.WARNING, r.URGENT, False),
        (r.URGENT, r.NOTICE, True),
        (r.URGENT, r.WARNING, True),
        (r.URGENT, r.URGENT, True),
    ],
)
def test_it_sends_a_channel_its_minimum_severity_and_above(severity, minimum, reaches):
    assert r.severity_reaches(severity, minimum) is reaches


def test_severity_ranks_are_ordered():
    assert r.SEVERITY_RANK[r.NOTICE] < r.SEVERITY_RANK[r.WARNING] < r.SEVERITY_RANK[r.URGENT]


@pytest.mark.parametrize(
    ("now", "start"),
    [
        (T0, T0),
        (T0 + timedelta(seconds=1), T0),
        (T0 + timedelta(minutes=4, seconds=59, microseconds=999999), T0),
        (T0 + timedelta(minutes=5), T0 + timedelta(minutes=5)),
        (T0 - timedelta(microseconds=1), T0 - timedelta(minutes=5)),
        (datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC), datetime(2026, 12, 31, 23, 55, tzinfo=UTC)),
    ],
)
def test_it_puts_an_instant_in_its_fixed_window(now, start):
    assert r.storm_window(now) == start


def test_it_gives_two_workers_the_same_window_whatever_their_zone():
    from zoneinfo import ZoneInfo

    local = (T0 + timedelta(minutes=2)).astimezone(ZoneInfo("Asia/Shanghai"))
    assert r.storm_window(local) == T0


@pytest.mark.parametrize("window", [timedelta(minutes=1), timedelta(minutes=5), timedelta(hours=1)])
def test_every_instant_of_a_day_falls_in_exactly_one_window(window):
    for seconds in range(0, 86400, 37):
        now = T0 + timedelta(seconds=seconds)
        start = r.storm_window(now, window)
        assert start <= now < start + window


@pytest.mark.parametrize(
    ("seen", "fold"), [(0, False), (1, False), (r.STORM_LIMIT - 1, False), (r.STORM_LIMIT, True), (499, True)]
)
def test_it_sends_the_first_n_of_a_group_and_folds_the_rest(seen, fold):
    assert r.storm_fold(recorded_in_window=seen) is fold


def test_a_storm_of_500_sends_the_limit_and_folds_the_rest():
    sent = sum(not r.storm_fold(recorded_in_window=i) for i in range(500))
    assert sent == r.STORM_LIMIT


@pytest.mark.parametrize(
    ("offset", "due"),
    [
        (timedelta(0), False),
        (timedelta(minutes=4, seconds=59), False),
        (r.STORM_WINDOW, True),
        (timedelta(hours=2), True),
    ],
)
def test_a_summary_is_due_when_its_window_ends(offset, due):
    assert r.summary_due(window_start=T0, now=T0 + offset) is due


def test_it_groups_storms_by_rule_and_kind():
    assert r.storm_group(rule="daily", kind=r.FINAL_FAILURE) != r.storm_group(rule="daily", kind=r.RETRY)
    assert r.storm_group(rule="daily", kind=r.RETRY) != r.storm_group(rule="hourly", kind=r.RETRY)
    assert r.storm_group(rule=None, kind=r.SCHEDULER_STALLED) == "scheduler_stalled:-"


def test_delivery_retries_back_off_and_stop_at_the_cap():
    delays = []
    for attempts in range(1, r.MAX_DELIVERY_ATTEMPTS):
        at = r.delivery_retry_at(attempts=attempts, now=T0)
        assert at is not None
        delays.append(at - T0)
    assert delays == sorted(delays) and all(d <= r.DELIVERY_BACKOFF_CAP for d in delays)
    assert delays[0] == r.DELIVERY_BACKOFF_BASE
    assert r.delivery_retry_at(attempts=r.MAX_DELIVERY_ATTEMPTS, now=T0) is None
    assert r.delivery_retry_at(attempts=r.MAX_DELIVERY_ATTEMPTS + 3, now=T0) is None


def test_delivery_retries_start_at_the_given_base_and_keep_the_cap():
    base = timedelta(seconds=2)
    delays = [r.delivery_retry_at(attempts=a, now=T0, base=base) - T0 for a in range(1, r.MAX_DELIVERY_ATTEMPTS)]
    assert delays == [base * 2**i for i in range(r.MAX_DELIVERY_ATTEMPTS - 1)]
    assert r.delivery_retry_at(attempts=3, now=T0, base=timedelta(minutes=9)) - T0 == r.DELIVERY_BACKOFF_CAP
    assert r.delivery_retry_at(attempts=r.MAX_DELIVERY_ATTEMPTS, now=T0, base=base) is None


PAYLOAD = {
    "kind": r.FINAL_FAILURE,
    "severity": r.URGENT,
    "title": "run 7 failed for good: report:2026-03-01",
    "run_id": 7,
    "biz_key": "report:2026-03-01",
    "rule": "daily",
    "error_kind": "timeout",
    "link": "http://h/admin/deadletters/deadletter/3/change/",
    "reason": "attempts exhausted",
}


@pytest.mark.parametrize(
    ("fmt", "path"),
    [("slack", ("text",)), ("feishu", ("content", "text")), ("dingtalk", ("text", "content")), ("generic", ("text",))],
)
def test_every_format_carries_run_id_biz_key_rule_error_kind_and_link(fmt, path):
    body = r.webhook_body(PAYLOAD, fmt, alert_message(PAYLOAD))
    text = body
    for key in path:
        text = text[key]
    for value in ("run id:     7", "report:2026-03-01", "daily", "timeout", PAYLOAD["link"], "URGENT"):
        assert value in text
    if fmt == "feishu":
        assert body["msg_type"] == "text"
    if fmt == "dingtalk":
        assert body["msgtype"] == "text"
    if fmt == "generic":
        assert {k: body[k] for k in r.PAYLOAD_FIELDS} == {k: PAYLOAD[k] for k in r.PAYLOAD_FIELDS}


def test_a_summary_says_how_many_more():
    text = alert_message({**PAYLOAD, "kind": r.SUMMARY, "count": 497, "examples_text": "a, b"}).text
    assert "and 497 more like this: a, b" in text


def test_a_missing_value_reads_as_a_dash():
    text = alert_message({"kind": r.SCHEDULER_STALLED, "severity": r.URGENT}).text
    assert "run id:     -" in text and "biz_key:    -" in text


@pytest.mark.parametrize(
    ("fmt", "status", "body", "ok"),
    [
        ("slack", 200, None, True),
        ("slack", 500, None, False),
        ("generic", 204, None, True),
        ("generic", 302, None, False),
        ("feishu", 200, {"code": 0, "msg": "success"}, True),
        ("feishu", 200, {"StatusCode": 0}, True),
        ("feishu", 200, {"code": 19001, "msg": "param invalid: incoming webhook access token invalid"}, False),
        ("dingtalk", 200, {"errcode": 0, "errmsg": "ok"}, True),
        ("dingtalk", 200, {"errcode": 310000, "errmsg": "keywords not in content"}, False),
        ("dingtalk", 429, {"errcode": 0}, False),
        ("slack", 200, {"code": 5}, True),  # only Feishu and DingTalk put errors in a 200 body
    ],
)
def test_it_reads_each_receivers_answer(fmt, status, body, ok):
    accepted, why = r.webhook_accepted(fmt, status, body)
    assert accepted is ok
    assert (why == "") is ok


@pytest.mark.parametrize(
    ("url", "safe"),
    [
        ("https://hooks.slack.com/services/T000/B000/XXXXSECRET", "https://hooks.slack.com/…"),
        ("https://open.feishu.cn/open-apis/bot/v2/hook/abc-SECRET", "https://open.feishu.cn/…"),
        ("https://oapi.dingtalk.com/robot/send?access_token=SECRET", "https://oapi.dingtalk.com/…"),
        ("http://127.0.0.1:8080/hook/SECRET?x=1", "http://127.0.0.1:8080/…"),
        ("https://user:SECRET@example.com/h", "https://example.com/…"),
        ("", ""),
    ],
)
def test_it_never_shows_a_webhook_token(url, safe):
    assert r.redact_url(url) == safe
    assert "SECRET" not in r.redact_url(url)


# A failing event's text can carry chat markup. Each format gets it as plain text.
HOSTILE = {
    **PAYLOAD,
    "biz_key": "evt:<!channel>",
    "rule": "<!here|here>",
    "error": 'boom <!channel> <http://evil.example/login|https://bank.example> & <@U123> <at user_id="all">所有人</at>',
    "reason": "[click](http://evil.example) @all",
}


def test_slack_text_escapes_mentions_and_links_in_every_value():
    text = r.webhook_body(HOSTILE, "slack", alert_message(HOSTILE))["text"]

    assert "<" not in text and ">" not in text
    assert "&lt;!channel&gt;" in text and "&lt;http://evil.example/login|https://bank.example&gt;" in text
    assert "&amp; &lt;@U123&gt;" in text and "evt:&lt;!channel&gt;" in text
    assert PAYLOAD["link"] in text  # our own link still arrives (Slack links a bare URL itself)


def test_feishu_text_cannot_mention_everyone():
    body = r.webhook_body(HOSTILE, "feishu", alert_message(HOSTILE))
    text = body["content"]["text"]

    assert body["msg_type"] == "text"
    assert "<at" not in text and "<" not in text and ">" not in text
    # Still readable, with full-width angle brackets: no longer a tag.
    assert '\uff1cat user_id="all"\uff1e所有人\uff1c/at\uff1e' in text


def test_dingtalk_text_mentions_nobody_and_parses_no_markdown():
    body = r.webhook_body(HOSTILE, "dingtalk", alert_message(HOSTILE))

    assert body["msgtype"] == "text"  # not "markdown": [label](url) stays literal text
    assert body["at"] == {"isAtAll": False, "atMobiles": [], "atUserIds": []}
    assert "[click](http://evil.example) @all" in body["text"]["content"]


def test_generic_json_keeps_the_values_as_they_were():
    body = r.webhook_body(HOSTILE, "generic", alert_message(HOSTILE))
    assert body["error"] == HOSTILE["error"] and HOSTILE["error"] in body["text"]


def test_a_multi_line_value_cannot_forge_another_field():
    text = alert_message({**PAYLOAD, "error": "boom\nlink:       http://evil.example", "biz_key": "k\r\nrule: x"}).text

    assert [line for line in text.splitlines() if line.startswith("link:")] == [f"link:       {PAYLOAD['link']}"]
    assert [line for line in text.splitlines() if line.startswith("rule:")] == ["rule:       daily"]
    assert "            link:       http://evil.example" in text
