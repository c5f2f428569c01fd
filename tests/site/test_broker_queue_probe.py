"""A look into a queue (harness_site/broker.py queue_probe), on the broker this pass runs on: the
sweeper needs the messages consumers hold; a worker's heartbeat needs only the queue's age, and with
a thousand runs held, reading them all (one JSON document each) every beat costs it 50 ms of CPU."""

import time
import uuid

import pytest
from celery import current_app
from kombu import Queue

from harness_site.broker import RUN_HEADER, SENT_AT_HEADER, queue_probe


@pytest.fixture
def queue_with_one_held_and_one_waiting():
    name = f"probe-{uuid.uuid4().hex[:12]}"
    with current_app.connection_for_write() as conn:
        producer = conn.Producer()
        for run in (4242, 4243):
            producer.publish(
                {"run": run},
                routing_key=name,
                declare=[Queue(name)],
                headers={RUN_HEADER: run, SENT_AT_HEADER: time.time()},
            )
        channel = conn.default_channel
        message = channel.basic_get(name, no_ack=False)  # received and not acknowledged: held
        assert message is not None
        try:
            yield name
        finally:
            message.ack()
            channel.queue_purge(name)
            channel.queue_delete(name)


def test_the_full_look_names_the_held_run(queue_with_one_held_and_one_waiting):
    probe = queue_probe(current_app, queue_with_one_held_and_one_waiting)
    assert probe.depth == 1 and probe.oldest_age is not None
    # Held is per broker, not per queue: another test's held message may be there too.
    assert len(set(probe.held) & {4242, 4243}) == 1


def test_the_heartbeats_look_reads_the_queue_and_not_what_is_held(queue_with_one_held_and_one_waiting):
    probe = queue_probe(current_app, queue_with_one_held_and_one_waiting, held=False)
    assert probe.depth == 1 and probe.oldest_age is not None
    assert probe.held == {}
