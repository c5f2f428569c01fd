"""Log lines that say which run and trace they belong to (LOG_FORMAT, docs/observability.md).

`ContextFilter` (on the console handler) puts the current trace id, span id, run id, biz_key, rule
and attempt on every record (harness_site/tracing.py keeps them in the context). The default text
format appends them in brackets when there are any; LOG_FORMAT=json writes one JSON object per line
with the same fields as keys, for a log shipper.
"""

import json
import logging
from datetime import UTC, datetime

from harness_site.tracing import log_fields

# The keys a JSON line may carry besides time, level, logger and message (always present, maybe null).
CONTEXT_KEYS = ("trace_id", "span_id", "run_id", "biz_key", "rule", "attempt")


class ContextFilter(logging.Filter):
    """Adds the context fields to the record (each as an attribute, plus `harness_context` for text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = log_fields()
        for key in CONTEXT_KEYS:
            if not hasattr(record, key):
                setattr(record, key, fields.get(key))
        shown = [f"{key}={fields[key]}" for key in ("trace_id", "run_id", "attempt") if fields.get(key) is not None]
        record.harness_context = f" [{' '.join(shown)}]" if shown else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the context keys,
    process, and the formatted exception when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in CONTEXT_KEYS:
            line[key] = getattr(record, key, None)
        line["process"] = record.process
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


# The harness's own chores, sent by beat every second or so: their receipts and successes are routine.
ROUTINE_TASKS = ("runs.scheduler_tick", "runs.sweep", "tasks.sensors_scan", "deadletters.alerts_check")


class RoutineFilter(logging.Filter):
    """Drops the INFO lines of the harness's own periodic chores (beat's "Sending due task", the
    worker's "received" and "succeeded" of a tick or sweep): about nine a second, which scroll the
    start-up lines (the admin login) away. Their warnings and errors, and every run's lines, stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        if record.name == "celery.beat":
            return not record.getMessage().startswith("Scheduler: Sending due task")
        if record.name in ("celery.worker.strategy", "celery.app.trace"):
            message = record.getMessage()
            return not any(f"Task {task}[" in message for task in ROUTINE_TASKS)
        return True


def logging_config(*, log_format: str, level: str, routine: bool = False) -> dict:
    """The LOGGING dict of harness_site.settings for LOG_FORMAT `text` or `json`; `routine` keeps
    the periodic chores' INFO lines (LOG_ROUTINE)."""
    filters = ["context"] if routine else ["routine", "context"]
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "context": {"()": "harness_site.logs.ContextFilter"},
            "routine": {"()": "harness_site.logs.RoutineFilter"},
        },
        "formatters": {
            "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s%(harness_context)s"},
            "json": {"()": "harness_site.logs.JsonFormatter"},
        },
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": log_format, "filters": filters}},
        "root": {"handlers": ["console"], "level": level},
        # httpx logs every request's full URL at INFO; alert webhook URLs carry tokens (never log them).
        "loggers": {
            "django.db.backends": {"level": "WARNING"},
            "httpx": {"level": "WARNING"},
            "httpcore": {"level": "WARNING"},
            # django-axes logs every successful login's (empty) reset at INFO; lockouts are warnings.
            "axes": {"level": "WARNING"},
        },
    }
