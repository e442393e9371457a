"""The chat platforms' ingress, served from the ASGI scope in front of Litestar.

A platform's delivery (``POST <prefix>/<name>``) needs none of what Litestar does for a
spec route: no bearer token, no route table, no proto decoding. Yet through Litestar
each one built a ``Request``, its ``Headers``, a ``Response`` and its ``ASGIResponse``,
and passed the exception middleware and the router: per message, as much CPU as the
admission that answers it (py-spy on ``bench ingress``). So this front answers those
paths itself and hands every other request to the application unchanged.

It keeps what the catch-all route did for them: the header count (431), the body cap
(413 as soon as the declared length says so) and deadline (408), and every error as
the spec's ``ErrorDetail`` body with the code's mapped status.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import unquote

import msgspec
from litestar.types import ASGIApp, Receive, Scope, Send

from palyra.config import HttpConfig
from palyra.core.errors import ErrorCode, PalyraError
from palyra.transport.errors import to_wire

IngressHandler = Callable[[str, Mapping[str, str], bytes], Awaitable[dict[str, Any]]]
"""``(name, lower-cased headers, body) -> JSON answer``; raises ``PalyraError``."""

_json = msgspec.json.Encoder()
_JSON_TYPE = (b"content-type", b"application/json")


class _Disconnected(Exception):
    """The client went away before its body was in: there is no one to answer."""


def ingress_target(ingress: Mapping[str, IngressHandler], path: str
                   ) -> tuple[IngressHandler, str] | None:
    """``(handler, name)`` when ``path`` is ``<prefix>/<name>`` of a platform ingress."""
    for prefix, handle in ingress.items():
        name = path.removeprefix(prefix + "/")
        if name != path and name and "/" not in name:
            return handle, unquote(name)
    return None


def too_large(limit: int) -> PalyraError:
    """The 413 of a request body over ``limit`` bytes."""
    return PalyraError(f"request body exceeds {limit} bytes", code=ErrorCode.PAYLOAD_TOO_LARGE,
                       details={"limit_bytes": str(limit)})


async def _body(receive: Receive, declared: str | None, limit: int) -> bytes:
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message: Mapping[str, Any] = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class IngressFront:
    """An ASGI application: platform ingress answered here, the rest passed to ``app``."""

    def __init__(self, app: ASGIApp, ingress: Mapping[str, IngressHandler],
                 config: HttpConfig) -> None:
        """``ingress`` maps a path prefix to its handler (``POST <prefix>/<name>``)."""
        self._app = app
        self._ingress = dict(ingress)
        self._config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope."""
        fields: Mapping[str, Any] = scope
        if fields["type"] == "http" and fields["method"] == "POST":
            raw = fields.get("raw_path")
            path = raw.decode("latin-1") if raw else fields["path"]
            target = ingress_target(self._ingress, path)
            if target is not None:
                await self._serve(scope, receive, send, *target)
                return
        await self._app(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send,
                     handle: IngressHandler, name: str) -> None:
        config = self._config
        try:
            raw_headers: list[tuple[bytes, bytes]] = list(scope["headers"])
            if len(raw_headers) > config.max_headers:
                raise PalyraError(f"the request carries more than {config.max_headers} headers",
                                  code=ErrorCode.HEADERS_TOO_LARGE,
                                  details={"limit": str(config.max_headers)})
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw_headers}
            try:
                async with asyncio.timeout(config.body_timeout_s):
                    body = await _body(receive, headers.get("content-length"),
                                       config.max_request_bytes)
            except TimeoutError:
                raise PalyraError(
                    f"the request body did not arrive within {config.body_timeout_s:g} s",
                    code=ErrorCode.REQUEST_TIMEOUT) from None
            status, answer = 200, _json.encode(await handle(name, headers, body))
        except _Disconnected:
            return
        except Exception as exc:  # every refusal is the spec's error body and status
            wire = to_wire(exc)
            status, answer = wire.http_status, _json.encode(wire.http_body())
        await send({"type": "http.response.start", "status": status,
                    "headers": [_JSON_TYPE, (b"content-length", str(len(answer)).encode())]})
        await send({"type": "http.response.body", "body": answer, "more_body": False})
