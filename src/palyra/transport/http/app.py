"""The HTTP/JSON + SSE gateway (Litestar), routed by the spec's route table.

One catch-all handler matches the request against
:class:`~palyra.transport.http._routes.RouteTable` (compiled from
``palyra_gen.http_routes.ROUTES``), authenticates, decodes strictly, and calls
the same application method the gRPC gateway calls, through the generated
``palyra_gen.services.UNARY``/``STREAMING`` tables (one typed call per RPC). Unary answers are the
response's proto3 JSON; server streams are SSE; errors are the spec's
``ErrorDetail`` body with the mapped status.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import betterproto2
import msgspec
import structlog
from litestar import Litestar, Request, Response, get, route
from litestar.enums import HttpMethod
from litestar.exceptions import HTTPException
from litestar.types import ASGIApp
from palyra_gen.services import STREAMING, UNARY, PalyraServicesApp

from palyra.config import HttpConfig
from palyra.core.errors import ErrorCode, NotFound, PalyraError
from palyra.core.protojson import encode_message
from palyra.imports import LITESTAR_APP_WITHOUT, absent
from palyra.transport.auth import REQUEST_ID_HEADER, Authenticator
from palyra.transport.context import ContextFactory, CtxT
from palyra.transport.errors import WireError, to_wire
from palyra.transport.http._console import CONSOLE_HANDLERS
from palyra.transport.http._decode import decode_request
from palyra.transport.http._ingress_front import IngressFront, too_large
from palyra.transport.http._ingress_front import IngressHandler as IngressHandler
from palyra.transport.http._openapi import build_openapi
from palyra.transport.http._routes import CompiledRoute, RouteTable
from palyra.transport.http._sse import SseResponse
from palyra.transport.logctx import bind_request
from palyra.transport.streams import OpenStreams

_log = structlog.get_logger("palyra.http")
_json = msgspec.json.Encoder()
_OPENAPI_PATH = "/schema/openapi.json"
_METHODS = [HttpMethod.GET, HttpMethod.POST, HttpMethod.PATCH, HttpMethod.DELETE, HttpMethod.PUT,
            HttpMethod.OPTIONS]


# Statuses Litestar itself may answer with, and the code whose spec mapping has
# that status.
_HTTP_STATUS_CODES = {
    400: ErrorCode.MALFORMED_REQUEST, 401: ErrorCode.UNAUTHENTICATED,
    403: ErrorCode.PERMISSION_DENIED, 404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED, 413: ErrorCode.PAYLOAD_TOO_LARGE,
    429: ErrorCode.RESOURCE_EXHAUSTED, 501: ErrorCode.UNIMPLEMENTED,
    503: ErrorCode.UNAVAILABLE,
}


def error_response(wire: WireError) -> Response[bytes]:
    """An ``ErrorDetail`` JSON answer with the code's mapped HTTP status."""
    return Response(
        content=_json.encode(wire.http_body()),
        status_code=wire.http_status,
        media_type="application/json",
    )


def _method_not_allowed(method: str, path: str, allowed: list[str]) -> Response[bytes]:
    """405 ``METHOD_NOT_ALLOWED`` with an ``Allow`` header naming the methods ``path`` takes."""
    allow = ", ".join(allowed)
    wire = to_wire(PalyraError(f"{method} is not allowed on {path}" + (f"; use {allow}" if allow else ""),
                               code=ErrorCode.METHOD_NOT_ALLOWED, details={"allow": allow}))
    response = error_response(wire)
    response.headers["allow"] = allow
    return response


def _options(path: str, allowed: list[str]) -> Response[bytes]:
    """``OPTIONS``: 204 with the methods this path really takes (404 for an unknown path)."""
    if not allowed:
        raise NotFound(f"no endpoint OPTIONS {path}")
    return Response(content=b"", status_code=204,
                    headers={"allow": ", ".join([*allowed, "OPTIONS"])})


async def read_body(request: Request[Any, Any, Any], limit: int) -> bytes:
    """The request body, refusing anything above ``limit`` bytes (→ 413) as early as possible."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def _one(message: betterproto2.Message) -> AsyncIterator[betterproto2.Message]:
    # RunStream over HTTP: one request message, then half-close.
    yield message


async def _body_within_deadline(request: Request[Any, Any, Any], config: HttpConfig) -> bytes:
    """The request body, capped in size, or ``REQUEST_TIMEOUT`` past the body deadline."""
    try:
        async with asyncio.timeout(config.body_timeout_s):
            return await read_body(request, config.max_request_bytes)
    except TimeoutError:
        raise PalyraError(f"the request body did not arrive within {config.body_timeout_s:g} s",
                          code=ErrorCode.REQUEST_TIMEOUT) from None


def create_http_app(
    app: PalyraServicesApp[CtxT],
    *,
    authenticator: Authenticator,
    make_ctx: ContextFactory[CtxT],
    config: HttpConfig,
    routes: RouteTable | None = None,
    ingress: Mapping[str, IngressHandler] | None = None,
    plain: Mapping[str, PlainHandler] | None = None,
    streams: OpenStreams | None = None,
    static: Mapping[str, StaticHandler] | None = None,
) -> ASGIApp:
    """Build the Litestar application serving every spec route of ``app``.

    ``plain`` maps a path to an operations endpoint outside the spec (``/metrics``,
    ``/readyz``): ``GET`` only, it authenticates on its own and answers any content
    type. ``streams`` counts the open SSE responses.

    ``static`` maps a path prefix (ending in ``/``) to a read-only tree of resources
    outside the spec (the transparency log's ``/tlog/`` for ``tlog-tiles`` clients):
    ``GET`` only, no authentication, the rest of the path handed to the handler.

    ``ingress`` maps a path prefix to a platform ingress (``POST <prefix>/<name>``):
    chat platforms sign their own requests, so these routes take no bearer token
    and answer the platform's JSON; their errors use the spec's codes too. They are
    answered in front of Litestar (:class:`IngressFront`).
    """
    table = routes or RouteTable()
    openapi = _json.encode(build_openapi(table))

    @get(_OPENAPI_PATH, media_type="application/json", sync_to_thread=False)
    def openapi_document() -> Response[bytes]:
        return Response(content=openapi, media_type="application/json")

    @route("/{path:path}", http_method=_METHODS)
    async def dispatch(request: Request[Any, Any, Any]) -> ASGIApp:
        started = time.perf_counter()
        headers = {k.lower(): v for k, v in request.headers.items()}
        request_id = headers.get(REQUEST_ID_HEADER, "")
        raw_path = request.scope.get("raw_path", b"").decode("latin-1") or request.scope["path"]
        rpc = "-"
        try:
            if len(list(request.scope.get("headers", ()))) > config.max_headers:
                raise PalyraError(f"the request carries more than {config.max_headers} headers",
                                  code=ErrorCode.HEADERS_TOO_LARGE,
                                  details={"limit": str(config.max_headers)})
            served = await _outside_spec(plain, static, request.method, raw_path, headers)
            if served is not None:
                status, media_type, content, extra = served
                return Response(content=content, status_code=status,  # type: ignore[return-value]
                                media_type=media_type, headers=dict(extra))
            if request.method == HttpMethod.OPTIONS:
                return _options(raw_path, table.allowed_methods(raw_path))  # type: ignore[return-value]
            try:
                found = table.match(request.method, raw_path)
            except LookupError:
                return _method_not_allowed(  # type: ignore[return-value]
                    request.method, raw_path, table.allowed_methods(raw_path))
            if found is None:
                raise NotFound(f"no endpoint {request.method} {raw_path}")
            compiled, path_params = found
            rpc = compiled.rpc
            caller = authenticator.authenticate(compiled.rpc, headers)
            if caller is not None:
                request_id = caller.request_id
            bind_request(request_id, caller, headers)
            body = await _body_within_deadline(request, config)
            message = decode_request(compiled, path_params, request.query_params.multi_items(),
                                     body, headers)
            ctx = make_ctx(caller)
            if compiled.server_streaming:
                return _stream(app, compiled, ctx, message, config, request_id, streams)
            result = await UNARY[compiled.python_method](app, ctx, message)
            _log.debug("http", rpc=rpc, status=200, request_id=request_id,
                       ms=round((time.perf_counter() - started) * 1000, 2))
            return Response(  # type: ignore[return-value]
                content=_json.encode(encode_message(result)), status_code=200,
                media_type="application/json",
            )
        except Exception as exc:
            wire = to_wire(exc, request_id=request_id)
            _log.debug("http", rpc=rpc, status=wire.http_status, code=wire.code.value,
                       request_id=request_id)
            return error_response(wire)  # type: ignore[return-value]

    def on_http_exception(request: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
        # Litestar's own refusals (e.g. a method no handler takes). The status
        # always follows the chosen code's spec mapping, so body and status agree.
        if exc.status_code == 405:
            path = request.scope["path"]
            allowed = ["GET"] if path == _OPENAPI_PATH else table.allowed_methods(path)
            if not allowed:  # only the catch-all matched: the path is unknown
                return error_response(to_wire(NotFound(f"no endpoint {request.method} {path}")))
            return _method_not_allowed(request.method, path, allowed)
        code = _HTTP_STATUS_CODES.get(
            exc.status_code, ErrorCode.MALFORMED_REQUEST if exc.status_code < 500 else ErrorCode.INTERNAL)
        return error_response(to_wire(PalyraError(str(exc.detail), code=code)))

    with absent(*LITESTAR_APP_WITHOUT):  # its pydantic and attrs plugins serve no route
        served = Litestar(
            route_handlers=[openapi_document, *CONSOLE_HANDLERS, dispatch],
            openapi_config=None,
            exception_handlers={HTTPException: on_http_exception},
            request_max_body_size=None,  # enforced in read_body with the configured cap
            debug=False,
            logging_config=None,  # the daemon configures logging (palyra.daemon.logs)
        )
    return IngressFront(served, ingress, config) if ingress else served


PlainHandler = Callable[[Mapping[str, str]], Awaitable[tuple[int, str, bytes]]]
"""``(lower-cased headers) -> (status, media type, body)``: an operations endpoint."""

StaticHandler = Callable[[str], Awaitable[tuple[int, str, bytes, Mapping[str, str]]]]
"""``(path below the prefix) -> (status, media type, body, headers)``: one public read-only
resource; the headers say how long caches may keep it (``Cache-Control``)."""

async def _outside_spec(plain: Mapping[str, PlainHandler] | None,
                        static: Mapping[str, StaticHandler] | None, method: str, path: str,
                        headers: Mapping[str, str]
                        ) -> tuple[int, str, bytes, Mapping[str, str]] | None:
    """The answer of an operations endpoint or static resource for ``GET path``, else None."""
    if method != HttpMethod.GET:
        return None
    if plain and path in plain:
        return (*await plain[path](headers), {})
    for prefix, serve in (static or {}).items():
        if path.startswith(prefix):
            return await serve(path[len(prefix):])
    return None


def _stream(
    app: PalyraServicesApp[CtxT],
    compiled: CompiledRoute,
    ctx: CtxT,
    message: betterproto2.Message,
    config: HttpConfig,
    request_id: str,
    streams: OpenStreams | None,
) -> SseResponse:
    argument: Any = _one(message) if compiled.client_streaming else message
    if isinstance(getattr(argument, "batch", None), bool):
        # SSE frames are one per event either way (sse_frame); asking the app for
        # batches only lets one commit's frames go out in one write.
        argument.batch = True
    return SseResponse(
        STREAMING[compiled.python_method](app, ctx, argument),
        error_grace_s=config.sse_error_grace_s,
        keepalive_s=config.sse_keepalive_s,
        request_id=request_id,
        streams=streams,
    )
