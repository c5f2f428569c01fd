"""A broker outage must not flood the beat's log: one line per failed send, not ~200."""

import logging

from celery.beat import Scheduler

from harness_site.celery import app


class Boom(Scheduler):
    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        raise ConnectionRefusedError(111, "Connection refused\nsecond line")


def test_a_failed_beat_send_is_logged_on_one_line(caplog):
    scheduler = Boom(app=app, lazy=True)
    entry = scheduler.Entry(name="harness: tick", task="runs.scheduler_tick", app=app)
    with caplog.at_level(logging.ERROR, logger="celery.beat"):
        scheduler.apply_entry(entry)
    [record] = [r for r in caplog.records if r.name == "celery.beat"]
    text = caplog.text
    assert record.exc_info is None
    assert "ConnectionRefusedError" in record.getMessage() and "Connection refused second line" in record.getMessage()
    assert len(text.strip().splitlines()) == 1, text
