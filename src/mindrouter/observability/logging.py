"""Structured JSON logs; every line of a request carries its request id through contextvars."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import orjson
import structlog

log = structlog.get_logger("mindrouter")


class _StderrLogger:
    """Writes each rendered line to whatever `sys.stderr` is at that moment, and never raises:
    a log line that cannot be written must not fail the request that produced it."""

    def msg(self, message: str) -> None:
        try:
            stream = sys.stderr
            stream.write(message + "\n")
            stream.flush()
        except (ValueError, OSError):
            pass

    debug = info = warning = warn = error = err = critical = exception = fatal = msg


def _json_line(event: dict[str, Any], default: Callable[[Any], Any] | None = None, **_: Any) -> str:
    """One event as a line of JSON. orjson takes about a third of the stdlib encoder's time
    (every request logs a line); what it refuses (an integer wider than 64 bits) goes to the
    stdlib encoder, which takes everything, so a log line never fails its request."""
    try:
        return orjson.dumps(event, default=default, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(event, default=default or repr)


def _stderr_logger(*_: object) -> _StderrLogger:
    return _StderrLogger()


def configure_logging(level: str = "INFO", json: bool = True) -> None:
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer(serializer=_json_line)
        if json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr)
