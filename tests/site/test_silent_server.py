"""The suite's own hung server (tests/support/servers.py) stops accepting when it is closed: a thread
left in accept() on a closed listener took a later test's connection once its descriptor number was
reused (a live server's request reset by peer)."""

import socket
import threading

from tests.support.servers import SilentServer


def test_closing_it_ends_its_accept_thread_so_a_reused_descriptor_is_never_read():
    before = set(threading.enumerate())
    server = SilentServer()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5):
        pass
    server.close()
    assert [t.name for t in set(threading.enumerate()) - before] == []
    # The next listener usually takes the closed one's descriptor number: its connections are its own.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(5)
        with socket.create_connection(listener.getsockname(), timeout=5):
            conn, _ = listener.accept()
            conn.close()
