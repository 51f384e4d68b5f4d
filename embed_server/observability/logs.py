"""Log set-up: plain text or one JSON object per line, each record tagged with its request id.

The request id lives in a context variable set by the request middleware, so every log
line written while a request is handled (also deep in the service) carries it.
"""

from __future__ import annotations

import json
import logging
from contextvars import ContextVar

REQUEST_ID: ContextVar[str] = ContextVar("request_id", default="-")
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"
# Attributes every LogRecord has; anything else was passed through ``extra=`` and is data.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "request_id"}


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, request id, extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", "-"),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(as_json: bool) -> None:
    """Install one stderr handler on the root logger (replacing earlier ones)."""
    handler = logging.StreamHandler()
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter() if as_json else logging.Formatter(_TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(logging.INFO)
