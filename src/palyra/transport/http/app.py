"""The HTTP/JSON + SSE gateway, routed by the spec's route table.

:class:`~palyra.transport.http._front.HttpFront` decides from the ASGI scope who
answers: the spec's routes (matched against
:class:`~palyra.transport.http._routes.RouteTable`, compiled from
``palyra_gen.http_routes.ROUTES``; authenticated, decoded strictly, and handed to the
same application method the gRPC gateway calls), the operations endpoints, the
static trees and the platforms' ingress are answered in front
(:mod:`._spec_front`, :mod:`._ingress_front`); Litestar serves the web console's
files and the OpenAPI document. Unary answers are the response's proto3 JSON;
server streams are SSE; errors are the spec's ``ErrorDetail`` body with the mapped
status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from litestar import Litestar, Request, Response, get
from litestar.exceptions import HTTPException
from litestar.types import ASGIApp
from palyra_gen.services import PalyraServicesApp

from palyra.config import HttpConfig
from palyra.core.errors import ErrorCode, NotFound, PalyraError
from palyra.imports import LITESTAR_APP_WITHOUT, absent
from palyra.transport.auth import Authenticator
from palyra.transport.context import ContextFactory, CtxT
from palyra.transport.errors import WireError, to_wire
from palyra.transport.http._console import CONSOLE_HANDLERS
from palyra.transport.http._console import PREFIX as CONSOLE_PREFIX
from palyra.transport.http._front import HttpFront
from palyra.transport.http._ingress_front import IngressHandler as IngressHandler
from palyra.transport.http._openapi import build_openapi
from palyra.transport.http._routes import RouteTable
from palyra.transport.http._spec_front import PlainHandler as PlainHandler
from palyra.transport.http._spec_front import SpecFront, method_not_allowed
from palyra.transport.http._spec_front import StaticHandler as StaticHandler
from palyra.transport.streams import OpenStreams

_json = msgspec.json.Encoder()
_OPENAPI_PATH = "/schema/openapi.json"

# Statuses Litestar itself may answer with, and the code whose spec mapping has
# that status.
_HTTP_STATUS_CODES = {
    400: ErrorCode.MALFORMED_REQUEST, 401: ErrorCode.UNAUTHENTICATED,
    403: ErrorCode.PERMISSION_DENIED, 404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED, 413: ErrorCode.PAYLOAD_TOO_LARGE,
    429: ErrorCode.RESOURCE_EXHAUSTED, 501: ErrorCode.UNIMPLEMENTED,
    503: ErrorCode.UNAVAILABLE,
}


def error_response(wire: WireError, headers: Mapping[str, str] | None = None
                   ) -> Response[bytes]:
    """An ``ErrorDetail`` JSON answer with the code's mapped HTTP status (Litestar's)."""
    return Response(content=_json.encode(wire.http_body()), status_code=wire.http_status,
                    media_type="application/json", headers=dict(headers or {}))


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
    """Build the ASGI application serving every spec route of ``app``.

    ``plain`` maps a path to an operations endpoint outside the spec (``/metrics``,
    ``/readyz``): ``GET`` only, it authenticates on its own and answers any content
    type. ``streams`` counts the open SSE responses.

    ``static`` maps a path prefix (ending in ``/``) to a read-only tree of resources
    outside the spec (the transparency log's ``/tlog/`` for ``tlog-tiles`` clients):
    ``GET`` only, no authentication, the rest of the path handed to the handler.

    ``ingress`` maps a path prefix to a platform ingress (``POST <prefix>/<name>``):
    chat platforms sign their own requests, so these routes take no bearer token
    and answer the platform's JSON; their errors use the spec's codes too.
    """
    table = routes or RouteTable()
    openapi = _json.encode(build_openapi(table))

    @get(_OPENAPI_PATH, media_type="application/json", sync_to_thread=False)
    def openapi_document() -> Response[bytes]:
        return Response(content=openapi, media_type="application/json")

    def on_http_exception(request: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
        # Litestar's own refusals on its own paths (e.g. POST to the console). The
        # status always follows the chosen code's spec mapping, so body and status agree.
        if exc.status_code == 405:
            path = request.scope["path"]
            if path != _OPENAPI_PATH:  # the console's files have no other method
                return error_response(to_wire(NotFound(f"no endpoint {request.method} {path}")))
            status, _media, body, headers = method_not_allowed(request.method, path, ["GET"])
            return Response(content=body, status_code=status, media_type="application/json",
                            headers={k.decode(): v.decode() for k, v in headers})
        code = _HTTP_STATUS_CODES.get(
            exc.status_code, ErrorCode.MALFORMED_REQUEST if exc.status_code < 500 else ErrorCode.INTERNAL)
        return error_response(to_wire(PalyraError(str(exc.detail), code=code)))

    with absent(*LITESTAR_APP_WITHOUT):  # its pydantic and attrs plugins serve no route
        litestar = Litestar(
            route_handlers=[openapi_document, *CONSOLE_HANDLERS],
            openapi_config=None,
            exception_handlers={HTTPException: on_http_exception},
            debug=False,
            logging_config=None,  # the daemon configures logging (palyra.daemon.logs)
        )
    spec = SpecFront(app, authenticator=authenticator, make_ctx=make_ctx, config=config,
                     table=table, plain=plain, static=static, streams=streams)
    return HttpFront(litestar, spec, ingress or {}, config,
                     litestar_paths=(_OPENAPI_PATH, CONSOLE_PREFIX),
                     litestar_prefixes=(CONSOLE_PREFIX + "/",))
