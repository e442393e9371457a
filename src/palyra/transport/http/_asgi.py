"""What the HTTP fronts need of ASGI: the request's headers and body, and one answer.

The fronts (:mod:`._front`, :mod:`._ingress_front`, :mod:`._spec_front`) answer from
the ASGI scope rather than through Litestar's request and response objects; these are
the few pieces they share, with the limits every request is held to: the header count
(431), the body cap (413 as soon as the declared length says so).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, NamedTuple

import msgspec
from litestar.types import Receive, Scope, Send

from palyra.config import HttpConfig
from palyra.core.errors import ErrorCode, PalyraError
from palyra.transport.errors import WireError

_json = msgspec.json.Encoder()
_NONE: Mapping[str, Any] = {}

ON_DISCONNECT = "palyra.on_disconnect"
"""The scope's extension (``scope["extensions"][ON_DISCONNECT]``) that calls a function when
the connection is lost: ``watch(callback)`` returns the function that stops the watch.

A response that streams for as long as its client stays (SSE) must stop when it leaves.
The ASGI way is a task blocked in ``receive()`` for ``http.disconnect``: one more task,
its start, its wake-up and its cancellation on every RunStream turn over HTTP, for an
event that almost never comes. The protocol that sees the connection go calls back
instead. A callback watched after the connection is gone is called soon, as a waiting
``receive()`` would have returned at once."""


class Disconnected(Exception):
    """The client went away before its body was in: there is no one to answer."""


class Answer(NamedTuple):
    """A whole HTTP answer: status, media type (empty: none), body, more headers."""

    status: int
    media_type: bytes
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()


def error_answer(wire: WireError, headers: tuple[tuple[bytes, bytes], ...] = ()) -> Answer:
    """The spec's ``ErrorDetail`` JSON with the code's mapped HTTP status."""
    return Answer(wire.http_status, b"application/json", _json.encode(wire.http_body()), headers)


async def answer(send: Send, reply: Answer) -> None:
    """Send ``reply`` whole (its length declared, but on a 204 or 304, which have none)."""
    headers = list(reply.headers) if reply.status in (204, 304) else [
        (b"content-length", str(len(reply.body)).encode()), *reply.headers]
    if reply.media_type:
        headers.insert(0, (b"content-type", reply.media_type))
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body, "more_body": False})


def request_headers(scope: Scope, max_headers: int) -> dict[str, str]:
    """The request's headers, names lower-cased (a repeated name: its last value), or
    ``HEADERS_TOO_LARGE`` past ``max_headers`` of them."""
    raw: list[tuple[bytes, bytes]] = list(scope["headers"])
    if len(raw) > max_headers:
        raise PalyraError(f"the request carries more than {max_headers} headers",
                          code=ErrorCode.HEADERS_TOO_LARGE, details={"limit": str(max_headers)})
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}


def too_large(limit: int) -> PalyraError:
    """The 413 of a request body over ``limit`` bytes."""
    return PalyraError(f"request body exceeds {limit} bytes", code=ErrorCode.PAYLOAD_TOO_LARGE,
                       details={"limit_bytes": str(limit)})


async def read_body(receive: Receive, declared: str | None, limit: int) -> bytes:
    """The whole request body, refusing anything above ``limit`` bytes as early as possible."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message: Mapping[str, Any] = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


BODY_DEADLINE = "palyra.body_deadline"
"""The scope extension of a server that bounds a request body in time itself (408 and
close, ``_limits.py``): its value's ``timeout_s`` is that bound."""


async def body_within_deadline(receive: Receive, headers: Mapping[str, str],
                               config: HttpConfig, scope: Mapping[str, Any] | None = None
                               ) -> bytes:
    """The request body, capped in size, or ``REQUEST_TIMEOUT`` past the body deadline.

    Where the server already holds the body to a deadline no later than
    ``config.body_timeout_s`` (the :data:`BODY_DEADLINE` extension in ``scope``), that one
    deadline serves: no timer is armed and cancelled here for every request.
    """
    if scope is not None:
        bound = (scope.get("extensions") or _NONE).get(BODY_DEADLINE)
        if bound is not None and bound["timeout_s"] <= config.body_timeout_s:
            return await read_body(receive, headers.get("content-length"),
                                   config.max_request_bytes)
    try:
        async with asyncio.timeout(config.body_timeout_s):
            return await read_body(receive, headers.get("content-length"),
                                   config.max_request_bytes)
    except TimeoutError:
        raise PalyraError(f"the request body did not arrive within {config.body_timeout_s:g} s",
                          code=ErrorCode.REQUEST_TIMEOUT) from None
