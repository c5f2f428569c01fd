"""Leases: the run lease (on the TaskRun row) and keyed leases ("object:<key>") in the Lease table.

Every change is a compare-and-set UPDATE on one row; no global lock, no lock held across the
work. The fencing token grows on every acquisition, so a holder whose lease expired and was
taken can tell: its renewals and result writes (runs/outcome.py) change nothing.
"""

import hashlib
import heapq
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import F, Q

from runs.dispatch import run_dispatch_on_commit
from runs.models import Attempt, Lease, TaskRun
from runs.store import Taken, store
from tasks.skills.sdk import ErrorKind, SkillError

log = logging.getLogger("harness.leases")


@dataclass(frozen=True)
class Held:
    key: str
    owner: str
    token: int
    expires_at: datetime


def lease_acquire(*, key: str, owner: str, ttl: timedelta, now: datetime, run_id: int | None = None) -> Held | None:
    """Take the lease if it is free or expired; None when someone else holds it.

    A missing row is inserted (a unique-key conflict means another owner inserted it first: retry
    the update once). The fencing token is bumped in the same statement that takes the lease.
    """
    for _ in range(2):
        # Compare-and-set: a row count of 0 means the lease is held by someone else (or absent).
        taken = Lease.objects.filter(Q(owner="") | Q(expires_at__isnull=True) | Q(expires_at__lte=now), key=key).update(
            owner=owner, token=F("token") + 1, acquired_at=now, expires_at=now + ttl, run_id=run_id
        )
        if taken:
            token = Lease.objects.filter(key=key, owner=owner).values_list("token", flat=True).first()
            return Held(key, owner, token, now + ttl) if token is not None else None
        if Lease.objects.filter(key=key).exists():
            return None
        try:
            with transaction.atomic():
                Lease.objects.create(
                    key=key, owner=owner, token=1, acquired_at=now, expires_at=now + ttl, run_id=run_id
                )
            return Held(key, owner, 1, now + ttl)
        except IntegrityError:
            continue  # inserted by another owner meanwhile: it may already have released it
    return None


def lease_renew(*, held: Held, ttl: timedelta, now: datetime) -> Held | None:
    """Extend the lease while it is still ours (same owner and token); None means it was lost."""
    renewed = Lease.objects.filter(key=held.key, owner=held.owner, token=held.token, expires_at__gt=now).update(
        expires_at=now + ttl
    )
    return Held(held.key, held.owner, held.token, now + ttl) if renewed else None


def lease_release(*, held: Held) -> bool:
    """Give the lease back; False if it had already been taken by someone else (nothing changed)."""
    return bool(
        Lease.objects.filter(key=held.key, owner=held.owner, token=held.token).update(
            owner="", expires_at=None, run_id=None
        )
    )


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
    """The object lease one execution holds; a thread renews it every ttl/3 until exit."""

    run_id: int
    object_key: str
    held: Held | None
    ttl: timedelta
    clock: object = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _renew_loop(self) -> None:
        interval = max(self.ttl.total_seconds() / 3, 0.2)
        wait, failing = interval, False
        try:
            while not self._stop.wait(wait):
                if self.held is None:
                    return
                try:
                    renewed = lease_renew(held=self.held, ttl=self.ttl, now=self.clock())
                except DatabaseError as exc:
                    # Like the run lease: retry on a new connection while the lease is still ours.
                    store().connection_close()
                    if not failing:
                        log.warning("run %s: object lease renewal failed (%s); retrying", self.run_id, _one_line(exc))
                    failing, wait = True, min(LeaseRenewer.RETRY_INTERVAL, interval)
                    if self.clock() >= self.held.expires_at:
                        log.warning("run %s: object lease %s expired while unreachable", self.run_id, self.held.key)
                        return
                    continue
                failing, wait = False, interval
                if renewed is None:
                    log.warning("run %s: object lease %s lost", self.run_id, self.held.key)
                    return
                self.held = renewed
        finally:
            store().connection_close()


def object_gate_enter(*, run: TaskRun, worker: str, clock) -> ObjectGate | None:
    """Before executing a run with an object key, take that object's lease.

    None: the run names no object (nothing to serialize). A gate whose `held` is None: another run
    of the object holds the lease, so this run was pushed back (run_after) for a later dispatch.
    """
    if not run.object_key:
        return None
    run_id, object_key, ttl = run.id, run.object_key, run_lease_ttl(run)
    now = clock()
    owner = f"{worker}:run:{run_id}:{uuid.uuid4().hex[:8]}"
    held = lease_acquire(key=object_lease_key(object_key), owner=owner, ttl=ttl, now=now, run_id=run_id)
    gate = ObjectGate(run_id=run_id, object_key=object_key, held=held, ttl=ttl, clock=clock)
    if held is None:
        # Compare-and-set on a claimable run only: a run executing elsewhere is left alone.
        TaskRun.objects.filter(id=run_id, state__in=TaskRun.CLAIMABLE).update(
            run_after=now + OBJECT_BUSY_DELAY, dispatched_at=None
        )
        return gate
    gate._thread = threading.Thread(target=gate._renew_loop, name=f"object-lease-{run_id}", daemon=True)
    gate._thread.start()
    return gate


def object_gate_exit(gate: ObjectGate | None, *, now: datetime) -> None:
    """Release the object lease and wake the next due run of the same object."""
    if gate is None or gate.held is None:
        return
    gate._stop.set()
    if gate._thread is not None:
        gate._thread.join()
    lease_release(held=gate.held)
    # object_next_waiting: served by run_object_idx.
    next_ids = list(
        TaskRun.objects.filter(object_key=gate.object_key, state__in=TaskRun.CLAIMABLE, run_after__lte=now)
        .exclude(id=gate.run_id)
        .order_by("run_after", "id")
        .values_list("id", flat=True)[:1]
    )
    run_dispatch_on_commit(run_ids=next_ids, now=now)


def connection_refresh() -> None:
    """Before a write that follows a long wait (a skill's run): see runs.store."""
    store().connection_refresh()


# --- The run lease: on the TaskRun row itself, so the fence check and the result write are one row. ---

Clock = Callable[[], datetime]


class LeaseLost(SkillError):
    """This attempt no longer holds the run's lease: another worker may be executing it."""

    def __init__(self, message: str = "the run's lease was lost to another worker"):
        super().__init__(ErrorKind.LEASE_LOST, message)


def run_lease_ttl(run: TaskRun) -> timedelta:
    """The lease length the run was triggered with (its rule's policy, copied into the run at claim)."""
    return timedelta(seconds=run.lease_ttl_seconds)


def run_read(run_id: int) -> TaskRun | None:
    """The run row an attempt works from (read once)."""
    return store().run_read(run_id)


def run_take(run_id: int, *, worker: str, now: datetime) -> Taken:
    """Read the run an attempt works from and, when nothing stands in its way, claim it (in one
    statement where the store can: PostgreSQL).

    Nothing stands in the way of a run that is claimable and due, names no object (the object gate
    comes first), has no start window (run_cancel_late's check) and no agent, and whose pools all
    limit nothing (runs.admission's plain admission, taken in the same statement). Any other run is
    returned unclaimed, as read, for the executor's full path; nothing is written for it.
    """
    return store().run_take(run_id, worker=worker, now=now)


def run_lease_claim(run: TaskRun, *, worker: str, now: datetime, plain: bool = False) -> Attempt | None:
    """Take the run's lease and start its next attempt; None when the run is not ours to execute.

    Compare-and-set on the state, attempt count and fence just read: 0 rows means another worker
    got there first, the run is not due, or it changed meanwhile. On success `run` is updated in
    memory (fence + 1, attempts + 1), so the attempt needs no second read of the row.

    `plain` (where the store admits in the claim: PostgreSQL): admit the run in the claim's own
    statement when every pool it draws from limits nothing, taking their slots. Raises NotPlain,
    with nothing written, when one does (pool_admit decides instead).
    """
    if run.state not in TaskRun.CLAIMABLE or run.run_after > now:
        return None
    return store().lease_claim(run, worker=worker, now=now, plain=plain)


@contextmanager
def fenced(*, run_id: int, fence: int, lost: threading.Event | None = None) -> Iterator[None]:
    """A transaction that commits only while `fence` still holds the run's lease.

    The row lock (PostgreSQL) or the IMMEDIATE write lock (SQLite) keeps the sweeper from
    taking the lease between the check and the caller's writes. `lost`: the renewer's flag; once
    set, nothing is written even before the sweeper moved the fence.
    """
    if lost is not None and lost.is_set():
        raise LeaseLost()
    connection_refresh()
    with transaction.atomic():
        if not store().fence_holds(run_id=run_id, fence=fence):
            raise LeaseLost()
        yield


class LeaseRenewer:
    """Extends the run lease every ttl/3 while the skill runs, on its own connection.

    Renewal is conditional on the fence, so a worker that lost the lease stops renewing it. A
    database error (a dropped connection, a restart) is retried on a fresh connection for as long
    as the lease last renewed is still valid; only a renewal that finds the fence moved, or a lease
    that ran out while the database was unreachable, counts as lost. Then `lost` is set: the
    running skill sees it (ctx.lease_lost, ctx.step, ctx.fenced) and the attempt commits nothing.
    """

    RETRY_INTERVAL = 0.5  # seconds between renewal tries while the database is unreachable

    def __init__(self, *, run_id: int, fence: int, ttl: timedelta, clock: Clock, expires_at: datetime | None = None):
        self.run_id, self.fence, self.ttl, self.clock = run_id, fence, ttl, clock
        self.expires_at = expires_at or clock() + ttl
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None  # made when the first renewal is due

    def start(self) -> None:
        """Start renewing. Lazily: the renewal thread starts only when the first renewal is due
        (ttl/3), so a skill that finishes well within its TTL never gets one (_LazyStarter)."""
        self._interval = max(self.ttl.total_seconds() / 3, 0.2)
        self._lock = threading.Lock()
        self._stopped = self._started = False
        _lazy_starter.add(time.monotonic() + self._interval, self)

    def _start_now(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._started = True
            self._thread = threading.Thread(target=self._loop, name=f"lease-renewer-{self.run_id}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            started = self._started
        if started:
            self._stop.set()
            self._thread.join()

    def _loop(self) -> None:
        interval = self._interval
        wait = 0.0  # started when the first renewal is due
        failing_since: datetime | None = None
        try:
            while not self._stop.wait(wait):
                try:
                    renewed = self._renew()
                except DatabaseError as exc:
                    # Transient until the lease runs out: retry on a new connection, log once per outage.
                    store().connection_close()
                    if failing_since is None:
                        failing_since = self.clock()
                        log.warning("run %s: lease renewal failed (%s); retrying", self.run_id, _one_line(exc))
                    if self.clock() >= self.expires_at:
                        log.warning("run %s: lease expired while the database was unreachable", self.run_id)
                        self.lost.set()
                        return
                    wait = min(self.RETRY_INTERVAL, interval)
                    continue
                if failing_since is not None:
                    log.info("run %s: lease renewed again after %s", self.run_id, self.clock() - failing_since)
                    failing_since = None
                if not renewed:
                    log.warning("run %s: lease lost (fence %s), renewal stopped", self.run_id, self.fence)
                    self.lost.set()
                    return
                wait = interval
        finally:
            store().connection_close()

    def _renew(self) -> bool:
        expires = self.clock() + self.ttl
        renewed = store().lease_renew(run_id=self.run_id, fence=self.fence, expires_at=expires)
        if renewed:
            self.expires_at = expires
        return renewed


class _LazyStarter:
    """One thread per process that starts each LeaseRenewer's own thread when its first renewal is
    due. Registering costs a heap push, not a thread: most skills finish long before ttl/3."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, LeaseRenewer]] = []
        self._pid: int | None = None
        self._seq = 0

    def add(self, at: float, renewer: "LeaseRenewer") -> None:
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked pool child: the thread is not ours
                self._pid, self._heap = os.getpid(), []
                threading.Thread(target=self._loop, name="lease-renewer-starter", daemon=True).start()
            if len(self._heap) > 1000:  # renewers stopped before their start was due
                self._heap = [entry for entry in self._heap if not entry[2]._stopped]
                heapq.heapify(self._heap)
            self._seq += 1
            heapq.heappush(self._heap, (at, self._seq, renewer))
            if self._heap[0][2] is renewer:  # due before every other: the thread's wait is too long
                self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                at, _seq, renewer = self._heap[0]
                delay = at - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                heapq.heappop(self._heap)
            renewer._start_now()


_lazy_starter = _LazyStarter()


def _one_line(exc: BaseException) -> str:
    """An error as one short line: a database error's text can span lines (and a log line must not)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}"
