"""Structured logging for Inlet's services and CLI: plain text or JSON lines on stderr.

>>> configure(level="INFO", fmt="json")
>>> log_event(logging.getLogger("inlet.cli"), logging.INFO, "write finished", inserts=3, elapsed_s=0.2)
{"ts": "2024-05-01T10:00:00.123Z", "level": "INFO", "logger": "inlet.cli", "message": "write finished",
 "inserts": 3, "elapsed_s": 0.2}

``INLET_LOG_LEVEL`` and ``INLET_LOG_FORMAT`` (``text`` | ``json``) hold the defaults.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import IO, Any

LOG_LEVEL_ENV = "INLET_LOG_LEVEL"
LOG_FORMAT_ENV = "INLET_LOG_FORMAT"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("text", "json")
DEFAULT_LEVEL = "WARNING"
DEFAULT_FORMAT = "text"

_FIELDS_ATTR = "inlet_fields"  # = inlet.core.progress.FIELDS_ATTR (not imported: logs stay light)
PROGRESS_LOGGER = "inlet.progress"  # = inlet.core.progress.LOGGER: long jobs' throttled progress lines
_BASE_KEYS = ("ts", "level", "logger", "message")
_HANDLER_NAME = "inlet-structured"


def _timestamp(record: logging.LogRecord) -> str:
    moment = dt.datetime.fromtimestamp(record.created, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _fields(record: logging.LogRecord) -> Mapping[str, Any]:
    fields = getattr(record, _FIELDS_ATTR, None)
    return fields if isinstance(fields, Mapping) else {}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, message, then the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _fields(record).items():
            doc[f"field_{key}" if key in _BASE_KEYS else key] = value
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class TextFormatter(logging.Formatter):
    """``<ts> <LEVEL> <logger>: <message> key=value ...``."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        extra = " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in _fields(record).items())
        if extra:
            line = f"{line} {extra}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def resolve_level(level: str | None = None) -> str:
    """The level to use: ``level``, else ``$INLET_LOG_LEVEL``, else WARNING; raises ValueError if unknown."""
    value = (level or os.environ.get(LOG_LEVEL_ENV) or DEFAULT_LEVEL).strip().upper()
    if value not in LEVELS:
        source = "log level" if level else LOG_LEVEL_ENV
        raise ValueError(f"invalid {source} {value!r} (choose from {', '.join(LEVELS)})")
    return value


def resolve_format(fmt: str | None = None) -> str:
    """The format to use: ``fmt``, else ``$INLET_LOG_FORMAT``, else text; raises ValueError if unknown."""
    value = (fmt or os.environ.get(LOG_FORMAT_ENV) or DEFAULT_FORMAT).strip().lower()
    if value not in FORMATS:
        source = "log format" if fmt else LOG_FORMAT_ENV
        raise ValueError(f"invalid {source} {value!r} (choose from {', '.join(FORMATS)})")
    return value


def configure(level: str | None = None, fmt: str | None = None, stream: IO[str] | None = None) -> None:
    """Send log records of ``level`` and above to ``stream`` (stderr) as text or JSON lines.

    Python warnings (e.g. library deprecation notices) are logged only at DEBUG, so that a
    command's stderr stays readable. Calling it again replaces the previous configuration.
    """
    lvl = resolve_level(level)
    formatter: logging.Formatter = JsonFormatter() if resolve_format(fmt) == "json" else TextFormatter()
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter)
    root.addHandler(handler)
    root.setLevel(lvl)
    # progress of long jobs shows at the default level (WARNING); a level above it hides it too
    logging.getLogger(PROGRESS_LOGGER).setLevel(logging.INFO if lvl == "WARNING" else logging.NOTSET)
    logging.captureWarnings(True)
    logging.getLogger("py.warnings").setLevel(logging.DEBUG if lvl == "DEBUG" else logging.CRITICAL)


def log_event(logger: logging.Logger, level: int, message: str, **fields: Any) -> None:
    """Log ``message`` with structured ``fields`` (JSON keys, or ``key=value`` in text)."""
    logger.log(level, message, extra={_FIELDS_ATTR: fields})
