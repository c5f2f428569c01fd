"""A rolling upgrade with agent runs in flight (invariant 9, issue 36): agent workers of the previous
release hold runs waiting on the model provider; this release's migrations are applied while they
run; then each worker is restarted on this release, one at a time (warm shutdown, as systemd's
restart). Every run finishes exactly once: one request to the provider per run (its request log and
the run rows agree), one write, none stuck.

PostgreSQL + Redis: the production parts. A control worker and a beat stay up throughout (Procfile).
"""

from collections import Counter
from itertools import pairwise

import pytest
from django.db import connection
from django.utils import timezone

from runs.models import Attempt, TaskRun
from tasks.models import Agent
from tests.support.agent_runs import AGENT_ENV, GOOD, KEY, KEY_ENV, attempt_story, control, model_claim
from tests.support.fake_model import FakeModelServer, Reply, json_completion
from tests.support.processes import Harness, Proc, wait_for
from tests.support.upgrade import migrate_forward, migrate_to_previous_release, previous_checkout  # noqa: F401

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="production parts: the PostgreSQL pass"),
]

RUNS = 500
WORKERS = 2
WAVE = 100  # runs sent at the start, before each restart, and after them: work arrives throughout
MODEL_SECONDS = 4  # each model call waits this long, so runs are in flight at every restart
SETTLE_TIMEOUT = 400  # a ceiling for a loaded 2-core machine; the assertions are on end states


@pytest.fixture
def provider():
    server = FakeModelServer().start()
    yield server
    server.stop()


def agents_worker(harness: Harness, name: str, **where) -> Proc:
    return harness.worker(
        name,
        concurrency=RUNS,
        args=("--pool=threads", "--queues=celery,agents"),
        extra_env={**AGENT_ENV, KEY_ENV: KEY, "HARNESS_WORKER_SHUTDOWN_SECONDS": "60"},
        **where,
    )


def running() -> int:
    return TaskRun.objects.filter(state=TaskRun.State.RUNNING).count()


def test_a_rolling_upgrade_with_agent_runs_in_flight_loses_and_doubles_none(harness, provider, previous_checkout):  # noqa: F811
    try:
        migrate_to_previous_release(harness)
        agent = Agent.objects.create(
            name="writer",
            provider="openai",
            base_url=provider.base_url,
            model="gpt-test",
            api_key_env=KEY_ENV,
            read_timeout_seconds=MODEL_SECONDS * 10,
        )
        provider.respond(Reply(**{**vars(json_completion(GOOD)), "hang": MODEL_SECONDS}))
        control(harness)
        workers = [agents_worker(harness, f"agents{i}", cwd=previous_checkout) for i in range(WORKERS)]
        waves = iter(range(0, RUNS, WAVE))
        ids: list[int] = []

        def wave() -> int:
            """The next WAVE runs, sent now; then the runs in flight once some of them are."""
            start = next(waves)
            ids.extend(model_claim(agent, i, now=timezone.now()) for i in range(start, start + WAVE))
            connection.close()
            return wait_for(running, timeout=SETTLE_TIMEOUT, what="agent runs in flight")

        in_flight = [wave()]
        migrate_forward(harness)  # this release's migrations, the previous release's workers running
        for i, old in enumerate(workers):
            in_flight.append(wave())
            old.stop(timeout=120)  # warm: its runs finish their call or are handed back
            workers[i] = agents_worker(harness, f"agents{i}")
        for _ in range(RUNS // WAVE - 1 - WORKERS):
            wave()
        wait_for(
            lambda: TaskRun.objects.filter(id__in=ids, state__in=TaskRun.FINISHED).count() == RUNS,
            timeout=SETTLE_TIMEOUT,
            interval=1,
            what="every run to finish",
        )
    finally:
        migrate_forward(harness)

    states = Counter(TaskRun.objects.filter(id__in=ids).values_list("state", flat=True))
    topics = Counter(r["body"]["messages"][-1]["content"] for r in provider.requests)
    starts = sorted(Attempt.objects.filter(run_id__in=ids).values_list("started_at", flat=True))
    gap = max((b - a).total_seconds() for a, b in pairwise(starts))
    lost = RUNS - states[TaskRun.State.SUCCEEDED]
    doubled = sum(1 for n in topics.values() if n > 1)
    print(
        f"\n[e2e rolling upgrade] {RUNS} llm_json runs; in flight before migrate and each restart {in_flight}; "
        f"{WORKERS} restarts; lost {lost}; doubled {doubled}; longest gap without a start {gap:.1f}s; "
        f"provider requests {len(provider.requests)}; attempts {attempt_story(ids)}"
    )
    assert states == {TaskRun.State.SUCCEEDED: RUNS}
    assert len(topics) == RUNS and doubled == 0  # the provider's log and the run rows agree
    assert min(in_flight) > 0
