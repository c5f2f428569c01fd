"""Celery's file-system transport, made safe for several processes on one machine; on Redis,
kombu's channel with one client kept per connection pool (`RedisChannel`); and looks into a queue.

Three changes to stock kombu's file-system transport (5.6):

1. Atomic writes. Stock kombu creates the message file and then writes into it, so a worker polling
   at that instant can read an empty file, die with "Unrecoverable error: JSONDecodeError" and lose the
   message (kombu#1551; figures in docs/architecture.md). We write under
   a name the reader ignores and rename atomically. The reader takes every name that *contains*
   ".<queue>.msg", so the temporary name must not contain it at all ("….msg.part" is read too:
   tests/runs/test_file_broker.py).

2. An event loop. Stock kombu says the transport is not asynchronous, so a Celery worker falls back to
   the blocking prefork pool, where idle children wait for work holding one lock they all share
   (billiard's inqueue `_rlock`): a child killed while it holds it (kill -9, the OOM killer) deadlocks
   the whole worker for good (celery#2011, celery#4185, billiard#104, billiard#457). Here the transport
   polls the folder from the worker's event loop (a timer every `polling_interval`), so Celery uses its
   asynchronous prefork pool: one pipe per child, no shared lock, a dead child is replaced.

3. Redelivery after a crash. Stock kombu deletes a message file when it reads it, so the messages a
   worker had received and not yet acknowledged (acks-late: prefetched or running) died with it. Here a
   reader *moves* the file into a claims folder of its own (an atomic rename, so two readers never take
   the same message) and deletes it at the acknowledgement. Each owner holds a POSIX lock on its
   `<owner>.lock` file for its whole life; the kernel drops it when the process dies, however it dies,
   and (unlike flock) a forked pool child does not inherit it. Every consumer checks the other owners
   about once a second and moves a dead owner's claimed messages back to the queue, at their original
   place (file names sort by send time): they are redelivered about a second after the crash.
"""

import contextlib
import errno
import fcntl
import logging
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from queue import Empty
from time import monotonic

from kombu.transport import filesystem, virtual
from kombu.transport import redis as kombu_redis
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads
from kombu.utils.objects import cached_property

log = logging.getLogger("harness.broker")

CLAIM_CHECK_SECONDS = 1.0  # how often a consumer looks for a dead owner's claimed messages
DRAIN_BATCH = 100  # messages delivered per event-loop tick at most (prefetch limits apply first)
# A run's id travels in the message headers (runs/engine/dispatch.py) and in the file name, so the queue can
# be read without opening files (queue_probe below).
RUN_HEADER = "harness_run"
# The run's dispatched_at (epoch seconds) as written on its row: on Redis, a run dispatched before every
# message at the old end of the queue has left the queue (harness_site/broker.py _redis_probe).
DISPATCHED_HEADER = "harness_dispatched_at"
# Redis: how many messages at the old end of the queue are read to find the oldest dispatched_at (one
# transaction's messages may reach the queue after a later transaction's).
OLD_END = 200


def message_name(sent_ms: int, queue: str, run_id: int | None) -> str:
    """`<ms since boot, 13 digits>_<uuid>[-r<run>].<queue>.msg`: sorts by send time; kombu's match."""
    run = f"-r{run_id}" if run_id is not None else ""
    return f"{sent_ms:013d}_{uuid.uuid4()}{run}.{queue}.msg"


def parse_name(name: str) -> tuple[int, int | None] | None:
    """(sent_ms, run id or None) of a message file name, or None when it is no message."""
    stem, sep, _rest = name.partition(".")
    head, _, tail = stem.partition("_")
    if not sep or not head.isdigit() or not name.endswith(".msg"):
        return None
    run = tail.rpartition("-r")[2] if "-r" in tail else ""
    return int(head), int(run) if run.isdigit() else None


def _run_of(payload: dict) -> int | None:
    value = (payload.get("headers") or {}).get(RUN_HEADER)
    return value if isinstance(value, int) else None


class QoS(virtual.QoS):
    """Virtual QoS that also deletes a message's claimed file once it is acknowledged or requeued."""

    def ack(self, delivery_tag):
        super().ack(delivery_tag)
        self.channel._release_claim(delivery_tag)
        self.channel.connection.drain_soon()  # room under the prefetch limit: take the next one now

    def reject(self, delivery_tag, requeue=False):
        super().reject(delivery_tag, requeue=requeue)  # requeue=True puts a copy back first
        self.channel._release_claim(delivery_tag)
        self.channel.connection.drain_soon()

    def restore_unacked(self):
        tags = list(self._delivered)
        errors = super().restore_unacked()  # a warm shutdown puts copies back in the queue first
        for tag in tags:
            self.channel._release_claim(tag)
        return errors


class Channel(filesystem.Channel):
    QoS = QoS

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._claims: dict[str, str] = {}  # delivery tag -> claimed file
        self._no_ack_queues: set[str] = set()
        self._owner: str | None = None
        self._owner_lock: int | None = None
        self._claims_checked = 0.0

    # --- writing ---------------------------------------------------------------------------

    def _put(self, queue, payload, **kwargs):
        # Same name format as kombu's (plus zero padding and the run id), so ordering and queue
        # matching are unchanged.
        name = message_name(round(monotonic() * 1000), queue, _run_of(payload))
        final = os.path.join(self.data_folder_out, name)
        partial = os.path.join(self.data_folder_out, f".{uuid.uuid4()}.writing")
        with open(partial, "wb") as f:
            f.write(str_to_bytes(dumps(payload)))
        os.replace(partial, final)

    # --- reading ---------------------------------------------------------------------------

    def basic_consume(self, queue, no_ack, callback, consumer_tag, **kwargs):
        if no_ack:  # nobody will acknowledge these (e.g. the control pidbox): never claim them
            self._no_ack_queues.add(queue)
        return super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)

    def basic_get(self, queue, no_ack=False, **kwargs):
        if no_ack:
            self._no_ack_queues.add(queue)
        return super().basic_get(queue, no_ack=no_ack, **kwargs)

    def _get(self, queue):
        """Take the oldest message of `queue`: move it into our claims folder, then read it."""
        self._maybe_restore_dead_claims()
        queue_find = f".{queue}.msg"
        claim = queue not in self._no_ack_queues
        target = self._claim_dir() if claim else None
        for filename in sorted(os.listdir(self.data_folder_in)):
            if queue_find not in filename or filename.startswith("."):
                continue
            source = os.path.join(self.data_folder_in, filename)
            if target is None:
                try:
                    with open(source, "rb") as f:
                        payload = f.read()
                    os.remove(source)
                except FileNotFoundError:
                    continue  # another reader took it
                return loads(bytes_to_str(payload))
            claimed = os.path.join(target, filename)
            try:
                os.rename(source, claimed)  # atomic: exactly one reader wins the file
            except FileNotFoundError:
                if not os.path.isdir(target):  # our claims folder is gone (removed by hand): make it again
                    if self._owner_lock is not None:
                        os.close(self._owner_lock)
                    _OWNED.pop(self._owner or "", None)
                    self._owner = self._owner_lock = None
                    target = self._claim_dir()
                continue
            with open(claimed, "rb") as f:
                message = loads(bytes_to_str(f.read()))
            tag = (message.get("properties") or {}).get("delivery_tag")
            if tag:
                self._claims[tag] = claimed
            else:
                os.remove(claimed)
            return message
        raise Empty()

    def _release_claim(self, delivery_tag) -> None:
        path = self._claims.pop(delivery_tag, None)
        if path:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)

    # --- claims and dead owners --------------------------------------------------------------

    @cached_property
    def claims_folder(self) -> str:
        return self.transport_options.get("claims_folder") or os.path.join(self.data_folder_in, ".claims")

    def _claim_dir(self) -> str:
        """Our claims folder, created (and locked) at the first read. Lock first, folder second: a
        folder whose lock nobody holds belongs to a dead owner."""
        if self._owner is None:
            os.makedirs(self.claims_folder, exist_ok=True)
            owner = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
            temp = os.path.join(self.claims_folder, f".{owner}.locking")
            fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.replace(temp, os.path.join(self.claims_folder, f"{owner}.lock"))
            os.makedirs(os.path.join(self.claims_folder, owner))
            self._owner, self._owner_lock = owner, fd
            _OWNED[owner] = os.getpid()
        return os.path.join(self.claims_folder, self._owner)

    def _maybe_restore_dead_claims(self) -> None:
        now = monotonic()
        if now - self._claims_checked < CLAIM_CHECK_SECONDS:
            return
        self._claims_checked = now
        restore_dead_claims(self.claims_folder, self.data_folder_in, skip=self._owner)

    def close(self):
        folder = self.claims_folder if self._owner is not None else ""  # unreadable once closed
        super().close()  # restores unacked messages (warm shutdown), which releases their claims
        if self._owner is not None:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(folder, self._owner))
                os.remove(os.path.join(folder, f"{self._owner}.lock"))
            _OWNED.pop(self._owner, None)
            if self._owner_lock is not None:
                os.close(self._owner_lock)
            self._owner = self._owner_lock = None


# Owners created by this process: a POSIX lock never conflicts with its own process (and closing any
# descriptor of the file would drop it), so our own are known here, not tested.
_OWNED: dict[str, int] = {}


def owner_alive(claims_folder: str, owner: str) -> bool:
    """True while the process that owns `owner`'s claims lives (it holds the lock on its lock file)."""
    if _OWNED.get(owner) == os.getpid():
        return True
    path = os.path.join(claims_folder, f"{owner}.lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)  # closing drops the lock we may just have taken
    return False


def restore_dead_claims(claims_folder: str, queue_folder: str, *, skip: str | None = None) -> int:
    """Move the claimed messages of every dead owner back to the queue; returns how many.

    A message keeps its file name, so it goes back to its place in the queue (names sort by send
    time). Two consumers restoring at once each win some renames and skip the rest."""
    try:
        owners = [e for e in os.listdir(claims_folder) if not e.startswith(".") and not e.endswith(".lock")]
    except FileNotFoundError:
        return 0
    restored = 0
    for owner in owners:
        if owner == skip or owner_alive(claims_folder, owner):
            continue
        folder = os.path.join(claims_folder, owner)
        try:
            names = os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.rename(os.path.join(folder, name), os.path.join(queue_folder, name))
                restored += 1
        with contextlib.suppress(OSError):
            os.rmdir(folder)
            os.remove(os.path.join(claims_folder, f"{owner}.lock"))
        if names:
            log.warning("broker: %s message(s) of a dead consumer (%s) put back in the queue", len(names), owner)
    return restored


class Transport(filesystem.Transport):
    Channel = Channel
    # Asynchronous: Celery then runs its event loop and the asynchronous prefork pool (see 2. above).
    implements = filesystem.Transport.implements.extend(asynchronous=True)

    _loop = None
    _drain_pending = False

    def register_with_event_loop(self, connection, loop):
        self._loop, self._connection = loop, connection
        loop.call_repeatedly(self.polling_interval or 0.1, self._drain_ready, connection)

    def drain_soon(self) -> None:
        """Deliver again at the loop's next turn, not at the next poll: with prefetch 1 a worker would
        otherwise take one message per polling interval (docs/architecture.md)."""
        if self._loop is not None and not self._drain_pending:
            self._drain_pending = True
            self._loop.call_soon(self._drain_now)

    def _drain_now(self) -> None:
        self._drain_pending = False
        self._drain_ready(self._connection)

    def _drain_ready(self, connection) -> None:
        """Deliver what is ready now, up to what the prefetch limit allows; never wait."""
        for channel in self.channels:  # also while our prefetch is full and nothing is read
            channel._maybe_restore_dead_claims()
        for _ in range(DRAIN_BATCH):
            try:
                self.cycle.get(self._deliver, timeout=0)
            except Empty:
                return


# --- Looking into a queue (the sweeper, /healthz, the dashboard) ---------------------------------

SENT_AT_HEADER = "harness_sent_at"  # time.time() at publish, on every message (harness_site/celery.py)


@dataclass(frozen=True)
class QueueProbe:
    """What a queue holds now. `queued_runs` is exact on the file broker and None on Redis, where
    `oldest_dispatched_at` stands in for it (a run dispatched before every message at the old end of the
    queue has left the queue). `held` maps the runs whose messages consumers have received and not acknowledged to how
    long ago (seconds; None when unknown)."""

    queue: str
    depth: int
    oldest_age: float | None
    oldest_dispatched_at: float | None = None
    queued_runs: frozenset[int] | None = None
    held: dict[int, float | None] = field(default_factory=dict)


# --- Redis: one client per connection pool ---------------------------------------------------------

_KEPT = "_harness_kept_client"


def kept_client(channel):
    """`channel`'s redis-py client for its (synchronous) connection pool, made once and kept. kombu
    builds a new client for every command it sends outside the event loop: each publish, and for
    every message a worker receives its record among the unacknowledged and its acknowledgement.
    redis-py copies its ~170 response callbacks into each new client, which cost a worker's main
    process a tenth of a millisecond per message. A client holds no connection of its own (each
    command borrows one from the pool; a pipeline is made per use), so one serves every caller and
    thread. A new pool (kombu makes one after a connection error) gets a new client."""
    pool = channel.pool
    kept = getattr(channel, _KEPT, None)
    if kept is None or kept[0] is not pool:
        kept = (pool, channel.Client(connection_pool=pool))
        setattr(channel, _KEPT, kept)
    return kept[1]


class RedisChannel(kombu_redis.Channel):
    """kombu's Redis channel, with its synchronous client kept (`kept_client`)."""

    def _create_client(self, asynchronous=False):
        if asynchronous:  # the event loop's client (BRPOP), which kombu already keeps
            return super()._create_client(asynchronous=True)
        return kept_client(self)

    def _disconnect_pools(self):
        setattr(self, _KEPT, None)
        super()._disconnect_pools()


class RedisTransport(kombu_redis.Transport):
    """The transport for redis:// brokers (settings.py): kombu's, with `RedisChannel`."""

    Channel = RedisChannel


class _PushesInOnePipeline:
    """A Redis client whose LPUSHes wait in one pipeline; anything else goes straight to the client."""

    def __init__(self, client) -> None:
        self._client = client
        self.pushes = client.pipeline(transaction=False)

    def lpush(self, *args):
        self.pushes.lpush(*args)

    def __getattr__(self, name: str):
        return getattr(self._client, name)


@contextlib.contextmanager
def publish_in_one_round_trip(producer) -> Iterator[None]:
    """Messages published through `producer` inside reach Redis in one round trip, on one client,
    when the block ends. kombu's Redis channel sends each message in a round trip of its own (its
    `_put` goes through `conn_or_acquire()`): about half a tick's cost per due slot.
    The file broker and other transports publish as before. An error at the end raises: the rows
    are committed, so a message that did not arrive is a lost hint the sweeper sends again."""
    channel = getattr(producer, "channel", None)
    if channel is None or not (hasattr(channel, "conn_or_acquire") and hasattr(channel, "unacked_key")):
        yield
        return
    pushes = _PushesInOnePipeline(kept_client(channel))

    @contextlib.contextmanager
    def conn_or_acquire(client=None):
        yield client or pushes

    channel.conn_or_acquire = conn_or_acquire  # this channel only: the producer is ours until the end
    try:
        yield
    finally:
        del channel.conn_or_acquire
        pushes.pushes.execute()


def queue_declare_list(app, producer, queue: str) -> list | None:
    """What a message to `queue` declares: nothing once this connection has declared the queue
    (kombu remembers it per connection, and forgets on a reconnect, when a restarted broker may
    have lost it); otherwise None, Celery's default, which declares it and is remembered. kombu
    checks its memory only after copying and binding the queue for the channel: a fifth of a send."""
    entity = app.amqp.queues.get(queue)
    declared = getattr(getattr(producer, "connection", None), "declared_entities", None)
    if entity is not None and declared is not None and hash(entity) in declared:
        return []
    return None


# A look into a queue gives up after this long (seconds): the broker's own retries took 6 s per
# queue with Redis down, and whoever asks (a heartbeat, a monitor) must not wait for them.
PROBE_TIMEOUT = 2.0


def probe_options(timeout: float) -> dict:
    """Connection arguments that bound a probe's every command, not only its connect: a Redis that
    accepts connections and never answers would otherwise hold the caller (a heartbeat, /healthz) on
    its first read forever (kombu's Redis channel sets no socket timeout). Other transports ignore
    the options they do not know."""
    return {
        "connect_timeout": timeout,
        "transport_options": {"socket_timeout": timeout, "socket_connect_timeout": timeout},
    }


def queue_probe(app, queue: str, *, timeout: float = PROBE_TIMEOUT, held: bool = True) -> QueueProbe:
    """Look at `queue` without taking anything from it. Raises on a broker that cannot be reached
    within `timeout` seconds (one try, no retries), or whose any one command takes longer. With
    held=False, what consumers hold is not read (`held` stays empty, and on the file broker a dead
    consumer's messages are not yet in `queued_runs`): each held message is a document to parse, a
    thousand on a busy agent worker."""
    with app.connection_for_read(**probe_options(timeout)) as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=timeout)
        channel = conn.default_channel
        if isinstance(channel, Channel):
            return _file_probe(channel, queue, held=held)
        if hasattr(channel, "client") and hasattr(channel, "unacked_key"):
            return _redis_probe(channel, queue, held=held)
        return QueueProbe(queue=queue, depth=conn.SimpleQueue(queue).qsize(), oldest_age=None)


def _file_probe(channel: Channel, queue: str, *, held: bool) -> QueueProbe:
    now_ms = monotonic() * 1000
    suffix = f".{queue}.msg"
    sent, runs = [], set()
    for name in os.listdir(channel.data_folder_in):
        if name.endswith(suffix) and not name.startswith(".") and (parsed := parse_name(name)):
            sent.append(parsed[0])
            if parsed[1] is not None:
                runs.add(parsed[1])
    holding: dict[int, float | None] = {}
    folder, wall = channel.claims_folder, time.time()
    with contextlib.suppress(FileNotFoundError):
        for owner in os.listdir(folder) if held else ():
            if owner.startswith(".") or owner.endswith(".lock"):
                continue
            alive = owner_alive(folder, owner)
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                for name in os.listdir(os.path.join(folder, owner)):
                    parsed = parse_name(name)
                    if not parsed or parsed[1] is None:
                        continue
                    if not alive:  # a dead owner's messages go back to the queue within a second
                        runs.add(parsed[1])
                        continue
                    with contextlib.suppress(FileNotFoundError):  # the rename into the claim set ctime
                        holding[parsed[1]] = wall - os.stat(os.path.join(folder, owner, name)).st_ctime
    oldest = min(sent, default=None)
    return QueueProbe(
        queue=queue,
        depth=len(sent),
        oldest_age=(now_ms - oldest) / 1000 if oldest is not None else None,
        queued_runs=frozenset(runs),
        held=holding,
    )


def _redis_probe(channel, queue: str, *, held: bool) -> QueueProbe:
    client = channel.client
    now = time.time()
    depth = client.llen(queue)
    oldest_sent = oldest_dispatched = None
    # LPUSH in, BRPOP out: the tail is the old end.
    for raw in client.lrange(queue, -OLD_END, -1) if depth else ():
        with contextlib.suppress(ValueError, TypeError, AttributeError, KeyError):
            headers = loads(bytes_to_str(raw))["headers"]
            if oldest_sent is None and SENT_AT_HEADER in headers:
                oldest_sent = float(headers[SENT_AT_HEADER])
            if (at := headers.get(DISPATCHED_HEADER)) is not None:
                oldest_dispatched = min(float(at), oldest_dispatched or float(at))
    return QueueProbe(
        queue=queue,
        depth=depth,
        oldest_age=now - oldest_sent if oldest_sent else None,
        oldest_dispatched_at=oldest_dispatched,
        held=_redis_held(channel, now) if held else {},
    )


def _redis_held(channel, now: float) -> dict[int, float | None]:
    """The runs whose messages consumers hold (kombu's unacked hash), and for how long."""
    client = channel.client
    delivered = dict(client.zrange(channel.unacked_index_key, 0, -1, withscores=True))
    holding: dict[int, float | None] = {}
    for tag, raw in client.hgetall(channel.unacked_key).items():
        with contextlib.suppress(ValueError, TypeError, KeyError, IndexError):
            run = _run_of(loads(bytes_to_str(raw))[0])
            if run is not None:
                at = delivered.get(tag)
                holding[run] = now - at if at else None
    return holding
