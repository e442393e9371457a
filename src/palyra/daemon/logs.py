"""Structured logging for the daemon: structlog, key=value or JSON, to stderr."""

from __future__ import annotations

import logging
import sys

import structlog

from palyra.config import LogConfig

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def configure_logging(config: LogConfig) -> None:
    """Route structlog and the stdlib loggers (uvicorn, grpclib) to stderr in one format."""
    level = _LEVELS[config.level]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if config.format == "json"
        else structlog.processors.KeyValueRenderer(key_order=["ts", "level", "event"])
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", key="ts"),
            # Tracebacks are for the operator's log only; clients never see them.
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("ts=%(asctime)s level=%(levelname)s logger=%(name)s "
                                           "event=%(message)r"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # Third-party chatter (uvicorn start lines, grpclib internals) only from WARNING.
    root.setLevel(max(level, logging.WARNING))
