"""The gateway's log stream: one JSON object per line, access log and everything else.

Log shippers (Promtail/Loki, Filebeat/ELK, Vector) parse a stream line by line; a
plain-text warning between JSON access lines is either dropped or indexed as garbage.
So every record on the stream is one object of the same family::

    {"ts": 1764504000.123, "level": "info", "logger": "kvroute.gateway.access", "request_id": ...}
    {"ts": 1764504001.456, "level": "error", "logger": "kvroute.gateway.capture", "msg": "capture cannot write to ..."}

``ts`` is seconds since the epoch, ``level`` the lower-case level name, ``logger`` the
logger's name. An access line (:class:`~kvroute.gateway.middleware.ObserveMiddleware`)
carries the request's fields; any other record carries ``msg``, plus ``exc`` (the
traceback text) when it has an exception and ``stack`` when it has a stack.
"""

from __future__ import annotations

import logging
from typing import Any, TextIO

import orjson

from kvroute.gateway.app import ACCESS_LOGGER


class JsonLinesFormatter(logging.Formatter):
    """Each record as one JSON object on one line (newlines in text are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        if record.name == ACCESS_LOGGER and not record.args and not record.exc_info:
            msg = record.msg
            if isinstance(msg, str) and msg.startswith("{"):
                return msg  # built whole by ObserveMiddleware, level and logger included
        line: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(line, default=str).decode()


def log_json_lines(stream: TextIO, level: int) -> None:
    """Send every log record of the process to ``stream`` as JSON lines at ``level``
    (as :func:`logging.basicConfig`: nothing changes when the root logger already has a
    handler). Python warnings become records too, so nothing else reaches the stream."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLinesFormatter())
    logging.basicConfig(level=level, handlers=[handler])
    logging.captureWarnings(True)
