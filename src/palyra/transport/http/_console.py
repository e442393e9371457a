"""``/console``: the web console's static files, from package data.

The console is a client of the public API like any other (it calls the same
routes with the same headers), so this module only serves files. The page may
load nothing but its own files and talk to nothing but this origin.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, get
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath

from palyra.console import console_asset
from palyra.core.errors import NotFound
from palyra.transport.errors import to_wire

PREFIX = "/console"
_SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data: blob:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    # Revalidate every load (cheap: ETag → 304), so an upgraded daemon's console is
    # never mixed with a cached older one.
    "cache-control": "no-cache",
}


def _serve(request: Request[Any, Any, Any], name: str) -> Response[bytes]:
    asset = console_asset(name)
    if asset is None:
        wire = to_wire(NotFound(f"no console file {name!r}"))
        return Response(content=msgspec.json.encode(wire.http_body()), status_code=wire.http_status,
                        media_type="application/json")
    headers = {**_SECURITY_HEADERS, "etag": asset.etag}
    if request.headers.get("if-none-match") == asset.etag:
        return Response(content=b"", status_code=304, headers=headers)
    return Response(content=asset.body, media_type=asset.media_type, headers=headers)


@get(PREFIX, sync_to_thread=False, include_in_schema=False)
def console_index(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The page itself, at ``/console`` and ``/console/`` (its asset URLs are absolute)."""
    return _serve(request, "")


@get(PREFIX + "/{name:str}", sync_to_thread=False, include_in_schema=False)
def console_file(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[bytes]:
    return _serve(request, name)


CONSOLE_HANDLERS: list[HTTPRouteHandler] = [console_index, console_file]
