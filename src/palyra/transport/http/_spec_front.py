"""The spec's routes, answered from the ASGI scope.

Every spec route is palyra's own: :class:`~palyra.transport.http._routes.RouteTable`
matches it, :class:`~palyra.transport.auth.Authenticator` names the caller,
:func:`~palyra.transport.http._decode.decode_request` builds its message, and the
generated ``UNARY``/``STREAMING`` tables call the application. Served through
Litestar's catch-all route, each request also built Litestar's ``Request``, its
headers and query objects, a ``Response`` and its ``ASGIResponse``, and every SSE
frame went through Litestar's exception middleware's ``send`` wrapper: work with no
part in the answer, on the turn's path and on every frame of its tape. So the front
(:class:`~palyra.transport.http._front.HttpFront`) hands spec paths here, and
Litestar serves only what is its own (the console's files, the OpenAPI document).

Unary answers are the response's proto3 JSON; server streams are SSE
(:class:`~palyra.transport.http._sse.SseResponse`); errors are the spec's
``ErrorDetail`` body with the mapped status.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Generic
from urllib.parse import parse_qsl

import betterproto2
import msgspec
import structlog
from litestar.types import Receive, Scope, Send
from palyra_gen.services import STREAMING, UNARY, PalyraServicesApp

from palyra.config import HttpConfig
from palyra.core.errors import ErrorCode, NotFound, PalyraError
from palyra.core.protojson import encode_message
from palyra.transport.auth import REQUEST_ID_HEADER, Authenticator
from palyra.transport.context import ContextFactory, CtxT
from palyra.transport.errors import to_wire
from palyra.transport.http._asgi import (
    Answer,
    Disconnected,
    answer,
    body_within_deadline,
    error_answer,
    request_headers,
)
from palyra.transport.http._decode import decode_request
from palyra.transport.http._routes import CompiledRoute, RouteTable
from palyra.transport.http._sse import SseResponse
from palyra.transport.logctx import bind_request
from palyra.transport.streams import OpenStreams

_log = structlog.get_logger("palyra.http")
_json = msgspec.json.Encoder()
_JSON = b"application/json"

PlainHandler = Callable[[Mapping[str, str]], Awaitable[tuple[int, str, bytes]]]
"""``(lower-cased headers) -> (status, media type, body)``: an operations endpoint."""

StaticHandler = Callable[[str], Awaitable[tuple[int, str, bytes, Mapping[str, str]]]]
"""``(path below the prefix) -> (status, media type, body, headers)``: one public read-only
resource; the headers say how long caches may keep it (``Cache-Control``)."""



class SpecFront(Generic[CtxT]):
    """Serves the spec's routes, the operations endpoints and the static trees."""

    def __init__(self, app: PalyraServicesApp[CtxT], *, authenticator: Authenticator,
                 make_ctx: ContextFactory[CtxT], config: HttpConfig, table: RouteTable,
                 plain: Mapping[str, PlainHandler] | None = None,
                 static: Mapping[str, StaticHandler] | None = None,
                 streams: OpenStreams | None = None) -> None:
        self._app = app
        self._auth = authenticator
        self._make_ctx = make_ctx
        self._config = config
        self._table = table
        self._plain = dict(plain or {})
        self._static = dict(static or {})
        self._streams = streams

    async def serve(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        """Answer one HTTP request for ``path`` (its raw, still percent-encoded form)."""
        fields: Mapping[str, Any] = scope
        method: str = fields["method"]
        started = time.perf_counter()
        request_id, rpc = "", "-"
        try:
            headers = request_headers(scope, self._config.max_headers)
            request_id = headers.get(REQUEST_ID_HEADER, "")
            served = await self._outside_spec(method, path, headers)
            if served is not None:
                await answer(send, served)
                return
            found = self._route(method, path)
            if isinstance(found, Answer):
                await answer(send, found)
                return
            compiled, path_params = found
            rpc = compiled.rpc
            caller = self._auth.authenticate(compiled.rpc, headers)
            if caller is not None:
                request_id = caller.request_id
            bind_request(request_id, caller, headers)
            body = await body_within_deadline(receive, headers, self._config, scope)
            query = parse_qsl(fields.get("query_string", b"").decode("latin-1"),
                              keep_blank_values=True, separator="&")
            message = decode_request(compiled, path_params, query, body, headers)
            ctx = self._make_ctx(caller)
            if compiled.server_streaming:
                await self._stream(compiled, ctx, message, request_id)(scope, receive, send)
                return
            result = await UNARY[compiled.python_method](self._app, ctx, message)
            _log.debug("http", rpc=rpc, status=200, request_id=request_id,
                       ms=round((time.perf_counter() - started) * 1000, 2))
            await answer(send, Answer(200, _JSON, _json.encode(encode_message(result))))
        except Disconnected:
            return  # the client went away before its body was in: no one to answer
        except Exception as exc:
            wire = to_wire(exc, request_id=request_id)
            _log.debug("http", rpc=rpc, status=wire.http_status, code=wire.code.value,
                       request_id=request_id)
            await answer(send, error_answer(wire))

    def _route(self, method: str, path: str) -> tuple[CompiledRoute, dict[str, str]] | Answer:
        """The route and path parameters, or the answer of OPTIONS or a wrong method."""
        table = self._table
        if method == "OPTIONS":
            allowed = table.allowed_methods(path)
            if not allowed:
                raise NotFound(f"no endpoint OPTIONS {path}")
            return Answer(204, b"", b"", ((b"allow", ", ".join([*allowed, "OPTIONS"]).encode()),))
        try:
            found = table.match(method, path)
        except LookupError:
            return method_not_allowed(method, path, table.allowed_methods(path))
        if found is None:
            raise NotFound(f"no endpoint {method} {path}")
        return found

    async def _outside_spec(self, method: str, path: str,
                            headers: Mapping[str, str]) -> Answer | None:
        """The answer of an operations endpoint or static resource for ``GET path``."""
        if method != "GET":
            return None
        handler = self._plain.get(path)
        if handler is not None:
            status, media_type, content = await handler(headers)
            return Answer(status, media_type.encode(), content)
        for prefix, serve in self._static.items():
            if path.startswith(prefix):
                status, media_type, content, extra = await serve(path[len(prefix):])
                return Answer(status, media_type.encode(), content, tuple(
                    (k.encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()))
        return None

    def _stream(self, compiled: CompiledRoute, ctx: CtxT, message: betterproto2.Message,
                request_id: str) -> SseResponse:
        argument: Any = _one(message) if compiled.client_streaming else message
        if isinstance(getattr(argument, "batch", None), bool):
            # SSE frames are one per event either way (sse_frame); asking the app for
            # batches only lets one commit's frames go out in one write.
            argument.batch = True
        return SseResponse(
            STREAMING[compiled.python_method](self._app, ctx, argument),
            error_grace_s=self._config.sse_error_grace_s,
            keepalive_s=self._config.sse_keepalive_s,
            request_id=request_id,
            streams=self._streams,
        )


def method_not_allowed(method: str, path: str, allowed: list[str]) -> Answer:
    """405 ``METHOD_NOT_ALLOWED`` with an ``Allow`` header naming the methods ``path`` takes."""
    allow = ", ".join(allowed)
    wire = to_wire(PalyraError(f"{method} is not allowed on {path}" + (f"; use {allow}" if allow else ""),
                               code=ErrorCode.METHOD_NOT_ALLOWED, details={"allow": allow}))
    return error_answer(wire, ((b"allow", allow.encode()),))


async def _one(message: betterproto2.Message) -> AsyncIterator[betterproto2.Message]:
    # RunStream over HTTP: one request message, then half-close.
    yield message
