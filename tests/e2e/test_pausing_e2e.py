"""The fault tests freeze processes only between transactions: the check they rely on.

A process is stopped inside a transaction, another sits idle outside one. On PostgreSQL only the
stopped one's own sessions count; on SQLite its write lock is seen by anyone.
"""

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from django.db import connection

from tests.e2e.helpers import outside_transactions, tcp_ports
from tests.support.processes import child_env, wait_for

pytestmark = pytest.mark.e2e


def _client(in_transaction: bool) -> subprocess.Popen:
    """A Python process on the test database that prints "ready" once it is where it was asked to be."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        code = f"""
            import sqlite3, sys, time
            con = sqlite3.connect({db["NAME"]!r}, isolation_level=None)
            con.execute({"BEGIN IMMEDIATE" if in_transaction else "SELECT 1"!r})
            print("ready", flush=True)
            time.sleep(60)
        """
    else:
        code = f"""
            import psycopg, time
            con = psycopg.connect({child_env()["DATABASE_URL"]!r}, autocommit=True)
            con.execute({"BEGIN" if in_transaction else "SELECT 1"!r})
            con.execute("SELECT 1")
            print("ready", flush=True)
            time.sleep(60)
        """
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_a_process_stopped_inside_a_transaction_is_told_from_one_outside(transactional_db):
    inside, outside = _client(in_transaction=True), _client(in_transaction=False)
    try:
        for proc in (inside, outside):
            os.kill(proc.pid, signal.SIGSTOP)
        if connection.vendor == "postgresql":
            assert tcp_ports([inside.pid]) and not tcp_ports([inside.pid]) & tcp_ports([outside.pid])
            # The other process's open transaction does not make this one look inside one.
            assert outside_transactions([outside.pid])
        assert not outside_transactions([inside.pid])
        os.kill(inside.pid, signal.SIGKILL)
        inside.wait(timeout=10)
        # Its transaction ends with it; on PostgreSQL the session may take a moment to go.
        wait_for(lambda: outside_transactions([outside.pid, inside.pid]), timeout=10, what="the lock to go")
    finally:
        for proc in (inside, outside):
            proc.kill()
            proc.wait(timeout=10)
            proc.stdout.close()
