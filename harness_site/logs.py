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
        line = {
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


def logging_config(*, log_format: str, level: str) -> dict:
    """The LOGGING dict of harness_site.settings for LOG_FORMAT `text` or `json`."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": "harness_site.logs.ContextFilter"}},
        "formatters": {
            "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s%(harness_context)s"},
            "json": {"()": "harness_site.logs.JsonFormatter"},
        },
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": log_format, "filters": ["context"]}},
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
