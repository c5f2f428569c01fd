"""On a Redis broker, kombu built a redis-py client for every command it sent outside the event loop:
each publish, and for every message received its record among the unacknowledged and its
acknowledgement. Each new client copies redis-py's response callbacks, a tenth of a millisecond of a
worker's main process per message. The channel now keeps one client per connection pool
(harness_site/broker.py kept_client), and a new pool, made after a connection error, gets its own."""

import uuid

import pytest
import redis
from celery import current_app
from django.conf import settings
from kombu import Queue

from harness_site.broker import RedisChannel

pytestmark = pytest.mark.skipif(
    not settings.CELERY_BROKER_URL.startswith("redis://"), reason="the Redis broker's channel (this pass has none)"
)


@pytest.fixture
def channel_and_queue():
    name = f"clients-{uuid.uuid4().hex[:12]}"
    with current_app.connection_for_write() as conn:
        channel = conn.default_channel
        try:
            yield conn, channel, name
        finally:
            channel.queue_purge(name)
            channel.queue_delete(name)


@pytest.fixture
def clients_built(monkeypatch):
    built = []
    init = redis.Redis.__init__

    def counted(self, *args, **kwargs):
        built.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "__init__", counted)
    return built


def send_take_and_ack(conn, channel, queue: str, n: int) -> None:
    producer = conn.Producer(channel)
    for i in range(n):
        producer.publish({"i": i}, routing_key=queue, declare=[Queue(queue)])
    for _ in range(n):
        message = channel.basic_get(queue, no_ack=False)  # recorded among the unacknowledged
        assert message is not None
        message.ack()


def test_the_celery_connection_to_a_redis_broker_uses_the_kept_client_channel(channel_and_queue):
    _conn, channel, _queue = channel_and_queue
    assert isinstance(channel, RedisChannel)


def test_a_hundred_messages_sent_taken_and_acknowledged_build_one_client(channel_and_queue, clients_built):
    conn, channel, queue = channel_and_queue
    send_take_and_ack(conn, channel, queue, 1)  # the channel's first command builds its client
    clients_built.clear()

    send_take_and_ack(conn, channel, queue, 100)

    assert clients_built == []
    assert channel.client.llen(queue) == 0  # all taken
    assert all(queue.encode() not in raw for raw in channel.client.hvals(channel.unacked_key))  # all acknowledged


def test_a_new_pool_after_a_connection_error_gets_a_client_of_its_own(channel_and_queue, clients_built):
    conn, channel, queue = channel_and_queue
    send_take_and_ack(conn, channel, queue, 1)
    old_pool = channel.pool
    channel._disconnect_pools()  # what kombu does when a command on the pool fails to connect

    send_take_and_ack(conn, channel, queue, 5)

    assert channel.pool is not old_pool
    synchronous = [client for client in clients_built if client.connection_pool is channel.pool]
    assert len(synchronous) == 1
