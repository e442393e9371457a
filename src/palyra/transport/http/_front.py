"""Which part of the HTTP gateway answers a request, decided from the ASGI scope.

Litestar serves only what is its own: the web console's files and the OpenAPI
document. Everything else is answered in front of it, from the scope: a chat
platform's delivery (:mod:`._ingress_front`), and every spec route, operations
endpoint and static tree, or the spec's 404 for a path that is none of them
(:mod:`._spec_front`). Building Litestar's request and response objects for those
cost as much CPU as some of the answers (py-spy on ``bench ingress`` and on the
tool-loop over HTTP), and an SSE stream paid Litestar's ``send`` wrapper per frame.
"""

from __future__ import annotations

from collections.abc import Awaitable, Collection, Mapping
from typing import Any

from litestar.types import ASGIApp, Receive, Scope, Send

from palyra.config import HttpConfig
from palyra.transport.http._ingress_front import IngressHandler, ingress_target, serve_ingress
from palyra.transport.http._spec_front import SpecFront


class HttpFront:
    """An ASGI application: Litestar's own paths to ``litestar``, the rest answered here."""

    def __init__(self, litestar: ASGIApp, spec: SpecFront[Any],
                 ingress: Mapping[str, IngressHandler], config: HttpConfig, *,
                 litestar_paths: Collection[str], litestar_prefixes: Collection[str]) -> None:
        """``litestar_paths`` are Litestar's exact paths, ``litestar_prefixes`` the
        folders whose every path is its (``/console/``); ``ingress`` maps a path prefix
        to a platform ingress (``POST <prefix>/<name>``)."""
        self._litestar = litestar
        self._spec = spec
        self._ingress = dict(ingress)
        self._config = config
        self._paths = frozenset(litestar_paths)
        self._prefixes = tuple(litestar_prefixes)

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        """Serve one ASGI connection scope: the awaitable of the part that answers it.

        Not a coroutine of its own: the request's task resumes straight into the part
        that answers, not through one more frame on each wake-up (an SSE stream wakes
        about 13 times in a RunStream turn). uvicorn cannot tell from a plain
        ``__call__`` that this is an ASGI 3 application; the listener says so
        (``server.py``).
        """
        fields: Mapping[str, Any] = scope
        if fields["type"] != "http":
            return self._litestar(scope, receive, send)
        raw = fields.get("raw_path")
        path = raw.decode("latin-1") if raw else fields["path"]
        if path in self._paths or path.startswith(self._prefixes):
            return self._litestar(scope, receive, send)
        if fields["method"] == "POST" and self._ingress:
            target = ingress_target(self._ingress, path)
            if target is not None:
                return serve_ingress(scope, receive, send, *target, self._config)
        return self._spec.serve(scope, receive, send, path)
