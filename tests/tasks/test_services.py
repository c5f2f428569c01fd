"""Rule import/export (tasks.services): upsert by name, idempotent, all or nothing.

A rejected file names the rule and the field at fault and leaves the database exactly as it was,
even when other rules in the same file are good.
"""

import json
import re
from zoneinfo import ZoneInfo

import pytest

from tasks.models import TriggerRule
from tasks.services import RuleImportError, rule_export, rule_import
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db


def _rule(name: str, **over) -> dict:
    data = {
        "name": name,
        "reason": f"test rule {name}",
        "kind": "cron",
        "cron": "0 9 * * *",
        "timezone": "Europe/Berlin",
        "dedupe_key_template": "{rule}:{business_date}",
        "skill": "harness.noop",
        "params": {},
    }
    data.update(over)
    return data


def _file(*rules: dict) -> str:
    return json.dumps({"version": 1, "rules": list(rules)})


def _snapshot() -> list[dict]:
    """Everything an import could change, including derived state."""
    return list(
        TriggerRule.objects.order_by("name").values(
            "id", "name", "reason", "cron", "timezone", "params", "version", "next_fire_at", "updated_at"
        )
    )


def _names() -> list[str]:
    return list(TriggerRule.objects.order_by("name").values_list("name", flat=True))


def test_it_creates_rules_from_a_file():
    result = rule_import(
        _file(
            _rule("daily-report", params={"channel": "email"}, dedupe_key_template="report:{business_date}:{channel}"),
            _rule("heartbeat", kind="interval", cron="", interval_seconds=30, timezone="UTC"),
        )
    )

    assert sorted(result.created) == ["daily-report", "heartbeat"]
    assert result.updated == [] and result.unchanged == []
    report = TriggerRule.objects.get(name="daily-report")
    assert report.cron == "0 9 * * *"
    assert report.timezone == "Europe/Berlin"
    assert report.params == {"channel": "email"}
    assert report.version == 1
    assert report.next_fire_at is not None
    heartbeat = TriggerRule.objects.get(name="heartbeat")
    assert heartbeat.kind == TriggerRule.Kind.INTERVAL
    assert heartbeat.interval_seconds == 30


def test_it_accepts_a_bare_list_of_rules():
    result = rule_import(json.dumps([_rule("bare")]))

    assert result.created == ["bare"]
    assert _names() == ["bare"]


def test_it_is_idempotent_when_the_same_file_is_imported_again():
    text = _file(_rule("a"), _rule("b", kind="interval", cron="", interval_seconds=60, backoff_base_seconds=2))
    rule_import(text)
    before = _snapshot()

    result = rule_import(text)

    assert result.created == [] and result.updated == []
    assert sorted(result.unchanged) == ["a", "b"]
    # Not even saved: the version and updated_at are exactly as they were.
    assert _snapshot() == before
    assert {r["version"] for r in before} == {1}


def test_it_updates_a_changed_rule_and_bumps_its_version():
    rule_import(_file(_rule("a"), _rule("b")))
    a_before = TriggerRule.objects.get(name="a")
    b_before = TriggerRule.objects.get(name="b")

    result = rule_import(_file(_rule("a", cron="30 18 * * *"), _rule("b")))

    assert result.updated == ["a"]
    assert result.unchanged == ["b"]
    assert result.created == []
    a = TriggerRule.objects.get(name="a")
    assert a.pk == a_before.pk
    assert a.cron == "30 18 * * *"
    assert a.version == a_before.version + 1
    assert a.next_fire_at != a_before.next_fire_at
    assert a.next_fire_at.astimezone(ZoneInfo("Europe/Berlin")).strftime("%H:%M") == "18:30"
    b = TriggerRule.objects.get(name="b")
    assert (b.version, b.updated_at) == (b_before.version, b_before.updated_at)


def test_it_bumps_the_version_for_a_changed_non_schedule_field():
    rule_import(_file(_rule("a")))

    result = rule_import(_file(_rule("a", reason="a better reason", max_attempts=7)))

    assert result.updated == ["a"]
    a = TriggerRule.objects.get(name="a")
    assert (a.reason, a.max_attempts, a.version) == ("a better reason", 7, 2)


def test_it_leaves_rules_absent_from_the_file_alone():
    rule_import(_file(_rule("keep"), _rule("other")))
    keep_before = _snapshot()[0]

    rule_import(_file(_rule("other", reason="changed")))

    assert _names() == ["keep", "other"]
    assert _snapshot()[0] == keep_before


def test_it_round_trips_export_and_import():
    rule_import(
        _file(
            _rule("cron-rule", params={"channel": "sms"}, dedupe_key_template="{rule}:{channel}:{slot}"),
            _rule("interval-rule", kind="interval", cron="", interval_seconds=45, timezone="UTC", catchup="latest"),
            _rule(
                "once-rule",
                kind="once",
                cron="",
                run_at="2030-03-31T02:30:00+02:00",
                timezone="Europe/Berlin",
                jitter_min=0.2,
                jitter_max=0.9,
                dst_gap="skip",
                dst_repeat="both",
            ),
        )
    )
    exported = rule_export()
    assert [r["name"] for r in exported["rules"]] == ["cron-rule", "interval-rule", "once-rule"]
    assert exported["rules"][2]["run_at"] == "2030-03-31T00:30:00+00:00"
    text = json.dumps(exported)

    # Into the same database: nothing changes.
    same = rule_import(text)
    assert sorted(same.unchanged) == ["cron-rule", "interval-rule", "once-rule"]

    # Into an empty database: the same rules come back.
    TriggerRule.objects.all().delete()
    again = rule_import(text)
    assert sorted(again.created) == ["cron-rule", "interval-rule", "once-rule"]
    assert rule_export() == exported


BAD_RULES = [
    pytest.param(_rule("bad", cron="61 * * * *"), "cron", id="cron-minute-out-of-range"),
    pytest.param(_rule("bad", cron="0 0 9 * * *"), "cron", id="cron-six-fields"),
    pytest.param(_rule("bad", cron="@daily"), "cron", id="cron-macro"),
    pytest.param(_rule("bad", timezone="Mars/Olympus"), "timezone", id="unknown-timezone"),
    pytest.param(_rule("bad", timezone="localtime"), "timezone", id="host-timezone"),
    pytest.param(_rule("bad", dedupe_key_template="{rule}:{channel}"), "dedupe_key_template", id="unknown-placeholder"),
    pytest.param(_rule("bad", dedupe_key_template="static-key"), "dedupe_key_template", id="template-no-placeholder"),
    pytest.param(_rule("bad", params=["channel", "email"]), "params", id="params-a-list"),
    pytest.param(_rule("bad", params="channel=email"), "params", id="params-a-string"),
    pytest.param(_rule("bad", colour="blue"), "colour", id="unknown-field"),
    pytest.param({k: v for k, v in _rule("bad").items() if k != "skill"}, "skill", id="missing-skill"),
    pytest.param({k: v for k, v in _rule("bad").items() if k != "timezone"}, "timezone", id="missing-timezone"),
    pytest.param(_rule("bad", reason="   "), "reason", id="blank-reason"),
    pytest.param(
        _rule("bad", kind="once", cron="", run_at="2030-12-01T09:00:00"), "run_at", id="run-at-without-offset"
    ),
    pytest.param(_rule("bad", kind="once", cron="", run_at="next tuesday"), "run_at", id="run-at-not-a-date"),
    pytest.param(_rule("bad", kind="interval", cron=""), "interval_seconds", id="interval-without-seconds"),
    pytest.param(_rule("bad", skill="harness.nope"), "skill", id="unknown-skill"),
    pytest.param(_rule("bad", jitter_min=2.0, jitter_max=1.0), "jitter_max", id="jitter-range"),
    pytest.param(_rule("bad", kind="hourly"), "kind", id="unknown-kind"),
    pytest.param(_rule("bad", max_attempts=0), "max_attempts", id="zero-attempts"),
    pytest.param(_rule("Bad Name!"), "name", id="name-not-a-slug"),
    # Wrong JSON types must be named, not crash the import or be coerced silently.
    pytest.param(_rule("bad", dedupe_key_template=None), "dedupe_key_template", id="template-null"),
    pytest.param(_rule("bad", jitter_min="low"), "jitter_min", id="jitter-a-string"),
    pytest.param(
        _rule("bad", kind="interval", cron="", interval_seconds=1.5), "interval_seconds", id="interval-a-fraction"
    ),
    pytest.param(_rule("bad", reason=["a", "list"]), "reason", id="reason-a-list"),
    pytest.param(_rule("bad", backoff_base_seconds=float("nan")), "backoff_base_seconds", id="backoff-nan"),
    pytest.param(_rule("bad", dst_gap="sometimes"), "dst_gap", id="unknown-dst-gap"),
    pytest.param(
        _rule("bad", kind="once", cron="", run_at="9999-12-31T23:59:00-05:00"), "run_at", id="run-at-beyond-year-9999"
    ),
    pytest.param(
        _rule("bad", kind="interval", cron="", interval_seconds=10**12), "interval_seconds", id="interval-too-long"
    ),
]


def _error_for(errors: list[str], rule: str, field: str) -> str:
    """The error line naming both the rule and the field; fails the test when there is none."""
    matches = [e for e in errors if rule in e and re.search(rf"\b{re.escape(field)}\b", e)]
    assert matches, f"no error names rule {rule} and field {field}: {errors}"
    return matches[0]


@pytest.mark.parametrize(("bad", "field"), BAD_RULES)
def test_it_rejects_a_file_with_a_bad_rule_whole(bad, field):
    rule_import(_file(_rule("existing"), _rule("untouched")))
    before = _snapshot()
    text = _file(
        _rule("existing", cron="15 7 * * *", reason="an update that must not land"),
        _rule("brand-new"),
        bad,
    )

    with pytest.raises(RuleImportError) as exc:
        rule_import(text)

    label = repr(bad["name"]) if "name" in bad else "#3"
    _error_for(exc.value.errors, label, field)
    # Errors concern the bad rule only: the good ones are not blamed.
    assert all("existing" not in e and "brand-new" not in e for e in exc.value.errors), exc.value.errors
    assert _snapshot() == before


def test_it_names_the_rule_by_position_when_it_has_no_name():
    nameless = {k: v for k, v in _rule("x").items() if k != "name"}

    with pytest.raises(RuleImportError) as exc:
        rule_import(_file(_rule("good"), nameless))

    _error_for(exc.value.errors, "rule #2", "name")
    assert _names() == []


def test_it_reports_every_bad_rule_at_once():
    with pytest.raises(RuleImportError) as exc:
        rule_import(_file(_rule("one", cron="61 * * * *"), _rule("two", timezone="Mars/Olympus"), _rule("ok")))

    _error_for(exc.value.errors, "'one'", "cron")
    _error_for(exc.value.errors, "'two'", "timezone")
    assert _names() == []


def test_it_rejects_duplicate_names_in_one_file():
    rule_import(_file(_rule("dup")))
    before = _snapshot()

    with pytest.raises(RuleImportError) as exc:
        rule_import(_file(_rule("dup", cron="0 1 * * *"), _rule("fresh"), _rule("dup", cron="0 2 * * *")))

    line = _error_for(exc.value.errors, "'dup'", "name")
    assert "more than once" in line
    assert _snapshot() == before


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("this is not json", id="prose"),
        pytest.param('{"rules": [{"name": "a",', id="truncated"),
        pytest.param("", id="empty"),
    ],
)
def test_it_rejects_text_that_is_not_json(text):
    rule_import(_file(_rule("existing")))
    before = _snapshot()

    with pytest.raises(RuleImportError) as exc:
        rule_import(text)

    assert exc.value.errors[0].startswith("file: not valid JSON at line ")
    assert _snapshot() == before


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param('{"rules": {"name": "a"}}', "file: expected", id="rules-an-object"),
        pytest.param("42", "file: expected", id="a-number"),
        pytest.param("{}", "file: expected", id="no-rules-key"),
        pytest.param('[1, {"name": "x"}]', "rule #1: expected an object", id="rule-not-an-object"),
    ],
)
def test_it_rejects_json_of_the_wrong_shape(text, message):
    with pytest.raises(RuleImportError) as exc:
        rule_import(text)

    assert any(e.startswith(message) for e in exc.value.errors), exc.value.errors
    assert _names() == []


@pytest.mark.parametrize(
    ("literal", "field"),
    [
        pytest.param('"jitter_max": Infinity', "jitter_max", id="infinite-jitter"),
        pytest.param('"max_delay_seconds": -Infinity', "max_delay_seconds", id="minus-infinity"),
        pytest.param('"params": {"threshold": NaN}', "params", id="nan-in-params"),
    ],
)
def test_it_rejects_nan_and_infinity_naming_the_field(literal, field):
    # json.loads accepts these non-standard literals; NaN breaks the backoff maths and PostgreSQL's jsonb.
    text = _file(_rule("good"), _rule("bad")).replace('"params": {}}]', literal + "}]")
    assert literal in text

    with pytest.raises(RuleImportError) as exc:
        rule_import(text)

    _error_for(exc.value.errors, "'bad'", field)
    assert _names() == []


@pytest.mark.parametrize("field", ["dst_gap", "dst_repeat"])
def test_it_blames_the_dst_policy_field_not_the_kind(field):
    with pytest.raises(RuleImportError) as exc:
        rule_import(_file(_rule("bad", **{field: "sometimes"})))

    _error_for(exc.value.errors, "'bad'", field)
    assert not [e for e in exc.value.errors if "field kind" in e], exc.value.errors


def _editable(rule: TriggerRule) -> dict:
    return {
        f.attname: getattr(rule, f.attname)
        for f in TriggerRule._meta.concrete_fields
        if f.editable and not f.primary_key and f.attname not in ("created_at", "updated_at")
    }


def test_it_exports_every_editable_rule_field():
    rule_import(_file(_rule("a")))

    exported = rule_export()["rules"][0]

    editable = {f.name for f in TriggerRule._meta.concrete_fields if f.editable and not f.primary_key}
    missing = sorted(editable - set(exported) - {"created_at", "updated_at"})
    assert missing == [], f"an export -> import round trip silently drops {missing}"


def test_it_round_trips_guard_and_heartbeat_settings():
    make_rule(
        **_rule("guarded", catchup="all"),
        catchup_max_count=3,
        overlap=TriggerRule.Overlap.SKIP,
        weekdays="mon-fri",
        excluded_dates=["2026-12-25"],
        not_ready_policy=TriggerRule.NotReady.SKIP,
    )
    make_rule(**_rule("pulse", kind=TriggerRule.Kind.HEARTBEAT, cron="", timezone="UTC"), heartbeat_every_seconds=60)
    before = {r.name: _editable(r) for r in TriggerRule.objects.all()}
    text = json.dumps(rule_export())

    TriggerRule.objects.all().delete()
    rule_import(text)

    after = {r.name: _editable(r) for r in TriggerRule.objects.all()}
    assert after == before
