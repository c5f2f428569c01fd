"""Run a command and start it again whenever it exits: the Procfile's worker and beat lines.

    python -m harness_site.keepalive celery -A harness_site worker ...

honcho (`./harness up`) stops every process as soon as one exits, and restarts none. A worker exits
when its watchdog finds it stuck (harness_site/worker_watch.py, exit 70), or dies (kill -9, the OOM
killer); under this wrapper it is started again after a short pause (1 s, doubling up to 30 s while it
keeps dying within a minute). SIGTERM or SIGINT is passed on to the command, and the wrapper exits with
it. A command refused for a bad setting (exit 78, EX_CONFIG) is not started again: no restart mends
its configuration. In production, systemd's `Restart=always` with `RestartPreventExitStatus=78` (or any
supervisor's equivalent) does the same job.

The command runs in a process group of its own, so that pool processes it leaves behind when it dies
are ended before the next start.
"""

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

from harness_site.environment import EX_CONFIG

FIRST_PAUSE, MAX_PAUSE, HEALTHY_AFTER = 1.0, 30.0, 60.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m harness_site.keepalive COMMAND [ARG...]", file=sys.stderr)
        return 2
    stopping: list[int] = []
    child: subprocess.Popen | None = None

    def forward(signum, _frame):
        stopping.append(signum)
        if child is not None and child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    quick = 0  # exits in a row within HEALTHY_AFTER of their start
    while True:
        started = time.monotonic()
        child = subprocess.Popen(argv, start_new_session=True, preexec_fn=_die_with_parent)
        code = child.wait()
        _end_group(child.pid)  # pool processes left behind by a dead worker
        if stopping:
            return code if code >= 0 else 128 - code
        if code == EX_CONFIG:
            return code
        ran = time.monotonic() - started
        quick = 0 if ran > HEALTHY_AFTER else quick + 1
        pause = min(FIRST_PAUSE * 2 ** max(quick - 1, 0), MAX_PAUSE)
        print(
            f"keepalive: {argv[0]} exited ({code}) after {ran:.0f}s; starting it again in {pause:.0f}s",
            file=sys.stderr,
            flush=True,
        )
        deadline = time.monotonic() + pause
        while time.monotonic() < deadline and not stopping:
            time.sleep(0.1)
        if stopping:
            return 0


def _die_with_parent() -> None:
    """In the child: SIGTERM when this wrapper dies (Linux), so a killed wrapper leaves no orphan."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _end_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
