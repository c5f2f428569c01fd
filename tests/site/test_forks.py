"""No database connection crosses a fork (harness_site/forks.py): a child forked while a background
thread of its parent is inside a write starts with fresh connections and can write; the parent's
background thread and its forking thread go on writing after the fork, on both databases."""

import os
import signal
import threading
import time

import pytest
from django.db import connection, transaction
from django.utils import timezone

from harness_site.forks import background_writes
from runs.models import SchedulerTick

CHILD_TIMEOUT = 10  # seconds; the stall this guards against never ends on its own


def _write(name: str) -> None:
    SchedulerTick.objects.update_or_create(name=name, defaults={"last_tick_at": timezone.now()})


def _fork_and_write(name: str) -> int:
    """Fork; the child writes one row and exits 0, or 1 on an error. The child's exit code, or -1 when
    it was still waiting after CHILD_TIMEOUT (then it is killed)."""
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            _write(name)
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + CHILD_TIMEOUT
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return -1


@pytest.mark.django_db(transaction=True)
def test_a_child_forked_while_a_background_thread_holds_the_write_lock_can_write():
    holding, wrote_again = threading.Event(), threading.Event()
    committed_at: list[float] = []

    def writer():
        with background_writes(), transaction.atomic():  # SQLite: BEGIN IMMEDIATE, the write lock
            _write("background")
            holding.set()
            time.sleep(0.5)  # the fork is asked for now, while this thread holds the lock
        committed_at.append(time.monotonic())
        time.sleep(0.2)
        with background_writes():  # after the fork: on a fresh connection of its own
            _write("background-again")
            connection.close()
        wrote_again.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    assert holding.wait(10)
    connection.ensure_connection()
    mine = connection.connection  # this thread's own connection, open across the fork
    asked = time.monotonic()
    code = _fork_and_write("child")
    assert code == 0, "the child could not write (-1: it waited for a lock nobody holds)"
    assert committed_at and committed_at[0] >= asked, "the fork did not wait for the background write"
    assert wrote_again.wait(10)
    thread.join(10)
    _write("parent")  # the child dropped its copy of this connection without closing it at the server
    assert connection.connection is mine
    names = set(SchedulerTick.objects.values_list("name", flat=True))
    assert names == {"background", "background-again", "child", "parent"}
