"""The authenticated caller of the call being served, for both transports.

The gRPC gateway learns who is calling in a grpclib event listener, before the
generated service method runs and without access to its arguments; the
handler reads it back from this context variable. (grpclib awaits the
listener, the handler and the trailer hook in one task, so the value is
visible to all three.)
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import TypeAlias, TypeVar

from palyra.transport.auth import Caller

#: ``None`` when a public RPC (GetHealth) is called without credentials.
current_caller: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "palyra_current_caller", default=None
)

CtxT = TypeVar("CtxT")

#: Builds the application's call context from a caller. Injected by the
#: composition root so the transports do not depend on how the app spells it;
#: the gateways are generic in it, so mypy checks that the app's methods take
#: exactly what the factory makes.
ContextFactory: TypeAlias = Callable[[Caller | None], CtxT]
