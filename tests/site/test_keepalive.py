"""The Procfile's runner (harness_site/keepalive.py): a command that exits is started again; SIGTERM
is passed on and ends both. Real processes."""

import signal
import subprocess
import sys

from tests.support.processes import ROOT, wait_for

CHILD = """
import sys, time
with open(sys.argv[1], "a") as f:
    f.write("start\\n")
time.sleep(float(sys.argv[2]))
sys.exit(70)
"""


def test_it_starts_a_command_again_when_it_exits_and_stops_it_on_sigterm(tmp_path):
    starts = tmp_path / "starts"
    starts.touch()
    runner = subprocess.Popen(
        [sys.executable, "-m", "harness_site.keepalive", sys.executable, "-c", CHILD, str(starts), "0.2"],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Exits with 70 at once, like a worker its watchdog ended: started again after 1 s, then 2 s.
        wait_for(lambda: starts.read_text().count("start") >= 2, timeout=20, what="the command started again")
        assert runner.poll() is None
    finally:
        runner.send_signal(signal.SIGTERM)
        _, stderr = runner.communicate(timeout=20)
    assert "exited (70)" in stderr
    assert runner.returncode is not None


def test_sigterm_reaches_the_running_command(tmp_path):
    starts = tmp_path / "starts"
    starts.touch()
    runner = subprocess.Popen(
        [sys.executable, "-m", "harness_site.keepalive", sys.executable, "-c", CHILD, str(starts), "60"],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: "start" in starts.read_text(), timeout=20, what="the command to start")
    runner.send_signal(signal.SIGTERM)
    runner.communicate(timeout=20)
    assert runner.returncode == 128 + signal.SIGTERM  # the command's own end, passed on
    assert starts.read_text().count("start") == 1  # not started again after a requested stop


def test_it_does_not_start_again_a_command_refused_for_its_configuration():
    """A bad setting (exit 78, EX_CONFIG: harness_site/environment.py) is not mended by starting again:
    the runner passes the status on instead of retrying every 30 s for ever."""
    runner = subprocess.run(
        [sys.executable, "-m", "harness_site.keepalive", sys.executable, "-c", "import sys; sys.exit(78)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=20,
    )

    assert runner.returncode == 78
    assert "starting it again" not in runner.stderr
