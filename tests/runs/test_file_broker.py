"""The embedded broker (harness_site/broker.py): a message is never read half-written.

kombu's file-system reader takes every file whose name contains ".<queue>.msg"; a writer in
another process must therefore never expose a partial file under such a name (kombu#1551).
"""

import subprocess
import sys
import time

import pytest
from kombu import Connection

from tests.support.processes import ROOT

MESSAGES = 2000
WRITER = """
import sys
import pytest
from kombu import Connection
folder = sys.argv[1]
options = {"data_folder_in": folder, "data_folder_out": folder, "store_processed": False}
with Connection(transport="harness_site.broker:Transport", transport_options=options) as conn:
    queue = conn.SimpleQueue("celery")
    for n in range(int(sys.argv[2])):
        queue.put({"n": n, "pad": "x" * 2000})
"""


def test_a_reader_in_another_process_never_sees_a_half_written_message(tmp_path):
    # The reader polls without pause, so it keeps up with the writer and looks while files are written.
    options = {
        "data_folder_in": str(tmp_path),
        "data_folder_out": str(tmp_path),
        "store_processed": False,
        "polling_interval": 0,
    }
    seen, bad = set(), []
    with Connection(transport="harness_site.broker:Transport", transport_options=options) as conn:
        queue = conn.SimpleQueue("celery")
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(MESSAGES)],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while len(seen) + len(bad) < MESSAGES and time.monotonic() < deadline:
            if writer.poll() is not None and not any(tmp_path.glob("*.msg")):
                break  # the writer is done and nothing is left to read
            try:
                message = queue.get(timeout=0.2)
            except queue.Empty:
                continue
            except ValueError as exc:  # JSONDecodeError: an empty or partial file was read
                bad.append(repr(exc))
                continue
            seen.add(message.payload["n"])
            message.ack()
        _, stderr = writer.communicate(timeout=60)
    # e.g. FileNotFoundError: the reader took the writer's temporary file before it was renamed
    assert writer.returncode == 0, stderr[-2000:]
    assert bad == []
    assert seen == set(range(MESSAGES))


def _options(folder) -> dict:
    return {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "claims_folder": str(folder / "claims"),
        "store_processed": False,
        "polling_interval": 0,
    }


CONSUMER = """
import os, sys, time
import pytest
from kombu import Connection
options = {"data_folder_in": sys.argv[1] + "/queue", "data_folder_out": sys.argv[1] + "/queue",
           "claims_folder": sys.argv[1] + "/claims", "store_processed": False, "polling_interval": 0}
with Connection(transport="harness_site.broker:Transport", transport_options=options) as conn:
    queue = conn.SimpleQueue("celery")
    got = [queue.get(timeout=10) for _ in range(2)]  # received, never acknowledged
    print(" ".join(str(m.payload["n"]) for m in got), flush=True)
    time.sleep(600)
"""


def test_messages_a_consumer_received_come_back_when_it_is_killed_and_only_then(tmp_path):
    (tmp_path / "queue").mkdir()
    with Connection(transport="harness_site.broker:Transport", transport_options=_options(tmp_path)) as conn:
        queue = conn.SimpleQueue("celery")
        for n in range(3):
            queue.put({"n": n})
        consumer = subprocess.Popen(
            [sys.executable, "-c", CONSUMER, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        try:
            taken = {int(n) for n in consumer.stdout.readline().split()}
            assert len(taken) == 2
            # Alive: its two messages are claimed, not queued; only the third can be had.
            first = queue.get(timeout=5)
            assert {first.payload["n"]} == {0, 1, 2} - taken
            first.ack()
            with pytest.raises(queue.Empty):
                queue.get(timeout=1.5)
        finally:
            consumer.kill()
            consumer.communicate()
        # Dead (kill -9): its claims go back to the queue at the next read.
        back = [queue.get(timeout=5) for _ in range(2)]
        assert {m.payload["n"] for m in back} == taken
        for m in back:
            m.ack()
    assert not [p for p in (tmp_path / "queue").iterdir() if p.name.endswith(".msg")]
    assert not any((tmp_path / "claims").rglob("*.msg"))
