"""The bundled tzdata package is the zone database, whatever the host's zone files say (invariant 4)."""

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import tzdata

from tests.support.processes import ROOT

PROBE = """
import os, zoneinfo
from datetime import UTC, datetime
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")
import django
django.setup()
from tasks.rules import schedule
spec = schedule.ScheduleSpec(kind="cron", timezone="America/Vancouver", cron="0 9 * * *")
print(zoneinfo.TZPATH, schedule.next_slot(spec, datetime(2026, 12, 1, tzinfo=UTC)).isoformat())
"""


def test_it_uses_the_bundled_tzdata_even_when_the_host_zone_files_differ(tmp_path):
    # A host zone database that disagrees: its America/Vancouver is really UTC+5.
    wrong = tmp_path / "zoneinfo" / "America"
    wrong.mkdir(parents=True)
    source = Path(tzdata.__file__).parent / "zoneinfo" / "Etc" / "GMT-5"
    (wrong / "Vancouver").write_bytes(source.read_bytes())
    env = {"PYTHONTZPATH": str(tmp_path / "zoneinfo"), "SECRET_KEY": os.environ["SECRET_KEY"], "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    # 09:00 Vancouver by the bundled file (the host's wrong file would say 04:00Z).
    with (Path(tzdata.__file__).parent / "zoneinfo" / "America" / "Vancouver").open("rb") as f:
        bundled = ZoneInfo.from_file(f)
    expected = datetime(2026, 12, 1, 9, tzinfo=bundled).astimezone(UTC)
    assert expected.hour != 4
    assert out == ["()", expected.isoformat()]


def test_the_probe_would_see_the_host_files_without_the_reset(tmp_path):
    """The test above can fail: without harness_site's reset, PYTHONTZPATH wins."""
    wrong = tmp_path / "zoneinfo" / "America"
    wrong.mkdir(parents=True)
    (wrong / "Vancouver").write_bytes((Path(tzdata.__file__).parent / "zoneinfo" / "Etc" / "GMT-5").read_bytes())
    code = (
        "import zoneinfo; from datetime import datetime, UTC; "
        "print(datetime(2026, 12, 1, 17, tzinfo=UTC).astimezone(zoneinfo.ZoneInfo('America/Vancouver')).hour)"
    )
    env = {"PYTHONTZPATH": str(tmp_path / "zoneinfo"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "22"  # 17:00Z read through the host's UTC+5 file
