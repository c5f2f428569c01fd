"""The operator command: `manage.py harness rules|runs|records|fire|demo|admin-login`."""

import io
import json
import stat
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.utils.dateparse import parse_datetime

from runs.models import TaskRun
from tasks import services
from tasks.management.commands import harness as harness_command
from tasks.models import DiagnosticRecord, TriggerRule
from tasks.triggers.operator import rule_fire
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 8, 15, 5, tzinfo=UTC)
DEMO_NAMES = sorted(r["name"] for r in json.loads(harness_command.DEMO_RULES.read_text())["rules"])


def harness(*args: str) -> str:
    out = io.StringIO()
    call_command("harness", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def _rule_data(name: str, **over) -> dict:
    data = {
        "name": name,
        "reason": f"test rule {name}",
        "kind": "cron",
        "cron": "0 9 * * *",
        "timezone": "Asia/Shanghai",
        "dedupe_key_template": "{rule}:{business_date}",
        "skill": "harness.noop",
    }
    data.update(over)
    return data


def _make_rule(name: str = "report", **over) -> TriggerRule:
    return make_rule(**_rule_data(name, **over))


def _write(tmp_path, *rules: dict):
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"version": 1, "rules": list(rules)}))
    return path


def test_it_imports_rules_from_a_file(tmp_path):
    path = _write(tmp_path, _rule_data("a"), _rule_data("b", kind="interval", cron="", interval_seconds=60))

    out = harness("rules", "import", str(path))

    assert out.strip() == "created 2, updated 0, unchanged 0"
    assert list(TriggerRule.objects.values_list("name", flat=True)) == ["a", "b"]

    again = harness("rules", "import", str(path))
    assert again.strip() == "created 0, updated 0, unchanged 2"


def test_it_rejects_a_bad_file_listing_rule_and_field_and_saves_nothing(tmp_path):
    existing = _make_rule("existing")
    path = _write(
        tmp_path,
        _rule_data("existing", cron="30 7 * * *"),
        _rule_data("good"),
        _rule_data("broken", cron="61 * * * *"),
        _rule_data("lost", timezone="Mars/Olympus"),
    )

    with pytest.raises(CommandError) as exc:
        harness("rules", "import", str(path))

    message = str(exc.value)
    assert "nothing was saved" in message
    assert "rule 'broken' field cron:" in message
    assert "rule 'lost' field timezone:" in message
    assert list(TriggerRule.objects.values_list("name", flat=True)) == ["existing"]
    stored = TriggerRule.objects.get(name="existing")
    assert (stored.cron, stored.version) == (existing.cron, existing.version)


def test_it_rejects_a_file_that_cannot_be_read(tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        harness("rules", "import", str(tmp_path / "missing.json"))


def test_it_exports_rules_as_json():
    _make_rule("b-rule", params={"channel": "email"}, dedupe_key_template="{rule}:{channel}:{slot}")
    _make_rule("a-rule", kind="once", cron="", run_at=datetime(2030, 1, 1, 1, 0, tzinfo=UTC))

    doc = json.loads(harness("rules", "export"))

    assert doc["version"] == 1
    assert [r["name"] for r in doc["rules"]] == ["a-rule", "b-rule"]
    assert doc["rules"][0]["run_at"] == "2030-01-01T01:00:00+00:00"
    assert doc["rules"][1]["params"] == {"channel": "email"}
    assert set(doc["rules"][1]) == set(services.EXPORT_FIELDS)


def test_it_exports_to_a_file_that_imports_back(tmp_path):
    _make_rule("a-rule")
    target = tmp_path / "out.json"

    assert harness("rules", "export", "--output", str(target)) == ""
    TriggerRule.objects.all().delete()
    out = harness("rules", "import", str(target))

    assert out.strip() == "created 1, updated 0, unchanged 0"
    assert TriggerRule.objects.get(name="a-rule").cron == "0 9 * * *"


def test_it_lists_runs_as_json():
    rule = _make_rule("report")
    first = rule_fire(rule=rule, actor="alice", now=NOW, slot=NOW - timedelta(days=1)).run
    second = rule_fire(rule=rule, actor="bob", now=NOW + timedelta(seconds=1)).run
    other = _make_rule("other")
    rule_fire(rule=other, actor="carol", now=NOW - timedelta(hours=1))

    rows = json.loads(harness("runs", "--json", "--rule", "report"))

    assert [r["id"] for r in rows] == [second.id, first.id]  # newest trigger first
    row = rows[1]
    for field in ("id", "biz_key", "state", "slot", "trigger_at", "start_at", "finish_at", "attempts", "source"):
        assert field in row, field
    assert row["biz_key"] == first.biz_key == f"rule/{rule.pk}/manual/report:2026-03-01"
    assert row["state"] == "pending"
    assert row["source"] == "manual"
    assert row["triggered_by"] == "alice"
    assert row["attempts"] == 0
    assert parse_datetime(row["slot"]) == NOW - timedelta(days=1)
    assert parse_datetime(row["trigger_at"]) == NOW
    assert row["start_at"] is None and row["finish_at"] is None

    assert len(json.loads(harness("runs", "--json"))) == 3
    assert len(json.loads(harness("runs", "--json", "--limit", "1"))) == 1


def test_it_lists_runs_as_text():
    run = rule_fire(rule=_make_rule("report"), actor="alice", now=NOW).run

    out = harness("runs")

    assert str(run.id) in out and "pending" in out and run.biz_key in out


def test_it_lists_diagnostic_records_as_json():
    for n, rule_name in enumerate(["heartbeat", "other", "heartbeat"], start=1):
        DiagnosticRecord.objects.create(
            run_id=100 + n,
            biz_key=f"{rule_name}:{n}",
            rule_name=rule_name,
            slot=NOW,
            fence=n,
            attempt=1,
            worker="w1",
            created_at=NOW,
        )

    rows = json.loads(harness("records", "--json"))

    assert [r["biz_key"] for r in rows] == ["heartbeat:1", "other:2", "heartbeat:3"]
    assert rows[0]["run_id"] == 101
    assert rows[0]["fence"] == 1
    assert parse_datetime(rows[0]["slot"]) == NOW
    only = json.loads(harness("records", "--json", "--rule", "heartbeat"))
    assert [r["biz_key"] for r in only] == ["heartbeat:1", "heartbeat:3"]


def test_it_fires_a_rule_once_per_minute_and_counts_the_second_as_dedupe(monkeypatch):
    rule = _make_rule("report", dedupe_key_template="{rule}:{slot}")
    clock = iter([NOW.replace(second=1), NOW.replace(second=59)])
    monkeypatch.setattr(harness_command, "timezone", SimpleNamespace(now=lambda: next(clock)))

    first = harness("fire", "report", "--actor", "alice")
    second = harness("fire", "report", "--actor", "alice")

    run = TaskRun.objects.get()
    assert first.strip() == f"run {run.id} created: {run.biz_key}"
    assert second.startswith(f"run {run.id} ")
    assert "dedupe" in second
    assert run.dedupe_hits == 1
    assert run.source == TaskRun.Source.MANUAL
    assert run.triggered_by == "alice"
    assert run.slot == NOW.replace(second=0)
    assert run.rule_id == rule.id


def test_it_fires_a_given_slot():
    _make_rule("report")

    out = harness("fire", "report", "--slot", "2026-12-01T09:00:00+08:00")

    run = TaskRun.objects.get()
    assert run.biz_key == f"rule/{run.rule_id}/manual/report:2026-12-01"
    assert run.slot == datetime(2026, 12, 1, 1, 0, tzinfo=UTC)
    assert run.triggered_by == "cli"
    assert "created" in out


def test_it_refuses_a_slot_without_offset():
    _make_rule("report")

    with pytest.raises(CommandError, match="offset"):
        harness("fire", "report", "--slot", "2026-12-01T09:00:00")

    assert not TaskRun.objects.exists()


def test_it_refuses_to_fire_an_unknown_rule():
    with pytest.raises(CommandError, match="no rule named 'nope'"):
        harness("fire", "nope")

    assert not TaskRun.objects.exists()


def test_it_installs_the_demo_rules_idempotently():
    first = harness("demo")
    versions = dict(TriggerRule.objects.values_list("name", "version"))
    second = harness("demo")

    n = len(DEMO_NAMES)
    assert n >= 4
    assert first.strip() == f"created {n}, updated 0, unchanged 0"
    assert second.strip() == f"created 0, updated 0, unchanged {n}"
    assert sorted(versions) == DEMO_NAMES
    assert dict(TriggerRule.objects.values_list("name", "version")) == versions == dict.fromkeys(DEMO_NAMES, 1)
    assert all(r.next_fire_at is not None for r in TriggerRule.objects.all())


def test_it_creates_the_admin_user_once(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    users = get_user_model().objects

    first = harness("admin-login")
    second = harness("admin-login")

    admin = users.get(username="admin")
    assert users.count() == 1
    assert admin.is_superuser and admin.is_staff
    secret = tmp_path / "admin-password.txt"
    password = secret.read_text().strip()
    assert admin.check_password(password)
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert f"admin / {password}" in first
    assert second == first
