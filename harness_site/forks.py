"""No database connection crosses a fork.

A Celery worker's main process forks its pool processes (at start, and whenever one dies) while a
thread of its own writes the worker's heartbeat. A child forked while that thread is inside a write
inherits the parent's memory as it stood: SQLite keeps each file's lock state there, so the child
believes the write lock is taken and waits for it for ever (nobody holds it); a PostgreSQL
connection's socket would be shared with the parent. So:

* a background thread does its database work inside `background_writes()`;
* before a fork, the forking thread waits for those writes to end, holds new ones back, and closes
  the connections they used (each thread opens a fresh one at its next write);
* after it, the parent's writers go on; the child drops every connection the forking thread had
  without a word to the server (the socket is the parent's), and starts with fresh ones.

Only `os.fork()` (billiard's pool, multiprocessing's fork start method) runs these hooks; a
subprocess that execs at once keeps nothing of ours.
"""

import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator

from django.conf import settings
from django.db import connections

log = logging.getLogger("harness.forks")

SLOW_WAIT = 1.0  # seconds: a fork that waits longer for a background write says so in the log


class _Gate:
    """Background writes in, one fork at a time out: many writers at once, none during a fork."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._writers: dict[int, int] = {}  # thread ident -> nesting depth
        self._forking = False
        self._used: weakref.WeakSet = weakref.WeakSet()  # the writers' DatabaseWrappers

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            while self._forking and me not in self._writers:
                self._cond.wait()
            self._writers[me] = self._writers.get(me, 0) + 1
        try:
            yield
        finally:
            # The thread's connections, to be closed by the next fork (held weakly: a thread that
            # ends frees them with its thread-local storage).
            self._used.update(connections.all(initialized_only=True))
            with self._cond:
                self._writers[me] -= 1
                if not self._writers[me]:
                    del self._writers[me]
                self._cond.notify_all()

    def before_fork(self) -> None:
        me = threading.get_ident()
        started = time.monotonic()
        with self._cond:
            self._forking = True
            while any(ident != me for ident in self._writers):
                self._cond.wait(SLOW_WAIT)
            waited = time.monotonic() - started
        if waited > SLOW_WAIT:
            log.warning("fork waited %.1fs for a background database write to finish", waited)
        for wrapper in list(self._used):
            if wrapper.connection is not None and not wrapper.in_atomic_block:
                _close_elsewhere(wrapper)

    def after_fork_in_parent(self) -> None:
        with self._cond:
            self._forking = False
            self._cond.notify_all()

    def after_fork_in_child(self) -> None:
        # The writer threads do not exist here: start from nothing (the condition's lock may be
        # a copy taken while another thread of the parent held it).
        self._cond = threading.Condition()
        self._writers = {}
        self._forking = False
        self._used = weakref.WeakSet()


def _close_elsewhere(wrapper) -> None:
    """Close a connection another thread opened: that thread is held at the gate meanwhile."""
    wrapper.inc_thread_sharing()
    try:
        wrapper.close()
    except Exception as exc:  # a broken connection is as good as closed
        log.debug("closing a background connection before a fork: %s", exc)
    finally:
        wrapper.dec_thread_sharing()


def _fresh_connections_in_child() -> None:
    """The forking thread's connections are the parent's: forget them without closing them at the
    server. Closing the descriptor first makes close() send nothing on the parent's socket."""
    for wrapper in connections.all(initialized_only=True):
        raw = wrapper.connection
        if raw is None:
            continue
        with contextlib.suppress(AttributeError, OSError, TypeError, ValueError):
            os.close(raw.fileno())  # PostgreSQL's socket; SQLite's connection has no fileno
        with contextlib.suppress(Exception):
            wrapper.close()
        wrapper.connection = None


_gate = _Gate()


def background_writes() -> contextlib.AbstractContextManager[None]:
    """Wrap a background thread's database work: no fork happens inside it, and the connections it
    used are closed before every fork. Nesting in one thread is allowed; never fork inside it."""
    return _gate.writing()


def _before() -> None:
    _gate.before_fork()


def _after_in_parent() -> None:
    _gate.after_fork_in_parent()


def _after_in_child() -> None:
    _gate.after_fork_in_child()
    if settings.configured:  # a process that never set Django up has no connection to drop
        _fresh_connections_in_child()


os.register_at_fork(before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child)
