"""Wake the worker's event loop when a pool thread hands it work (celery/celery#6941).

With the threads pool on Redis (or any transport the event loop drives) a task that finishes in a
pool thread acknowledges its message through `Consumer.call_soon`, which puts the ack on kombu's
`Hub._ready` set and returns. Nothing wakes the loop: it is blocked in `poll()` until its next timer,
and when every thread is busy it has no reader registered at all (Redis QoS `can_consume()` is false,
so no BRPOP is outstanding). The next timer is kombu's `maybe_restore_messages`, every 10 s
(`kombu/transport/redis.py`, `register_with_event_loop`; `Hub.fire_timers` caps a poll at 10 s).
So finished messages stay unacknowledged, no new one is fetched, and runs start in waves 10 s apart.

The fix, at the cause: a self-pipe. The loop reads one end; `call_soon` from any thread but the
loop's own writes a byte to the other, so `poll()` returns at once and the loop runs the ack, after
which QoS lets it fetch again. Prefork's callbacks already come from the loop's own thread and cost
nothing more. Upstream: https://github.com/celery/celery/issues/6941 (kombu's `Hub.call_soon` is
not thread-safe in that sense; remove this step once kombu wakes its poller itself).
"""

import os
import threading

from celery import bootsteps


class HubWakeup(bootsteps.StartStopStep):
    """Consumer step: a self-pipe on the event loop, written by `call_soon` from other threads."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent, **kwargs):
        super().__init__(parent, **kwargs)
        self._read_fd: int | None = None
        self._write_fd: int | None = None

    def register_with_event_loop(self, parent, hub) -> None:
        # Called each time the loop (re)starts: a reconnect resets the hub and drops its readers.
        if self._read_fd is None:
            self._read_fd, self._write_fd = os.pipe()
            os.set_blocking(self._read_fd, False)
            os.set_blocking(self._write_fd, False)
        hub.add_reader(self._read_fd, self._drain)
        if not getattr(hub, "_harness_wakes", False):
            hub.call_soon = _waking(hub.call_soon, loop_thread=threading.get_ident(), wake=self._wake)
            hub._harness_wakes = True

    def shutdown(self, parent) -> None:
        for fd in (self._read_fd, self._write_fd):
            if fd is not None:
                os.close(fd)
        self._read_fd = self._write_fd = None

    def _wake(self) -> None:
        fd = self._write_fd
        if fd is None:
            return
        try:
            os.write(fd, b"\0")
        except (BlockingIOError, OSError):
            pass  # the pipe is full (a wake-up is already pending) or closed at shutdown

    def _drain(self) -> None:
        try:
            while os.read(self._read_fd, 4096):  # type: ignore[arg-type]
                pass
        except (BlockingIOError, OSError, TypeError):
            pass


def _waking(call_soon, *, loop_thread: int, wake):
    def call_soon_and_wake(callback, *args):
        result = call_soon(callback, *args)
        if threading.get_ident() != loop_thread:
            wake()
        return result

    return call_soon_and_wake
