"""The embedded broker (harness_site/broker.py): a message is never read half-written.

kombu's file-system reader takes every file whose name contains ".<queue>.msg"; a writer in
another process must therefore never expose a partial file under such a name (kombu#1551).
"""

import multiprocessing

import pytest
from kombu import Connection

MESSAGES = 2000


def _options(folder):
    return {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "processed_folder": str(folder / "processed"),
        "store_processed": False,
        "polling_interval": 0.01,
    }


def _write(folder, errors):
    try:
        with Connection(transport="harness_site.broker:Transport", transport_options=_options(folder)) as conn:
            queue = conn.SimpleQueue("celery")
            for n in range(MESSAGES):
                queue.put({"n": n, "pad": "x" * 2000})
    except Exception as exc:  # the writer's failure is the test's failure
        errors.put(repr(exc))


@pytest.mark.timeout(120)
def test_a_reader_in_another_process_never_sees_a_half_written_message(tmp_path):
    (tmp_path / "processed").mkdir()
    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    writer = ctx.Process(target=_write, args=(tmp_path, errors))
    seen, bad = set(), []
    with Connection(transport="harness_site.broker:Transport", transport_options=_options(tmp_path)) as conn:
        queue = conn.SimpleQueue("celery")
        writer.start()
        while len(seen) + len(bad) < MESSAGES and (writer.is_alive() or any(tmp_path.glob("*.msg"))):
            try:
                message = queue.get(timeout=0.5)
            except queue.Empty:
                continue
            except ValueError as exc:  # JSONDecodeError: an empty or partial file was read
                bad.append(repr(exc))
                continue
            seen.add(message.payload["n"])
            message.ack()
        writer.join(timeout=30)
    writer_errors = [] if errors.empty() else [errors.get()]
    assert writer_errors == []  # e.g. the .part file taken by the reader before the writer renamed it
    assert bad == []
    assert seen == set(range(MESSAGES))
