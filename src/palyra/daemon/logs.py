"""Structured logging for the daemon: structlog, key=value, console or JSON, to stderr.

Every line, structlog's and the stdlib's (uvicorn, grpclib, the engine's
``logging`` calls) alike, goes through one chain: the request's context
(request id, principal, trace id; a run's session and run ids, see
``palyra.transport.logctx`` and the run actor), level, time, then
:class:`SecretScrubber`, then the renderer ``[log] format`` chose. No secret
reaches a line: values under secret keys, secret-shaped text (the journal's own
redaction rules) and the exact secrets this daemon was configured with are
replaced by ``<redacted>``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from palyra.config import LogConfig, PalyraConfig
from palyra.core.redaction import REDACTED, is_secret_key, redact_text

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}
_MIN_SECRET = 8  # shorter configured values would blank ordinary words
_MAX_DEPTH = 6


class SecretScrubber:
    """A structlog processor: hides secrets in every value of an event dict."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: list[str] = []
        self.add(*secrets)

    def add(self, *secrets: str) -> None:
        """Hide these exact values from now on (longest first, so none hides half of one)."""
        known = set(self._secrets) | {s for s in secrets if len(s) >= _MIN_SECRET}
        self._secrets = sorted(known, key=len, reverse=True)

    def __call__(self, logger: WrappedLogger, method: str, event: EventDict) -> EventDict:
        return {key: (REDACTED if is_secret_key(str(key)) else self._clean(value, 0))
                for key, value in event.items()}

    def _clean(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):
            return self._text(value)
        if depth >= _MAX_DEPTH or isinstance(value, bool | int | float) or value is None:
            return value
        if isinstance(value, Mapping):
            return {k: (REDACTED if is_secret_key(str(k)) else self._clean(v, depth + 1))
                    for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [self._clean(v, depth + 1) for v in value]
        return self._text(str(value))  # exceptions, paths, objects: as they would print

    def _text(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return redact_text(text)


def configured_secrets(config: PalyraConfig, env: Mapping[str, str]) -> list[str]:
    """Every secret the config holds or names: values of secret-named fields (tokens,
    signing secrets, ``connector_tokens``) and the env values ``*_env`` fields point at."""
    found: list[str] = []

    def walk(node: Any, depth: int) -> None:
        if depth > _MAX_DEPTH:
            return
        if dataclasses.is_dataclass(node) and not isinstance(node, type):
            for f in dataclasses.fields(node):
                value = getattr(node, f.name)
                if f.name.endswith("_env") and isinstance(value, str) and value:
                    found.append(env.get(value, ""))
                elif _secret_field(f.name):
                    found.extend(_strings(value))
                else:
                    walk(value, depth + 1)
        elif isinstance(node, Mapping):
            for key, value in node.items():
                if _secret_field(str(key)):
                    found.extend(_strings(value))
                else:
                    walk(value, depth + 1)
        elif isinstance(node, list | tuple):
            for item in node:
                walk(item, depth + 1)

    walk(config, 0)
    return [s for s in found if s]


def _secret_field(name: str) -> bool:
    return is_secret_key(name) or name == "token" or name.endswith(("_token", "_tokens"))


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value.split("=", 1)[-1], value]  # "TOKEN=principal" entries: both forms
    if isinstance(value, list | tuple):
        return [s for item in value for s in _strings(item)]
    return []


def configure_logging(config: LogConfig, secrets: Iterable[str] = ()) -> SecretScrubber:
    """Route structlog and the stdlib loggers to stderr in one format; returns the
    scrubber, so secrets known only later (a generated admin token) can be added."""
    level = _LEVELS[config.level]
    scrubber = SecretScrubber(secrets)
    renderer: Processor = (
        structlog.processors.JSONRenderer() if config.format == "json"
        else structlog.dev.ConsoleRenderer(colors=False) if config.format == "console"
        else structlog.processors.KeyValueRenderer(key_order=["ts", "level", "event"])
    )
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", key="ts"),
        # Tracebacks are for the operator's log only; clients never see them.
        structlog.processors.format_exc_info,
    ]
    structlog.configure(
        processors=[*shared, scrubber, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, scrubber,
                    renderer]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # Third-party chatter (uvicorn start lines, grpclib internals) only from WARNING;
    # palyra's own stdlib loggers at the configured level.
    root.setLevel(max(level, logging.WARNING))
    logging.getLogger("palyra").setLevel(level)
    return scrubber


def daemon_secrets(config: PalyraConfig) -> list[str]:
    """:func:`configured_secrets` of ``config`` with this process's environment."""
    return configured_secrets(config, os.environ)
