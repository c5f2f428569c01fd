"""/healthz stays truthful through a worker restart and a broker restart (issue 31): sampled every
0.5 s, it answers 503 only while something is actually not working.

* A worker killed under its runner (harness_site/keepalive.py): the new process reports as it starts,
  so the dead pid counts as restarted before it could count as "not responding".
* Redis stopped and started again (a second redis-server of the test's own, never the machine's):
  503 while it is down and until a worker consumes again, and then only for the broker or the slots
  it delayed; never a worker "not responding" because its heartbeat waited for a queue probe (with
  Redis down each probe took 6 s, and the heartbeat probed each queue first).
"""

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from harness_site.celery import app
from runs.models import TaskRun, WorkerHeartbeat
from tests.e2e.helpers import START_TIMEOUT, claim, make_rule, wait_heartbeat, wait_succeeded, wait_ticking
from tests.support.processes import wait_for
from tests.support.servers import free_port

pytestmark = [pytest.mark.e2e]

SAMPLE_EVERY = 0.5
FAST = {"HARNESS_WORKER_HEARTBEAT_SECONDS": "0.5"}
# Longer than a worker may stay silent (10 s): the heartbeat used to probe each queue first, 6 s per
# queue with Redis down, and went silent for the whole outage.
OUTAGE = 12


@dataclass(frozen=True)
class Sample:
    at: float  # time.monotonic() when asked
    status: int
    reason: str
    detail: str
    answered: float = 0.0  # time.monotonic() when answered: an outage may begin while a request is out


class HealthSampler(threading.Thread):
    """GET /healthz every SAMPLE_EVERY seconds with a staff session (the details say why)."""

    def __init__(self):
        super().__init__(daemon=True)
        user = get_user_model().objects.create_user("oncall", password="pw-123456789", is_staff=True)
        self.client = Client()
        self.client.force_login(user)
        self.samples: list[Sample] = []
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                at = time.monotonic()
                response = self.client.get("/healthz")
                body = response.json()
                self.samples.append(
                    Sample(at, response.status_code, body["reason"], body.get("detail", ""), time.monotonic())
                )
                self._halt.wait(max(0.0, SAMPLE_EVERY - (time.monotonic() - at)))
        finally:
            connection.close()

    def stop(self) -> list[Sample]:
        self._halt.set()
        self.join(30)
        return self.samples


def failing(samples: list[Sample]) -> list[Sample]:
    return [s for s in samples if s.status != 200]


def test_healthz_says_ok_through_a_worker_killed_and_started_again_by_its_runner(harness):
    argv = [sys.executable, "-m", "harness_site.keepalive", sys.executable, "-m", "celery", "-A", "harness_site"]
    argv += ["worker", "--loglevel=INFO", "--concurrency=1", "--hostname=w1@%h", "--without-gossip"]
    argv += ["--without-mingle", "--without-heartbeat"]
    runner = harness._start("w1-keepalive", argv, FAST)
    harness.beat()
    wait_ticking()
    first = wait_for(lambda: WorkerHeartbeat.objects.filter(pool="prefork").first(), timeout=START_TIMEOUT, what="w1")
    wait_succeeded([claim("before")], timeout=30, what="a run before the kill")
    sampler = HealthSampler()
    sampler.start()
    try:
        time.sleep(2)
        os.killpg(first.pid, signal.SIGKILL)  # the worker and its pool; its runner lives on
        killed = time.monotonic()
        second = wait_for(
            lambda: WorkerHeartbeat.objects.filter(hostname=first.hostname).exclude(pid=first.pid).first(),
            timeout=START_TIMEOUT,
            interval=0.02,
            what="the worker started again by its runner",
        )
        reported = time.monotonic() - killed
        wait_succeeded([claim("after")], timeout=60, what="a run sent after the restart")
        time.sleep(2)
    finally:
        samples = sampler.stop()
        with_pid = WorkerHeartbeat.objects.filter(hostname=first.hostname).values_list("pid", flat=True)
        for pid in with_pid:  # the runner's child has a session of its own: end it with the runner
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    print(
        f"\n[e2e healthz restart] the new worker (pid {second.pid}) reported {reported:.1f}s after kill -9; "
        f"{len(samples)} samples, {len(failing(samples))} not 200"
    )
    assert runner.popen.poll() is None
    # Its first report came before its pool: the line logged once that report was written stands
    # before the process's "ready" line. (The row itself cannot show it: the ready report replaces
    # the first one some 40 ms later, too soon for a poll to be sure to see it.)
    restarted = runner.log().split(f"worker {second.name} reported as started", 1)
    assert len(restarted) == 2, "the new process did not report as it started"
    before_report, after_report = restarted
    since_kill = before_report.rsplit("exited (-9)", 1)[-1]  # the new process's lines before its report
    assert " ready." not in since_kill and " ready." in after_report
    assert len(samples) >= 8
    assert not failing(samples), failing(samples)


@pytest.fixture
def own_redis(tmp_path):
    """A redis-server of this test's own on a free port, to stop and start at will."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    server = RedisServer(binary, port, tmp_path)
    server.start()
    yield server
    server.stop()


class RedisServer:
    def __init__(self, binary: str, port: int, folder):
        self.binary, self.port, self.folder = binary, port, folder
        self.url = f"redis://127.0.0.1:{port}/0"
        self.popen: subprocess.Popen | None = None

    def start(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        with (self.folder / "redis.log").open("ab") as log:
            self.popen = subprocess.Popen([*args, "--dir", str(self.folder)], stdout=log, stderr=subprocess.STDOUT)
        wait_for(self.answers, timeout=10, what=f"redis-server on port {self.port}")

    def answers(self) -> bool:
        import redis

        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            self.popen.wait(10)
        self.popen = None


@pytest.mark.one_pass("postgresql")  # Redis is the production broker; the embedded default has none
def test_healthz_fails_only_while_redis_is_down_and_no_heartbeat_waits_for_it(harness, own_redis, monkeypatch):
    broker = {"CELERY_BROKER_URL": own_redis.url, **FAST}
    # This process's /healthz looks at the same broker as the workers (configuration, not a mock).
    monkeypatch.setitem(app.conf, "CELERY_BROKER_URL", own_redis.url)
    monkeypatch.setenv("CELERY_BROKER_URL", own_redis.url)
    monkeypatch.setitem(app.conf, "CELERY_BROKER_TRANSPORT", None)
    monkeypatch.setitem(app.conf, "CELERY_BROKER_TRANSPORT_OPTIONS", {})
    worker = harness.worker("w1", concurrency=2, extra_env=broker)
    harness.beat(extra_env=broker)
    make_rule("every-second", kind="interval", interval_seconds=1, skill="harness.noop")  # work all along
    wait_ticking()
    wait_heartbeat(worker)
    wait_for(lambda: TaskRun.objects.filter(state=TaskRun.State.SUCCEEDED).exists(), timeout=60, what="a run")
    sampler = HealthSampler()
    sampler.start()
    try:
        time.sleep(2)
        down = time.monotonic()
        own_redis.stop()
        time.sleep(OUTAGE)
        own_redis.start()
        up = time.monotonic()
        since = TaskRun.objects.order_by("-id").values_list("id", flat=True).first()
        wait_for(
            lambda: TaskRun.objects.filter(id__gt=since, state=TaskRun.State.SUCCEEDED).exists(),
            timeout=60,
            what="a run started after Redis came back to succeed",
        )
        consuming = time.monotonic()
        time.sleep(3)
    finally:
        samples = sampler.stop()
    bad = failing(samples)
    print(
        f"\n[e2e healthz redis] {len(samples)} samples; down {up - down:.1f}s, consuming again "
        f"{consuming - up:.1f}s after; not 200: {[(round(s.at - down, 1), s.reason) for s in bad]}"
    )
    # Down, and until a worker consumes again (Celery reconnects on a backoff of 2, 4, 6 s), the
    # broker is unreachable, or slots wait beyond their grace: true. A worker's heartbeat is never late.
    assert all(
        s.reason in ("broker_unreachable", "slot_overdue") and down <= s.answered and s.at <= consuming for s in bad
    ), bad
    assert [s for s in samples if s.at < down] and [s for s in samples if s.at > consuming]
