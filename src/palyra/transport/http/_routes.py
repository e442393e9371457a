"""The HTTP route table, compiled from the spec's ``google.api.http`` options.

``palyra_gen.http_routes.ROUTES`` is generated from the protos; this module
only turns each template (``/v1/runs/{run_id}:abort``) into a matcher and
resolves its message classes. There is no hand-written route list.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

import betterproto2
from palyra_gen.http_routes import ROUTES
from palyra_gen.palyra import v1

from palyra.transport.http._json import proto_meta

_PARAM = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
_PROTO_PACKAGE = "palyra.v1."


@dataclasses.dataclass(frozen=True, slots=True)
class CompiledRoute:
    """One spec route, ready to match and decode."""

    rpc: str
    python_method: str
    http_method: str
    template: str
    pattern: re.Pattern[str]
    path_params: tuple[str, ...]
    has_body: bool
    client_streaming: bool
    server_streaming: bool
    request_cls: type[betterproto2.Message]
    response_cls: type[betterproto2.Message]
    service: str


def _message_class(full_name: str) -> type[betterproto2.Message]:
    if not full_name.startswith(_PROTO_PACKAGE):
        raise ValueError(f"route message {full_name} is outside {_PROTO_PACKAGE}")
    cls: type[betterproto2.Message] = getattr(v1, full_name.removeprefix(_PROTO_PACKAGE))
    return cls


def compile_route(route: Any) -> CompiledRoute:
    """Compile one generated ``HttpRoute``."""
    template: str = route.path
    leftover = _PARAM.sub("", template)
    if "{" in leftover or "}" in leftover:
        # e.g. {name=segments/*} or {a.b}: not used by the spec today; refuse
        # loudly so a spec change cannot silently mis-route.
        raise ValueError(f"unsupported path template {template!r}")
    params = tuple(_PARAM.findall(template))
    # A parameter spans one path segment and may contain ':' (channel ids such as
    # "slack:T0123"); a custom verb after it (":route") is matched by backtracking.
    regex = "".join(
        f"(?P<{part}>[^/]+?)" if i % 2 else re.escape(part)
        for i, part in enumerate(_PARAM.split(template))
    )
    request_cls = _message_class(route.request_type)
    for name in params:
        if name not in proto_meta(request_cls).meta_by_field_name:
            raise ValueError(f"{template}: {{{name}}} is not a field of {route.request_type}")
    return CompiledRoute(
        rpc=route.method,
        python_method=route.python_method,
        http_method=route.http_method.upper(),
        template=template,
        pattern=re.compile(f"^{regex}$"),
        path_params=params,
        has_body=route.body == "*",
        client_streaming=bool(route.client_streaming),
        server_streaming=bool(route.server_streaming),
        request_cls=request_cls,
        response_cls=_message_class(route.response_type),
        service=route.service,
    )


class RouteTable:
    """Match (method, raw path) to a compiled route."""

    def __init__(self, routes: Iterable[Any] = ROUTES) -> None:
        compiled = [compile_route(r) for r in routes]
        # Literal routes before templated ones, so /v1/approvals:export never
        # reads as an approval id.
        compiled.sort(key=lambda r: (len(r.path_params), -len(r.template)))
        self.routes: tuple[CompiledRoute, ...] = tuple(compiled)
        # A literal path's routes by method: a hot request (RunStream's POST
        # /v1/runs:stream) found in one look-up, not after trying every pattern before it.
        self._literal: dict[tuple[str, str], CompiledRoute] = {}
        for route in compiled:
            if not route.path_params:
                self._literal.setdefault((route.http_method, route.template), route)

    def match(self, method: str, path: str) -> tuple[CompiledRoute, dict[str, str]] | None:
        """The route and its decoded path parameters, or ``None``.

        Raises:
            LookupError: the path exists but not for ``method`` (→ 405).
        """
        literal = self._literal.get((method, path))
        if literal is not None:
            # What the loop returns too: literal routes come first, and another literal
            # template cannot match this exact path.
            return literal, {}
        return self.scan(method, path)

    def scan(self, method: str, path: str) -> tuple[CompiledRoute, dict[str, str]] | None:
        """:meth:`match` by trying each route's pattern in order (what the look-up of a
        literal path must agree with).

        Raises:
            LookupError: the path exists but not for ``method`` (→ 405).
        """
        allowed = ""
        for route in self.routes:
            if allowed and route.template != allowed:
                # The path already matched a more specific template (e.g.
                # "/v1/runs/{run_id}:abort"): a looser one ("/v1/runs/{run_id}")
                # must not take it just because the method differs.
                continue
            found = route.pattern.match(path)
            if found is None:
                continue
            if route.http_method != method:
                allowed = route.template
                continue
            return route, {k: unquote(v) for k, v in found.groupdict().items()}
        if allowed:
            raise LookupError(method)
        return None

    def allowed_methods(self, path: str) -> list[str]:
        """The methods some route takes on ``path`` (sorted; empty if none)."""
        first = next((r.template for r in self.routes if r.pattern.match(path)), None)
        return sorted({r.http_method for r in self.routes if r.template == first})
