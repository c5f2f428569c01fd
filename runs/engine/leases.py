"""Leases: the run lease (on the TaskRun row) and keyed leases ("object:<key>") in the Lease table.

Every change is a compare-and-set UPDATE on one row; no global lock, no lock held across the
work. The fencing token grows on every acquisition, so a holder whose lease expired and was
taken can tell: its renewals and result writes (runs/engine/outcome.py) change nothing.
"""

import hashlib
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from django.db import DatabaseError, transaction

from harness_site.forks import background_writes
from runs.engine.dispatch import run_dispatch_on_commit
from runs.engine.store import Held, database, store
from runs.models import RunStep, TaskRun
from tasks.skills.sdk import ErrorKind, SkillError

log = logging.getLogger("harness.leases")

Clock = Callable[[], datetime]


def object_lease_key(object_key: str) -> str:
    key = f"object:{object_key}"
    # Lease.key holds 255 characters; a longer object key is kept distinct by its digest.
    return key if len(key) <= MAX_KEY else "object:sha256:" + hashlib.sha256(object_key.encode()).hexdigest()


# A run whose object is busy is re-dispatched by the sweeper after this long (or at once by the
# holder when it releases the object): waiting holds no worker and no concurrency slot.
OBJECT_BUSY_DELAY = timedelta(seconds=1)
MAX_KEY = 255


@dataclass
class ObjectGate:
    """The object lease one execution holds, kept alive by the process's renewals until exit."""

    run_id: int
    object_key: str
    held: Held | None
    renewal: "KeyRenewal | None" = None


def object_gate_enter(*, run: TaskRun, worker: str, ttl: timedelta, clock: Clock) -> ObjectGate | None:
    """Before executing a run with an object key, take that object's lease (for the run lease's `ttl`).

    None: the run names no object (nothing to serialize). A gate whose `held` is None: another run
    of the object holds the lease, so this run was pushed back (run_after) for a later dispatch.
    """
    if not run.object_key:
        return None
    run_id, object_key = run.id, run.object_key
    now = clock()
    owner = f"{worker}:run:{run_id}:{uuid.uuid4().hex[:8]}"
    # The fencing token is bumped in the statement that takes the lease; None: someone else holds it.
    held = store().keyed_lease_acquire(
        key=object_lease_key(object_key), owner=owner, expires_at=now + ttl, now=now, run_id=run_id
    )
    gate = ObjectGate(run_id=run_id, object_key=object_key, held=held)
    if held is None:
        # Compare-and-set on a claimable run only: a run executing elsewhere is left alone.
        store().push_back(run_id, run_after=now + OBJECT_BUSY_DELAY)
        return gate
    gate.renewal = KeyRenewal(held=held, run_id=run_id, ttl=ttl, clock=clock)
    gate.renewal.start()
    return gate


def object_gate_exit(gate: ObjectGate | None, *, now: datetime) -> None:
    """Release the object lease and wake the next due run of the same object."""
    if gate is None or gate.held is None:
        return
    if gate.renewal is not None:
        gate.renewal.stop()
    store().keyed_lease_release(gate.held)  # False (taken meanwhile): nothing to give back
    # object_next_waiting: served by run_object_idx.
    next_ids = list(
        TaskRun.objects.filter(object_key=gate.object_key, state__in=TaskRun.CLAIMABLE, run_after__lte=now)
        .exclude(id=gate.run_id)
        .order_by("run_after", "id")
        .values_list("id", flat=True)[:1]
    )
    run_dispatch_on_commit(run_ids=next_ids, now=now)


# --- The run lease: on the TaskRun row itself, so the fence check and the result write are one row. ---


class LeaseLost(SkillError):
    """This attempt no longer holds the run's lease: another worker may be executing it."""

    def __init__(self, message: str = "the run's lease was lost to another worker"):
        super().__init__(ErrorKind.LEASE_LOST, message)


@contextmanager
def fenced(*, run_id: int, fence: int, lost: threading.Event | None = None) -> Iterator[None]:
    """A transaction that commits only while `fence` still holds the run's lease.

    The row lock (PostgreSQL) or the IMMEDIATE write lock (SQLite) keeps the sweeper from
    taking the lease between the check and the caller's writes. `lost`: the renewer's flag; once
    set, nothing is written even before the sweeper moved the fence.
    """
    if lost is not None and lost.is_set():
        raise LeaseLost()
    database.connection_refresh()
    with transaction.atomic():
        if not store().fence_holds(run_id=run_id, fence=fence):
            raise LeaseLost()
        yield


@contextmanager
def fenced_step(*, run_id: int, fence: int, name: str, lost: Callable[[], bool]) -> Iterator[RunStep | None]:
    """fenced() for a write step: the same transaction first looks up the step's checkpoint, in
    the statement that checks the fence. Yields the checkpoint when the step was done (the caller
    returns it and writes nothing; found whatever the lease, as any finished step is), else None
    once the fence is known to hold, with the row locked until commit."""
    database.connection_refresh()  # a step may follow minutes of work: replace a connection the server dropped
    with transaction.atomic():
        done, holds = store().step_fence(run_id=run_id, fence=fence, name=name)
        if done is None and (lost() or not holds):
            raise LeaseLost()
        yield done


# --- Renewals: one thread per process renews every lease the process holds. ---

RETRY_INTERVAL = 0.5  # seconds between renewal tries while the database is unreachable
MIN_INTERVAL = 0.2  # seconds: a lease is renewed every ttl/3, but never more often than this


class _Renewal:
    """One held lease the process keeps alive: renewed every ttl/3 by the process's renewal thread.

    A database error (a dropped connection, a restart) is retried on a fresh connection for as long
    as the lease last renewed is still valid; only a renewal that finds the lease taken (the fence
    or token moved), or a lease that ran out while the database was unreachable, counts as lost.
    Then `lost` is set and the lease is no longer renewed.
    """

    def __init__(self, *, ttl: timedelta, clock: Clock, expires_at: datetime | None) -> None:
        self.ttl, self.clock = ttl, clock
        self.expires_at = expires_at or clock() + ttl
        self.interval = max(ttl.total_seconds() / 3, MIN_INTERVAL)
        self.lost = threading.Event()
        self.due = time.monotonic() + self.interval
        self.failing_since: datetime | None = None
        self.stopped = False

    def start(self) -> None:
        """Keep the lease alive until stop(). Costs a heap entry, not a thread: most skills finish
        long before their first renewal is due."""
        _renewals.add(self)

    def stop(self) -> None:
        self.stopped = True
        _renewals.remove(self)

    def renewed(self, ok: bool, *, expires_at: datetime) -> bool:
        """Record a renewal's answer; False when the lease is gone (no more renewals)."""
        if self.failing_since is not None and ok:
            log.info("%s: lease renewed again after %s", self, self.clock() - self.failing_since)
        self.failing_since = None
        if not ok and self.stopped:
            # Stopped while this pass ran: the run finished (its outcome is written only after the
            # stop), so its lease ended; it was not lost.
            return False
        if not ok:
            log.warning("%s: lease lost, renewal stopped", self)
            self.lost.set()
            return False
        self.expires_at = expires_at
        self.due = time.monotonic() + self.interval
        return True

    def unreachable(self, exc: BaseException) -> bool:
        """The database could not be asked; False when the lease ran out meanwhile (lost)."""
        if self.failing_since is None:
            self.failing_since = self.clock()
            log.warning("%s: lease renewal failed (%s); retrying", self, _one_line(exc))
        if self.clock() >= self.expires_at:
            log.warning("%s: lease expired while the database was unreachable", self)
            self.lost.set()
            return False
        self.due = time.monotonic() + min(RETRY_INTERVAL, self.interval)
        return True


R = TypeVar("R", bound=_Renewal)


class LeaseRenewer(_Renewal):
    """The run lease of one attempt, conditional on its fence, with the attempt's pool slots (they
    live as long as the lease). The running skill sees `lost` (ctx.lease_lost, ctx.step,
    ctx.fenced) and the attempt commits nothing."""

    def __init__(self, *, run_id: int, fence: int, ttl: timedelta, clock: Clock, expires_at: datetime | None = None):
        self.run_id, self.fence = run_id, fence
        super().__init__(ttl=ttl, clock=clock, expires_at=expires_at)

    def __str__(self) -> str:
        return f"run {self.run_id} (fence {self.fence})"

    def _renew(self) -> bool:
        """Renew this lease now, alone (the process thread renews every due lease at once)."""
        expires = self.clock() + self.ttl
        renewed = store().run_leases_renew([(self.run_id, self.fence, expires)])
        return self.renewed(self.run_id in renewed, expires_at=expires)


class KeyRenewal(_Renewal):
    """A keyed lease ("object:<key>"), conditional on its owner and token and on not having expired."""

    def __init__(self, *, held: Held, run_id: int, ttl: timedelta, clock: Clock):
        self.held, self.run_id = held, run_id
        super().__init__(ttl=ttl, clock=clock, expires_at=held.expires_at)

    def __str__(self) -> str:
        return f"run {self.run_id} lease {self.held.key}"


class _Renewals:
    """The process's renewal thread: wakes when the earliest lease is due and renews every due lease
    in one statement per kind (run leases with their slots; keyed leases), on a connection it closes
    after each pass. A forked pool child starts its own (the parent's thread is not there)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held: dict[int, _Renewal] = {}
        self._pid: int | None = None
        self._wakes_at = math.inf  # when the thread will look again (monotonic); a start due sooner wakes it

    def add(self, renewal: _Renewal) -> None:
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked pool child: the thread is not ours
                self._pid, self._held = os.getpid(), {}
                threading.Thread(target=self._loop, name="lease-renewals", daemon=True).start()
            self._held[id(renewal)] = renewal
            if renewal.due < self._wakes_at:  # due before the thread's wake-up: wake it to wait less
                self._cond.notify()

    def remove(self, renewal: _Renewal) -> None:
        with self._cond:
            self._held.pop(id(renewal), None)

    def held(self) -> list[_Renewal]:
        with self._cond:
            return list(self._held.values())

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._held:
                    self._wakes_at = math.inf
                    self._cond.wait()
                self._wakes_at = min(r.due for r in self._held.values())
                delay = self._wakes_at - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                now = time.monotonic()
                due = [r for r in self._held.values() if r.due <= now]
            # Never behind the runs for a pooled connection: their leases would run out meanwhile.
            database.connection_unpooled()
            # A skill that forks (os.fork, multiprocessing) must not take this connection with it.
            with background_writes():
                self.renew(due)
                # A pass every ttl/3 at most: no connection is kept between passes (a pool gets it back).
                database.connection_close()

    def renew(self, due: list[_Renewal]) -> None:
        """Renew `due` now: one statement for the run leases, one for the keyed ones."""
        self._renew_batch([r for r in due if isinstance(r, LeaseRenewer)], _renew_runs)
        self._renew_batch([r for r in due if isinstance(r, KeyRenewal)], _renew_keys)

    def _renew_batch(self, batch: list[R], renew: Callable[[list[R]], list[R | None]]) -> None:
        if not batch:
            return
        try:
            gone = [r for r in renew(batch) if r is not None]
        except DatabaseError as exc:
            database.connection_close()  # retried on a new connection
            gone = [r for r in batch if not r.unreachable(exc)]
        with self._cond:
            for r in gone:
                self._held.pop(id(r), None)


def _renew_runs(batch: list[LeaseRenewer]) -> list[LeaseRenewer | None]:
    """Renew the run leases of `batch`; returns the lost ones (None for each kept)."""
    expires = {r: r.clock() + r.ttl for r in batch}
    renewed = store().run_leases_renew([(r.run_id, r.fence, expires[r]) for r in batch])
    return [None if r.renewed(r.run_id in renewed, expires_at=expires[r]) else r for r in batch]


def _renew_keys(batch: list[KeyRenewal]) -> list[KeyRenewal | None]:
    now = {r: r.clock() for r in batch}
    expires = {r: now[r] + r.ttl for r in batch}
    leases = [(r.held.key, r.held.owner, r.held.token, now[r], expires[r]) for r in batch]
    renewed = store().keyed_leases_renew(leases)
    return [None if r.renewed(r.held.key in renewed, expires_at=expires[r]) else r for r in batch]


_renewals = _Renewals()


def _one_line(exc: BaseException) -> str:
    """An error as one short line: a database error's text can span lines (and a log line must not)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}"
