"""Before the prefork pool forks its first process, a worker freezes what its start-up made
(harness_site/celery.py), so Celery's gc.collect() before each fork and the children's collections
leave those objects alone. Only once: what the parent makes later may be garbage."""

import gc

import pytest
from celery.signals import worker_before_create_process

import harness_site.celery  # noqa: F401 - connects the worker's signal handlers


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_the_first_fork_freezes_the_start_up_objects_and_a_later_one_nothing_more(unfrozen):
    assert gc.get_freeze_count() == 0
    worker_before_create_process.send(sender=None)
    frozen = gc.get_freeze_count()
    assert frozen > 0
    made_later = [[n] for n in range(1000)]  # containers: tracked by the collector
    worker_before_create_process.send(sender=None)  # the pool replaces a process that died
    assert gc.get_freeze_count() == frozen
    assert gc.is_tracked(made_later[0])
