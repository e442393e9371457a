"""grpclib services that delegate every RPC to the application facade.

The generated ``*ServiceBase`` classes already decode requests and call a
snake_case method per RPC (``get_health``, ``run_stream``, …). Instead of
hand-writing one forwarding method per RPC (a second list to keep in sync with
the spec), each base is subclassed here with a forwarder for every handler
found in its ``__mapping__()``, so a new RPC in the spec is served as soon as
the app implements it (and answers UNIMPLEMENTED until then).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import betterproto2.grpclib as bp_grpclib
from grpclib.const import Cardinality
from palyra_gen.palyra import v1

from palyra.transport.context import ContextFactory, current_caller
from palyra.transport.facade import app_method, open_stream

SERVICE_BASES: tuple[type[bp_grpclib.ServiceBase], ...] = (
    v1.GatewayServiceBase,
    v1.ApprovalsServiceBase,
    v1.MemoryServiceBase,
    v1.JournalServiceBase,
    v1.ChannelsServiceBase,
)


def rpc_methods(base: type[bp_grpclib.ServiceBase]) -> dict[str, Cardinality]:
    """``{snake_name: cardinality}`` for every RPC of a generated service base."""
    methods = {}
    for handler in cast(Any, base()).__mapping__().values():
        # The generated handler is ``__rpc_<snake>`` and calls ``self.<snake>``.
        snake = handler.func.__name__.split("__rpc_", 1)[1]
        methods[snake] = handler.cardinality
    return methods


def _forwarder(name: str, cardinality: Cardinality, make_ctx: ContextFactory) -> Callable[..., Any]:
    if cardinality.server_streaming:

        async def stream_method(self: _Delegating, request: Any) -> AsyncIterator[Any]:
            ctx = make_ctx(current_caller.get())
            async for item in open_stream(app_method(self.app, name)(ctx, request)):
                yield item

        stream_method.__name__ = name
        return stream_method

    async def unary_method(self: _Delegating, request: Any) -> Any:
        ctx = make_ctx(current_caller.get())
        return await app_method(self.app, name)(ctx, request)

    unary_method.__name__ = name
    return unary_method


class _Delegating:
    """Mixin holding the facade the forwarders call."""

    def __init__(self, app: object) -> None:
        self.app = app


def build_services(app: object, make_ctx: ContextFactory) -> list[bp_grpclib.ServiceBase]:
    """One delegating instance per generated service base."""
    services = []
    for base in SERVICE_BASES:
        namespace = {
            name: _forwarder(name, cardinality, make_ctx)
            for name, cardinality in rpc_methods(base).items()
        }
        cls = type(base.__name__.replace("Base", ""), (_Delegating, base), namespace)
        services.append(cls(app))
    return services
