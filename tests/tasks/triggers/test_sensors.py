"""The file-arrival sensor on a real folder and the real database."""

import io
import os
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from runs.models import TaskRun
from tasks.models import EventDelivery, EventMetric, TriggerSource
from tasks.triggers.sensors import sensor_scan, sensors_scan_all
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


@pytest.fixture
def inbox(tmp_path):
    folder = tmp_path / "inbox"
    folder.mkdir()
    return folder


@pytest.fixture
def source(inbox):
    rule = make_rule("ingest", kind="event", dedupe_key_template="{rule}:{object_id}:{version}")
    return TriggerSource.objects.create(
        name="inbox",
        kind="file",
        identity="svc:sftp-drop",
        rule=rule,
        watch_dir=str(inbox),
        settle_seconds=5,
        reference_fields=["file.path"],
        snapshot_fields=["file.size"],
    )


def write(folder, name, data=b"a,b\n1,2\n", *, age=60, base=NOW):
    """A file whose mtime is `age` seconds before `base` (the sensor compares against the `now` it is given)."""
    path = folder / name
    path.write_bytes(data)
    at = (base - timedelta(seconds=age)).timestamp()
    os.utime(path, (at, at))
    return path


def test_it_ignores_half_written_temp_names(source, inbox):
    write(inbox, "report.csv.tmp")
    write(inbox, "report.csv.part")
    write(inbox, ".report.csv")
    write(inbox, ".~lock.report.csv#")

    result = sensor_scan(source=source, now=NOW)

    assert (result.ready, result.accepted) == (0, 0)
    assert not TaskRun.objects.exists()


def test_it_runs_a_final_file_once_with_its_identity_in_the_key(source, inbox):
    path = write(inbox, "report.csv")

    first = sensor_scan(source=source, now=NOW)
    second = sensor_scan(source=source, now=NOW + timedelta(seconds=30))

    assert (first.accepted, second.accepted, second.known) == (1, 0, 1)
    run = TaskRun.objects.get()
    stat = path.stat()
    assert run.biz_key == f"rule/{run.rule_id}/event/ingest:report.csv:{stat.st_size}-{stat.st_mtime_ns // 1000}"
    assert (run.source, run.triggered_by) == ("event", "svc:sftp-drop")
    assert run.payload["event"]["refs"] == {"file.path": str(path)}
    assert run.payload["event"]["snapshot"] == {"file.size": stat.st_size}
    assert run.payload["event"]["channel"] == "file"
    assert EventDelivery.objects.count() == 1 and run.dedupe_hits == 0


def test_it_waits_for_a_final_name_to_settle(source, inbox):
    write(inbox, "growing.csv", age=1)
    assert sensor_scan(source=source, now=NOW).accepted == 0
    assert sensor_scan(source=source, now=NOW + timedelta(seconds=5)).accepted == 1


def test_it_takes_a_data_file_when_its_ready_marker_appears(source, inbox):
    TriggerSource.objects.filter(pk=source.pk).update(require_ready_marker=True)
    source.refresh_from_db()
    write(inbox, "batch-001.parquet", age=0)
    write(inbox, "old-unmarked.csv", age=3600)

    assert sensor_scan(source=source, now=NOW).accepted == 0  # no marker yet: nothing, however old
    write(inbox, "batch-001.parquet.ready", b"", age=0)
    result = sensor_scan(source=source, now=NOW)

    assert result.accepted == 1
    assert TaskRun.objects.get().payload["event"]["criteria"]["object_id"] == "batch-001.parquet"


def test_it_runs_a_rewritten_file_again(source, inbox):
    write(inbox, "daily.csv", b"v1\n", age=600)
    sensor_scan(source=source, now=NOW)
    write(inbox, "daily.csv", b"v2 longer\n", age=60)
    sensor_scan(source=source, now=NOW)
    assert TaskRun.objects.count() == 2


def test_it_reports_a_missing_folder_without_failing_other_sources(source, inbox, tmp_path):
    TriggerSource.objects.create(
        name="gone", kind="file", identity="svc:x", rule=source.rule, watch_dir=str(tmp_path / "missing")
    )
    write(inbox, "a.csv")

    result = sensors_scan_all(now=NOW)

    assert (result.sources, result.accepted) == (2, 1)
    assert len(result.errors) == 1 and "gone: cannot list" in result.errors[0]


def test_it_scans_from_the_management_command(source, inbox, capsys):
    write(inbox, "a.csv", age=3600, base=datetime.now(UTC))  # the command reads the real clock
    call_command("harness", "sensors", "scan")
    call_command("harness", "sensors", "scan")
    out = capsys.readouterr().out
    assert "1 new run(s)" in out and "1 already taken" in out
    assert TaskRun.objects.count() == 1


def test_it_installs_the_sensor_beat_entry_with_the_migrations():
    from django_celery_beat.models import PeriodicTask

    entry = PeriodicTask.objects.get(name="harness: file sensors")
    assert (entry.task, entry.enabled) == ("tasks.sensors_scan", True)


def write_bytes_name(folder, name: bytes, *, age=60):
    """A file whose name is raw bytes (not UTF-8): what a Latin-1 producer or a broken unzip leaves."""
    path = os.path.join(os.fsencode(folder), name)
    with open(path, "wb") as f:
        f.write(b"x\n")
    at = (NOW - timedelta(seconds=age)).timestamp()
    os.utime(path, (at, at))
    return path


def test_a_non_utf8_file_name_is_skipped_and_reported_and_every_other_file_and_source_continues(
    source, inbox, tmp_path
):
    write_bytes_name(inbox, b"caf\xe9.csv")  # Latin-1 "café.csv"
    write(inbox, "good.csv")
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    write(other_dir, "second.csv")
    TriggerSource.objects.create(
        name="other", kind="file", identity="svc:other", rule=source.rule, watch_dir=str(other_dir), settle_seconds=5
    )

    result = sensors_scan_all(now=NOW)

    assert result.accepted == 2
    names = sorted(r.payload["event"]["criteria"]["object_id"] for r in TaskRun.objects.all())
    assert names == ["good.csv", "second.csv"]
    assert any("not UTF-8" in e and "caf\\xe9.csv" in e for e in result.errors), result.errors
    assert EventMetric.objects.get(source_name="inbox", outcome="bad_file_name").count == 1
    # The command reports it and carries on.
    out = io.StringIO()
    call_command("harness", "sensors", "scan", stdout=out, stderr=out)
    assert "not UTF-8" in out.getvalue()
