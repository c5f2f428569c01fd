"""The trigger-rule admin: bad input is a message on the form, never a 500 and never a save;
and every changelist of the operations site renders with rows in it."""

import html
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from deadletters.services import deadletter_open
from runs.models import Attempt, Decision, Lease, SchedulerTick, TaskRun
from tasks.models import DiagnosticRecord, TriggerRule
from tasks.skills.errors import classify
from tasks.skills.sdk import ErrorKind, SkillError
from tasks.triggers.operator import rule_fire
from tests.support.rules import make_rule, rule_form_post

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 8, 15, tzinfo=UTC)
ADD_URL = reverse("admin:tasks_triggerrule_add")


def _page(response) -> str:
    return html.unescape(response.content.decode())


def _assert_form_error(response, field: str, text: str) -> None:
    assert response.status_code == 200, response.status_code
    errors = response.context["adminform"].form.errors
    assert field in errors, f"no error on {field}: {errors.as_data()}"
    assert any(text in e for e in errors[field]), errors[field]
    # The message is shown on the page, next to the field.
    page = _page(response)
    assert "Please correct the error" in page
    assert text in page


def _make_rule(name: str = "report") -> TriggerRule:
    """09:00 Shanghai every day, one run per business date."""
    return make_rule(
        name, kind="cron", cron="0 9 * * *", timezone="Asia/Shanghai", dedupe_key_template="{rule}:{business_date}"
    )


def test_it_creates_a_rule_from_a_valid_post(admin_client):
    response = admin_client.post(ADD_URL, rule_form_post())

    assert response.status_code == 302, _page(response)
    rule = TriggerRule.objects.get(name="daily-report")
    assert rule.cron == "0 9 * * *"
    assert rule.timezone == "Asia/Shanghai"
    assert rule.params == {"channel": "email"}
    assert rule.version == 1
    assert rule.next_fire_at is not None
    # 09:00 in Shanghai is 01:00 UTC.
    assert (rule.next_fire_at.hour, rule.next_fire_at.minute) == (1, 0)


def test_it_creates_a_one_time_rule_from_a_valid_post(admin_client):
    response = admin_client.post(
        ADD_URL,
        rule_form_post(
            name="once",
            kind="once",
            cron="",
            run_at_0="2030-01-01",
            run_at_1="09:00:00",
            params="{}",
            dedupe_key_template="{rule}:{slot}",
        ),
    )

    assert response.status_code == 302, _page(response)
    rule = TriggerRule.objects.get(name="once")
    # Typed next to Asia/Shanghai, so read on Shanghai's clock: 09:00 CST is 01:00 UTC.
    assert rule.run_at == datetime(2030, 1, 1, 1, 0, tzinfo=UTC)
    assert rule.next_fire_at == rule.run_at


# --- a one-time rule's run-at is typed on the rule zone's wall clock -----------------------------


def _once(**over) -> dict:
    return rule_form_post(name="once", kind="once", cron="", params="{}", dedupe_key_template="{rule}:{slot}", **over)


@pytest.mark.parametrize(
    ("zone", "day", "time", "utc"),
    [
        pytest.param("Asia/Shanghai", "2030-01-01", "09:00:00", datetime(2030, 1, 1, 1, 0, tzinfo=UTC), id="shanghai"),
        pytest.param("America/New_York", "2030-01-15", "09:00", datetime(2030, 1, 15, 14, 0, tzinfo=UTC), id="ny-est"),
        pytest.param("America/New_York", "2030-07-15", "09:00", datetime(2030, 7, 15, 13, 0, tzinfo=UTC), id="ny-edt"),
        pytest.param("UTC", "2030-07-15", "09:00", datetime(2030, 7, 15, 9, 0, tzinfo=UTC), id="utc"),
    ],
)
def test_it_reads_a_one_time_run_at_on_the_rule_zones_wall_clock(admin_client, zone, day, time, utc):
    response = admin_client.post(ADD_URL, _once(timezone=zone, run_at_0=day, run_at_1=time))

    assert response.status_code == 302, _page(response)
    rule = TriggerRule.objects.get(name="once")
    assert rule.run_at == utc
    assert rule.next_fire_at == utc


def test_it_shows_a_stored_run_at_back_on_the_rule_zones_clock_and_keeps_it_on_resave(admin_client):
    admin_client.post(ADD_URL, _once(run_at_0="2030-01-01", run_at_1="09:00"))
    rule = TriggerRule.objects.get(name="once")
    url = reverse("admin:tasks_triggerrule_change", args=[rule.pk])

    page = _page(admin_client.get(url))

    assert 'name="run_at_0" value="2030-01-01"' in page
    assert 'name="run_at_1" value="09:00:00"' in page
    assert "in the rule's timezone" in page
    # Saving the form as shown changes nothing: the wall time is read back to the same instant.
    again = admin_client.post(url, _once(run_at_0="2030-01-01", run_at_1="09:00:00"))
    assert again.status_code == 302, _page(again)
    rule.refresh_from_db()
    assert (rule.run_at, rule.version) == (datetime(2030, 1, 1, 1, 0, tzinfo=UTC), 1)
    # A new zone re-reads the same wall time on the new clock.
    berlin = _once(run_at_0="2030-01-01", run_at_1="09:00:00", timezone="Europe/Berlin")
    admin_client.post(url, {**berlin, "_plan_confirmed": "1"})
    rule.refresh_from_db()
    assert rule.run_at == datetime(2030, 1, 1, 8, 0, tzinfo=UTC)


def test_a_run_at_in_a_dst_gap_is_shifted_past_the_gap_and_the_operator_is_told(admin_client):
    # New York springs forward on 2030-03-10: 02:00-02:59 never happens; "shift" (the default) is
    # what cron rules do with such a wall time (docs/schedule.md): the first instant after the gap.
    response = admin_client.post(
        ADD_URL, _once(timezone="America/New_York", run_at_0="2030-03-10", run_at_1="02:30"), follow=True
    )

    assert response.status_code == 200
    rule = TriggerRule.objects.get(name="once")
    assert rule.run_at == datetime(2030, 3, 10, 7, 0, tzinfo=UTC)  # 03:00 EDT
    assert "02:30 does not exist" in _page(response)


def test_a_run_at_in_a_dst_gap_under_skip_is_a_form_error(admin_client):
    response = admin_client.post(
        ADD_URL, _once(timezone="America/New_York", dst_gap="skip", run_at_0="2030-03-10", run_at_1="02:30")
    )

    _assert_form_error(response, "run_at", "2030-03-10 02:30 does not exist in America/New_York")
    assert not TriggerRule.objects.exists()


@pytest.mark.parametrize(
    ("repeat", "utc"),
    [
        ("first", datetime(2030, 11, 3, 5, 30, tzinfo=UTC)),  # 01:30 EDT
        ("last", datetime(2030, 11, 3, 6, 30, tzinfo=UTC)),  # 01:30 EST
        ("both", datetime(2030, 11, 3, 5, 30, tzinfo=UTC)),  # a one-time rule runs once: the first
    ],
)
def test_a_run_at_in_a_repeated_hour_follows_the_dst_repeat_policy(admin_client, repeat, utc):
    response = admin_client.post(
        ADD_URL, _once(timezone="America/New_York", dst_repeat=repeat, run_at_0="2030-11-03", run_at_1="01:30")
    )

    assert response.status_code == 302, _page(response)
    assert TriggerRule.objects.get(name="once").run_at == utc


@pytest.mark.parametrize(
    ("over", "field", "text"),
    [
        pytest.param({"run_at_1": ""}, "run_at", "Enter a valid time.", id="date-without-time"),
        pytest.param({"run_at_0": ""}, "run_at", "Enter a valid date.", id="time-without-date"),
        pytest.param({"run_at_1": "25:00"}, "run_at", "Enter a valid time.", id="hour-25"),
        pytest.param({"timezone": "Mars/Olympus"}, "timezone", "is not a known zone", id="zone-unknown"),
        pytest.param(
            {"run_at_0": "9999-12-31", "run_at_1": "23:00", "timezone": "America/New_York"},
            "run_at",
            "out of range",
            id="beyond-year-9999",
        ),
        pytest.param(
            {"run_at_0": "0001-01-01", "run_at_1": "01:00", "timezone": "Asia/Shanghai"},
            "run_at",
            "out of range",
            id="before-year-1",
        ),
    ],
)
def test_bad_one_time_input_is_a_form_error(admin_client, over, field, text):
    response = admin_client.post(ADD_URL, _once(**{"run_at_0": "2030-01-01", "run_at_1": "09:00", **over}))

    _assert_form_error(response, field, text)
    assert not TriggerRule.objects.exists()


def test_an_unknown_zone_is_reported_once_on_the_zone_not_as_a_missing_run_at(admin_client):
    response = admin_client.post(ADD_URL, _once(run_at_0="2030-01-01", run_at_1="09:00", timezone="Mars/Olympus"))

    errors = response.context["adminform"].form.errors
    assert "run_at" not in errors, errors
    assert len(errors["timezone"]) == 1


BAD_POSTS = [
    pytest.param({"cron": "61 * * * *"}, "cron", 'bad minute field "61"', id="cron-minute-out-of-range"),
    pytest.param({"cron": "0 0 9 * * *"}, "cron", "has 6 fields", id="cron-six-fields"),
    pytest.param({"cron": ""}, "cron", "needs a cron expression", id="cron-empty"),
    pytest.param({"cron": "0 0 30 2 *"}, "cron", "never occurs", id="cron-30-february"),
    pytest.param({"timezone": "Mars/Olympus"}, "timezone", '"Mars/Olympus" is not a known zone', id="unknown-tz"),
    pytest.param({"timezone": "asia/shanghai"}, "timezone", 'did you mean "Asia/Shanghai"', id="tz-wrong-case"),
    pytest.param({"timezone": ""}, "timezone", "This field is required", id="empty-tz"),
    pytest.param(
        {"dedupe_key_template": "report:{business_date}:{region}"},
        "dedupe_key_template",
        "Unknown placeholder {region}",
        id="unknown-placeholder",
    ),
    pytest.param({"dedupe_key_template": "report:{"}, "dedupe_key_template", "Malformed", id="malformed-template"),
    pytest.param({"params": "{not json"}, "params", "Enter a valid JSON", id="params-not-json"),
    pytest.param({"params": '["email"]'}, "params", "Params must be a JSON object", id="params-a-list"),
    pytest.param({"params": "42"}, "params", "Params must be a JSON object", id="params-a-number"),
    pytest.param(
        {"kind": "interval", "cron": "", "interval_seconds": ""},
        "interval_seconds",
        "needs interval seconds",
        id="interval-without-seconds",
    ),
    pytest.param(
        {"kind": "interval", "cron": "", "interval_seconds": "0"},
        "interval_seconds",
        "greater than or equal to 1",
        id="interval-zero",
    ),
    pytest.param(
        {"kind": "interval", "cron": "", "interval_seconds": str(10**12)},
        "interval_seconds",
        "at most",
        id="interval-beyond-the-calendar",
    ),
    pytest.param({"kind": "once", "cron": ""}, "run_at", "needs a run-at instant", id="once-without-run-at"),
    pytest.param({"jitter_min": "2.0", "jitter_max": "1.0"}, "jitter_max", "at least jitter min", id="jitter-range"),
    pytest.param({"reason": ""}, "reason", "This field is required", id="missing-reason"),
    pytest.param({"reason": "   "}, "reason", "This field is required", id="blank-reason"),
    pytest.param({"skill": "harness.nope"}, "skill", "Unknown skill 'harness.nope'", id="unknown-skill"),
    pytest.param({"name": "Daily Report!"}, "name", "valid “slug”", id="name-not-a-slug"),
    pytest.param({"max_attempts": "0"}, "max_attempts", "greater than or equal to 1", id="zero-attempts"),
    pytest.param({"backoff_base_seconds": "nan"}, "backoff_base_seconds", "Enter a number", id="backoff-nan"),
]


@pytest.mark.parametrize(("over", "field", "text"), BAD_POSTS)
def test_it_shows_bad_input_on_the_add_form_and_saves_nothing(admin_client, over, field, text):
    response = admin_client.post(ADD_URL, rule_form_post(**over))

    _assert_form_error(response, field, text)
    assert not TriggerRule.objects.exists()


def test_it_keeps_the_stored_rule_when_an_edit_has_a_bad_cron(admin_client):
    rule = _make_rule("report")
    before = TriggerRule.objects.filter(pk=rule.pk).values().get()
    url = reverse("admin:tasks_triggerrule_change", args=[rule.pk])

    response = admin_client.post(
        url,
        rule_form_post(
            name="report", cron="0 9 * * * *", reason="edited", dedupe_key_template="{rule}:{business_date}"
        ),
    )

    _assert_form_error(response, "cron", "has 6 fields")
    assert TriggerRule.objects.filter(pk=rule.pk).values().get() == before


def test_it_saves_a_good_edit_and_bumps_the_version(admin_client):
    rule = _make_rule("report")
    url = reverse("admin:tasks_triggerrule_change", args=[rule.pk])

    # Confirmed for the version it was planned against (the "Review change" step: tests/tasks/triggers/test_plan.py).
    edit = rule_form_post(name="report", cron="30 18 * * *", dedupe_key_template="{rule}:{business_date}")
    response = admin_client.post(url, {**edit, "_plan_confirmed": "1"})

    assert response.status_code == 302, _page(response)
    rule.refresh_from_db()
    assert (rule.cron, rule.version) == ("30 18 * * *", 2)
    assert (rule.next_fire_at.hour, rule.next_fire_at.minute) == (10, 30)  # 18:30 Shanghai


def test_it_shows_the_add_form(admin_client):
    response = admin_client.get(ADD_URL)

    assert response.status_code == 200
    assert 'name="cron"' in response.content.decode()


# --- changelists ---------------------------------------------------------------------------


@pytest.fixture
def operations_data():
    """One row of everything the admin lists, made through services where there is one."""
    rule = _make_rule("report")
    claim = rule_fire(rule=rule, actor="alice", now=NOW)
    run = claim.run
    Attempt.objects.create(run=run, number=1, fence=1, worker="worker-a", started_at=NOW, outcome="failed")
    TaskRun.objects.filter(pk=run.pk).update(state=TaskRun.State.FAILED, attempts=1, first_failure_at=NOW)
    run.refresh_from_db()
    error = classify(SkillError(ErrorKind.INVALID_PARAM, "channel 'fax' is not supported"))
    deadletter_open(run=run, error=error, reason="never retried", now=NOW)
    Decision.objects.create(
        rule=rule, slot=NOW - timedelta(days=1), reason=Decision.Reason.MISSED, details={}, created_at=NOW
    )
    Lease.objects.create(key="object:invoice-42", owner="worker-a", token=7, acquired_at=NOW, expires_at=NOW)
    SchedulerTick.objects.create(name="scheduler", last_tick_at=NOW, last_claimed=3, last_dedupe_hits=1)
    DiagnosticRecord.objects.create(
        run_id=run.id,
        biz_key=run.biz_key,
        rule_name="report",
        slot=NOW,
        fence=1,
        attempt=1,
        worker="worker-a",
        created_at=NOW,
    )
    return run


@pytest.mark.parametrize(
    ("url_name", "shown"),
    [
        ("admin:tasks_triggerrule_changelist", "report"),
        ("admin:runs_taskrun_changelist", "report:2026-03-02"),
        ("admin:runs_decision_changelist", "Missed: late, not caught up"),
        ("admin:runs_lease_changelist", "object:invoice-42"),
        ("admin:deadletters_deadletter_changelist", "report:2026-03-02"),
        ("admin:tasks_diagnosticrecord_changelist", "worker-a"),
        ("admin:runs_schedulertick_changelist", "scheduler"),
    ],
)
def test_it_lists_rows_on_every_changelist(admin_client, operations_data, url_name, shown):
    response = admin_client.get(reverse(url_name))

    assert response.status_code == 200
    assert response.context["cl"].result_count == 1
    assert shown in _page(response)


def test_it_renders_the_admin_index(admin_client, operations_data):
    # The landing page (admin:index) is the status board; the admin's list of pages is one click away.
    assert 'id="status-table"' in _page(admin_client.get(reverse("admin:index")))
    response = admin_client.get(reverse("harness-apps"))

    assert response.status_code == 200
    page = _page(response)
    for label in ("Trigger rules", "Dead letters", "Decisions", "Leases"):
        assert label in page, label
