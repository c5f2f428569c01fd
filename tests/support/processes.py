"""Start and stop real harness processes (Celery workers and beats) for end-to-end tests."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process: the same broker, and the *test* database.

    os.environ already holds this test process's own broker (tests/support/settings.py, one per
    pytest-xdist worker); the child runs the real settings module with it."""
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "harness_site.settings"
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        env["DATABASE_URL"] = f"sqlite:///{db['NAME']}"
    else:
        user = db.get("USER") or ""
        env["DATABASE_URL"] = f"postgres://{user}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"
    env.setdefault("SECRET_KEY", settings.SECRET_KEY)  # set by tests/support/settings.py; strong, as DEBUG is off
    env["PYTHONUNBUFFERED"] = "1"
    # Django's system checks at every worker and beat start (Celery's Django fixup) cost a quarter of
    # its start-up; the test command runs them once (checks in ./harness).
    env["CELERY_SKIP_CHECKS"] = "true"
    env.update(extra)
    return env


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, ...); None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def alive(fields: list[str] | None) -> bool:
    return fields is not None and fields[0] not in ("Z", "X")


class Proc:
    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path, cwd: Path = ROOT):
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("wb")
        # A process group of its own, so that stop() also ends prefork children.
        self.popen = subprocess.Popen(
            args, cwd=cwd, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.paused = False
        self.stopped = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def group_pids(self) -> list[int]:
        """Every live process of this one's group: the worker and its pool children."""
        stats = ((int(entry), proc_stat(int(entry))) for entry in os.listdir("/proc") if entry.isdigit())
        return [pid for pid, fields in stats if fields and int(fields[2]) == self.popen.pid and alive(fields)]

    def kill9(self) -> None:
        """SIGKILL the whole group: the worker and its pool children die without cleanup."""
        self.stopped = True
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.popen.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP the whole group: every process and thread freezes mid-instruction (a "GC pause")."""
        os.killpg(self.popen.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT the whole group after pause()."""
        os.killpg(self.popen.pid, signal.SIGCONT)
        self.paused = False

    def signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.popen.pid, signum)
        except ProcessLookupError:
            pass

    def reap(self, timeout: float = 10) -> None:
        self.popen.wait(timeout=timeout)
        self._log.close()

    def stop(self, timeout: float = 10) -> None:
        self.stopped = True
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
                if self.paused:  # a stopped group acts on SIGTERM only once it runs again
                    self.resume()
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
            except ProcessLookupError:
                pass
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def release_env(env: dict[str, str], checkout: Path) -> dict[str, str]:
    """The environment of a process of the release checked out at `checkout`: without the HARNESS_*
    settings its settings do not name. A release refuses a HARNESS_* name it does not know at start
    (a typo must not pass silently), so a deployment gives each release the settings it reads
    (docs/upgrading.md); granted secrets (HARNESS_SECRET_*) are a prefix every release reads."""
    if checkout.resolve() == ROOT:
        return env
    named = (checkout / "harness_site" / "settings.py").read_text(encoding="utf-8")
    return {
        k: v for k, v in env.items() if not k.startswith("HARNESS_") or k.startswith("HARNESS_SECRET_") or k in named
    }


class Harness:
    """Owns every process a test starts and stops them all at teardown."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.procs: list[Proc] = []

    def worker(
        self,
        name: str = "w1",
        *,
        concurrency: int = 2,
        extra_env: dict | None = None,
        args: tuple[str, ...] = (),
        cwd: Path = ROOT,
    ) -> Proc:
        """A Celery worker; `cwd` another checkout's root runs that checkout's code (same venv)."""
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "harness_site",
            "worker",
            "--loglevel=INFO",
            f"--concurrency={concurrency}",
            f"--hostname={name}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            *args,
        ]
        return self._start(name, argv, extra_env, cwd)

    def beat(self, name: str = "beat1", *, extra_env: dict | None = None) -> Proc:
        args = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "harness_site",
            "beat",
            "--loglevel=INFO",
            "--pidfile=",
            f"--schedule={self.log_dir / (name + '-schedule')}",
        ]
        return self._start(name, args, extra_env)

    def manage(self, *argv: str, extra_env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *argv],
            cwd=ROOT,
            env=child_env(**(extra_env or {})),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def _start(self, name: str, args: list[str], extra_env: dict | None, cwd: Path = ROOT) -> Proc:
        # Children must see every row this process wrote: no open transaction may hide them.
        connection.close()
        # The tests read beat's sends and the chores' lines (LOG_ROUTINE): a failure report shows them.
        env = release_env(child_env(**{"LOG_ROUTINE": "true", **(extra_env or {})}), cwd)
        proc = Proc(name, args, env, self.log_dir, cwd)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        """End every process at teardown: SIGKILL to every group at once, then reap them.

        The test is over and the next one starts from an empty database and broker, so a graceful
        (warm) shutdown would only cost time: measured 1-5 s per worker, up to the 10 s stop timeout
        on a loaded machine, one process after the other."""
        for proc in self.procs:
            proc.signal_group(signal.SIGKILL)
        for proc in reversed(self.procs):
            proc.reap()
        self.procs.clear()

    def crashed(self) -> list[str]:
        """Names of the processes that exited on their own (still running, or stopped by us, is fine)."""
        return [p.name for p in self.procs if p.popen.poll() is not None and not p.stopped]

    def logs(self) -> str:
        """Each process's log for a failure report, without the idle chatter of every second (empty
        ticks and sweeps, beat's sends), so that what happened fits in the tail shown."""
        return "\n".join(f"===== {p.name}\n{_eventful(p.log())[-12000:]}" for p in self.procs)


_IDLE = (
    "Sending due task",
    "'claimed': 0, 'dedupe_hits': 0, 'decisions': 0}",
    "{'expired': 0, 'dispatched': 0, 'approvals_expired': 0, 'decisions_deleted': 0}",
    "'accepted': 0, 'known': 0, 'other': 0, 'errors': [], 'pruned': 0}",
)


def _eventful(log: str) -> str:
    routine = ("Task runs.scheduler_tick[", "Task runs.sweep[", "Task tasks.sensors_scan[")
    return "\n".join(
        line
        for line in log.splitlines()
        if not any(marker in line for marker in _IDLE)
        and not (line.endswith("] received") and any(task in line for task in routine))
    )


def wait_for(predicate: Callable[[], object], *, timeout: float, interval: float = 0.2, what: str = "condition"):
    """Poll until predicate() is truthy; return its value, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
