"""Races on the real database: callers released together, each on a connection of its own."""

import threading

from django.db import connection


def run_concurrently(fn, n: int) -> list:
    """Call fn(i) from n threads released together, each on its own database connection."""
    barrier = threading.Barrier(n)
    results: list = [None] * n
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            connection.ensure_connection()  # connect first, so the claims themselves start together
            barrier.wait(timeout=60)
            results[i] = fn(i)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a racer hung"
    assert not errors, errors
    return results
