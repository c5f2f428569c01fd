"""Keyed leases with fencing tokens: compare-and-set acquire, renew and release (the run store's
keyed_lease_* operations, as runs/engine/leases.py uses them for object leases)."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from runs.engine.leases import object_lease_key
from runs.engine.store import Held, store
from runs.models import Lease

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TTL = timedelta(seconds=30)


def lease_acquire(*, key: str, owner: str, ttl: timedelta, now: datetime) -> Held | None:
    return store().keyed_lease_acquire(key=key, owner=owner, expires_at=now + ttl, now=now, run_id=None)


def lease_renew(*, held: Held, ttl: timedelta, now: datetime) -> Held | None:
    return store().keyed_lease_renew(held, expires_at=now + ttl, now=now)


@pytest.mark.django_db
def test_it_gives_a_free_lease_to_one_owner_until_it_expires():
    a = lease_acquire(key="object:42", owner="a", ttl=TTL, now=T0)
    assert a is not None and a.token == 1
    assert lease_acquire(key="object:42", owner="b", ttl=TTL, now=T0 + timedelta(seconds=29)) is None
    b = lease_acquire(key="object:42", owner="b", ttl=TTL, now=T0 + TTL)
    assert b is not None and b.token == 2  # the token grew: a is fenced out


@pytest.mark.django_db
def test_a_fenced_out_holder_can_neither_renew_nor_release():
    a = lease_acquire(key="k", owner="a", ttl=TTL, now=T0)
    b = lease_acquire(key="k", owner="b", ttl=TTL, now=T0 + TTL)
    assert lease_renew(held=a, ttl=TTL, now=T0 + TTL) is None
    assert store().keyed_lease_release(a) is False
    assert Lease.objects.get(key="k").owner == "b"
    assert store().keyed_lease_release(b) is True
    c = lease_acquire(key="k", owner="c", ttl=TTL, now=T0 + TTL)
    assert c is not None and c.token == 3


@pytest.mark.django_db
def test_renewing_extends_the_lease():
    a = lease_acquire(key="k", owner="a", ttl=TTL, now=T0)
    renewed = lease_renew(held=a, ttl=TTL, now=T0 + timedelta(seconds=20))
    assert renewed is not None and renewed.expires_at == T0 + timedelta(seconds=50)
    assert lease_acquire(key="k", owner="b", ttl=TTL, now=T0 + timedelta(seconds=40)) is None
    # An expired lease cannot be renewed: someone may have taken it.
    assert lease_renew(held=renewed, ttl=TTL, now=T0 + timedelta(seconds=50)) is None


def test_long_object_keys_fit_the_lease_key():
    key = object_lease_key("x" * 300)
    assert len(key) <= 255 and key.startswith("object:sha256:")
    assert object_lease_key("x" * 300) != object_lease_key("x" * 299 + "y")
    assert object_lease_key("invoice-42") == "object:invoice-42"


@pytest.mark.django_db(transaction=True)
def test_of_many_racing_owners_exactly_one_wins():
    winners, barrier = [], threading.Barrier(8)

    def race(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            held = lease_acquire(key="object:race", owner=f"o{i}", ttl=TTL, now=T0)
            if held is not None:
                winners.append(held.owner)
        finally:
            connection.close()

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(winners) == 1
    assert Lease.objects.get(key="object:race").owner == winners[0]
