"""The gateway's requests and answers as plain ASGI, and the front that routes to Litestar.

Every spec route, platform ingress and operations endpoint is one catch-all handler
(``app.create_http_app``) that does its own matching, decoding and error mapping, so it
used nothing of Litestar but the plumbing around it: the router, the ``Request`` and
``Response`` objects, the exception middleware and the response's conversion back to
ASGI messages. On a short request (a chat platform's delivery, a tool-loop turn's
``POST /v1/runs:stream``) that plumbing cost as much of the event loop as the handler
(``bench ingress``, ``bench tool-loop --transport http``, py-spy). :class:`HttpApp`
serves those requests straight from the ASGI scope; Litestar keeps what it is good at
here, the OpenAPI document and the console's files.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import cast

import msgspec
from litestar import Litestar, Response
from litestar.enums import ScopeType
from litestar.types import Receive, Scope, Send

from palyra.config import HttpConfig
from palyra.core.errors import ErrorCode, PalyraError
from palyra.transport.errors import WireError

_json = msgspec.json.Encoder()
JSON = "application/json"


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """A whole HTTP answer: status, body, media type and any further headers."""

    status: int
    body: bytes
    media_type: str = JSON
    headers: tuple[tuple[str, str], ...] = ()

    async def send(self, send: Send) -> None:
        """Send it as the two ASGI messages of a response."""
        head = [(b"content-type", self.media_type.encode("latin-1")),
                (b"content-length", str(len(self.body)).encode())]
        head += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in self.headers]
        await send({"type": "http.response.start", "status": self.status, "headers": head})
        await send({"type": "http.response.body", "body": self.body, "more_body": False})

    def litestar(self) -> Response[bytes]:
        """The same answer as a Litestar ``Response`` (for Litestar's own exception hook)."""
        return Response(content=self.body, status_code=self.status, media_type=self.media_type,
                        headers=dict(self.headers))


def error_answer(wire: WireError, headers: tuple[tuple[str, str], ...] = ()) -> Answer:
    """An ``ErrorDetail`` JSON answer with the code's mapped HTTP status."""
    return Answer(wire.http_status, _json.encode(wire.http_body()), JSON, headers)


def too_large(limit: int) -> PalyraError:
    """The 413 of a body over ``limit`` bytes."""
    return PalyraError(f"request body exceeds {limit} bytes", code=ErrorCode.PAYLOAD_TOO_LARGE,
                       details={"limit_bytes": str(limit)})


async def receive_body(receive: Receive, headers: Mapping[str, str], limit: int) -> bytes:
    """The request body, refusing anything above ``limit`` bytes (→ 413) as early as possible:
    a declared ``content-length`` before reading, else as soon as the bytes pass it."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise PalyraError("the client went away before its request body arrived",
                              code=ErrorCode.CANCELLED)
        chunk = cast(bytes, message.get("body", b""))
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def body_within_deadline(receive: Receive, headers: Mapping[str, str],
                               config: HttpConfig) -> bytes:
    """The request body, capped in size, or ``REQUEST_TIMEOUT`` past the body deadline."""
    try:
        async with asyncio.timeout(config.body_timeout_s):
            return await receive_body(receive, headers, config.max_request_bytes)
    except TimeoutError:
        raise PalyraError(f"the request body did not arrive within {config.body_timeout_s:g} s",
                          code=ErrorCode.REQUEST_TIMEOUT) from None


class HttpApp:
    """The gateway's ASGI application.

    HTTP requests for one of ``exact`` paths or under one of ``prefixes`` go to the
    Litestar app; every other HTTP request goes straight to ``serve``. Other scopes
    (lifespan) go to Litestar.
    """

    def __init__(self, litestar: Litestar, serve: Callable[[Scope, Receive, Send], Awaitable[None]],
                 *, exact: tuple[str, ...], prefixes: tuple[str, ...]) -> None:
        self.litestar = litestar
        self._serve = serve
        self._exact = frozenset(exact)
        self._prefixes = prefixes

    def _for_litestar(self, path: str) -> bool:
        return path in self._exact or path.startswith(self._prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP and not self._for_litestar(scope["path"]):
            await self._serve(scope, receive, send)
        else:
            await self.litestar(scope, receive, send)
