"""Start-up stays readable: the periodic chores' INFO lines (beat's sends, a tick's or sweep's receipt
and success, about nine a second) are left out by default, so the printed admin login does not scroll
away; a run's lines, and any warning of a chore, stay. LOG_ROUTINE=true keeps them all."""

import logging

import pytest

from harness_site.logs import RoutineFilter, logging_config


def _record(name: str, message: str, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, (), None)


@pytest.mark.parametrize(
    ("name", "message", "level", "kept"),
    [
        (
            "celery.beat",
            "Scheduler: Sending due task harness: scheduler tick (runs.scheduler_tick)",
            logging.INFO,
            False,
        ),
        ("celery.worker.strategy", "Task runs.scheduler_tick[1f65] received", logging.INFO, False),
        ("celery.app.trace", "Task runs.sweep[f341] succeeded in 0.12s: {'expired': 0}", logging.INFO, False),
        ("celery.app.trace", "Task deadletters.alerts_check[aa] succeeded in 0.01s: None", logging.INFO, False),
        ("celery.app.trace", "Task runs.execute[56a2] succeeded in 0.13s: 'succeeded'", logging.INFO, True),
        ("celery.worker.strategy", "Task runs.execute[56a2] received", logging.INFO, True),
        ("celery.app.trace", "Task runs.sweep[f341] raised unexpected: OperationalError", logging.ERROR, True),
        ("celery.beat", "beat: Starting...", logging.INFO, True),
        ("harness.alerts", "run 75 failed for good", logging.ERROR, True),
    ],
)
def test_the_chores_routine_lines_are_left_out_and_the_rest_kept(name, message, level, kept):
    assert RoutineFilter().filter(_record(name, message, level)) is kept


def test_the_filter_is_on_by_default_and_log_routine_turns_it_off():
    assert logging_config(log_format="text", level="INFO")["handlers"]["console"]["filters"] == ["routine", "context"]
    assert logging_config(log_format="json", level="INFO", routine=True)["handlers"]["console"]["filters"] == [
        "context"
    ]
