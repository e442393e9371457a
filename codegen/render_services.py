"""``palyra_gen/services.py``: the typed seam between the transports and the application.

From the spec's RPCs it writes, per service:

- ``<Service>App``, a ``typing.Protocol`` generic in the call-context type: one
  method per RPC, ``(ctx, request) -> response`` (server streams return an
  async iterator; client streams take one);
- ``<Service>Server``, the grpclib servicer: a subclass of the generated
  ``<Service>Base`` whose every method forwards to the app with a context from
  a factory — explicit, typed methods that mypy checks against both the base
  and the Protocol (no ``type()``-built classes, no ``getattr``).

Then ``PalyraServicesApp`` (every service in one Protocol), ``RPCS`` (each RPC's
names and shape, for tests and docs) and ``UNARY``/``STREAMING``: per python
method name, a lambda calling that exact method, so the HTTP gateway, which
dispatches by route at run time, still calls the app through code mypy checks.
"""

from __future__ import annotations

from collections.abc import Sequence

from betterproto2_compiler.casing import snake_case

from codegen.descriptors import Rpc

GENERATOR = "codegen/render_services.py"


def _short(full: str) -> str:
    return full.rsplit(".", 1)[-1]


def _app_method(rpc: Rpc) -> list[str]:
    name, req, resp = snake_case(rpc.name), _short(rpc.request_type), _short(rpc.response_type)
    arg = f"requests: AsyncIterator[v1.{req}]" if rpc.client_streaming else f"request: v1.{req}"
    if rpc.server_streaming or rpc.client_streaming:
        head = f"    def {name}(self, ctx: CtxT, {arg}) -> AsyncIterator[v1.{resp}]:"
    else:
        head = f"    async def {name}(self, ctx: CtxT, {arg}) -> v1.{resp}:"
    return [head, f'        """``{rpc.service}.{rpc.name}``."""', "        ..."]


def _server_method(rpc: Rpc) -> list[str]:
    name, req, resp = snake_case(rpc.name), _short(rpc.request_type), _short(rpc.response_type)
    if rpc.client_streaming:
        return [
            f"    async def {name}(",
            f"        self, messages: AsyncIterator[v1.{req}]",
            f"    ) -> AsyncIterator[v1.{resp}]:",
            f"        async for item in self._app.{name}(self._ctx(), messages):",
            "            yield item",
        ]
    if rpc.server_streaming:
        return [
            f"    async def {name}(self, message: v1.{req}) -> AsyncIterator[v1.{resp}]:",
            f"        async for item in self._app.{name}(self._ctx(), message):",
            "            yield item",
        ]
    return [
        f"    async def {name}(self, message: v1.{req}) -> v1.{resp}:",
        f"        return await self._app.{name}(self._ctx(), message)",
    ]


def render(rpcs: Sequence[Rpc]) -> str:
    """The module's source (without the banner)."""
    services: dict[str, list[Rpc]] = {}
    for rpc in rpcs:
        services.setdefault(rpc.service, []).append(rpc)
    names = [_short(s) for s in services]
    lines = [
        '"""Typed seam between the transports and the application (one Protocol per service).',
        "",
        "The application implements ``PalyraServicesApp[Ctx]``; the gRPC gateway serves",
        "``<Service>Server`` instances and the HTTP gateway calls ``UNARY``/``STREAMING``.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from collections.abc import AsyncIterator, Awaitable, Callable",
        "from dataclasses import dataclass",
        "from typing import Any, Final, Generic, Protocol, TypeVar",
        "",
        "from .palyra import v1",
        "",
        "CtxT = TypeVar(\"CtxT\", contravariant=True)",
        "CtxI = TypeVar(\"CtxI\")",
        "",
        "__all__ = (",
        *[f'    "{n}App",' for n in names],
        *[f'    "{n}Server",' for n in names],
        '    "PalyraServicesApp",',
        '    "RPCS",',
        '    "STREAMING",',
        '    "UNARY",',
        '    "RpcInfo",',
        '    "servers",',
        ")",
        "",
    ]
    for service, group in services.items():
        short = _short(service)
        lines += ["", f"class {short}App(Protocol[CtxT]):",
                  f'    """What the application serves for ``{service}``."""', ""]
        for rpc in group:
            lines += [*_app_method(rpc), ""]
        lines += ["", f"class {short}Server(v1.{short}Base, Generic[CtxI]):",
                  f'    """grpclib servicer of ``{service}``: every RPC forwards to the app."""',
                  "",
                  f"    def __init__(self, app: {short}App[CtxI], ctx: Callable[[], CtxI]) -> None:",
                  "        self._app = app",
                  "        self._ctx = ctx",
                  ""]
        for rpc in group:
            lines += [*_server_method(rpc), ""]
    bases = ", ".join(f"{n}App[CtxT]" for n in names)
    lines += ["",
              f"class PalyraServicesApp({bases}, Protocol[CtxT]):",
              '    """Every service of the spec, as one application."""',
              "",
              "",
              "def servers(app: PalyraServicesApp[CtxI], ctx: Callable[[], CtxI]) -> list[Any]:",
              '    """One grpclib servicer per service, all forwarding to ``app``."""',
              f"    return [{', '.join(f'{n}Server(app, ctx)' for n in names)}]",
              "",
              "",
              "@dataclass(frozen=True, slots=True)",
              "class RpcInfo:",
              '    """One RPC of the spec: its names and its shape."""',
              "",
              "    service: str",
              "    method: str",
              "    python_method: str",
              "    request_type: str",
              "    response_type: str",
              "    client_streaming: bool",
              "    server_streaming: bool",
              "",
              "",
              "RPCS: Final[tuple[RpcInfo, ...]] = (",
              ]
    for rpc in rpcs:
        lines.append(
            f"    RpcInfo({rpc.service!r}, {rpc.name!r}, {snake_case(rpc.name)!r}, "
            f"{rpc.request_type!r}, {rpc.response_type!r}, {rpc.client_streaming}, "
            f"{rpc.server_streaming}),")
    lines += [")", "",
              "#: Unary RPCs by python method name: ``(app, ctx, request) -> awaitable response``.",
              "UNARY: Final[dict[str, Callable[[PalyraServicesApp[Any], Any, Any], "
              "Awaitable[Any]]]] = {"]
    for rpc in rpcs:
        if not (rpc.client_streaming or rpc.server_streaming):
            name = snake_case(rpc.name)
            lines.append(f'    "{name}": lambda app, ctx, request: app.{name}(ctx, request),')
    lines += ["}",
              "#: Streaming RPCs by python method name: ``(app, ctx, request or requests) -> "
              "async iterator``.",
              "STREAMING: Final[dict[str, Callable[[PalyraServicesApp[Any], Any, Any], "
              "AsyncIterator[Any]]]] = {"]
    for rpc in rpcs:
        if rpc.client_streaming or rpc.server_streaming:
            name = snake_case(rpc.name)
            lines.append(f'    "{name}": lambda app, ctx, request: app.{name}(ctx, request),')
    lines += ["}", ""]
    return "\n".join(lines)
