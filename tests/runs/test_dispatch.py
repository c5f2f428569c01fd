"""Messages for runs: a queue is declared with the first message a broker connection sends to it and
not with every later one (kombu would copy and bind the queue for each, a fifth of a send), and again
after a reconnect, when a restarted broker may have lost its bindings. Real Redis, Celery's transport."""

import pytest
from django.conf import settings
from django.utils import timezone
from kombu.utils.json import loads

from harness_site.broker import RUN_HEADER
from harness_site.celery import app
from runs.engine.dispatch import run_send_on_commit
from tasks.skills.sdk import DEFAULT_QUEUE

pytestmark = [
    pytest.mark.backend,
    pytest.mark.skipif(not settings.CELERY_BROKER_URL.startswith("redis"), reason="Redis keeps its bindings"),
]


def _send(capture, *run_ids: int) -> None:
    with capture(execute=True):
        run_send_on_commit(run_ids=list(run_ids), dispatched_at=timezone.now())


def _queued(client) -> list[dict]:
    return [loads(raw) for raw in reversed(client.lrange(DEFAULT_QUEUE, 0, -1))]


@pytest.mark.django_db
def test_a_queue_is_declared_once_per_connection_and_again_after_a_reconnect(
    django_capture_on_commit_callbacks, purged_broker
):
    with app.connection_for_write() as conn:
        client = conn.default_channel.client
        binding = f"_kombu.binding.{DEFAULT_QUEUE}"
        _send(django_capture_on_commit_callbacks, 1)
        assert client.exists(binding)

        # Gone from the broker, still remembered by the connection: not declared again...
        client.delete(binding)
        _send(django_capture_on_commit_callbacks, 2)
        assert not client.exists(binding)

        # ...until the connection is made anew, as kombu does after a connection error (its collect()).
        with app.producer_or_acquire() as producer:
            producer.connection.collect()
        _send(django_capture_on_commit_callbacks, 3)
        assert client.exists(binding)
        _send(django_capture_on_commit_callbacks, 4)

        messages = _queued(client)
    # Run 2's message went to the queue the connection knew (kombu's memory, not ours, decides).
    assert [m["headers"][RUN_HEADER] for m in messages] == [1, 2, 3, 4]
    assert [m["headers"]["argsrepr"] for m in messages] == ["[1]", "[2]", "[3]", "[4]"]
    assert {m["headers"]["kwargsrepr"] for m in messages} == {"{}"}
