"""RPCs whose subsystem is not built yet: a clear UNIMPLEMENTED, never a silent no-op."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from palyra.core.errors import ErrorCode, PalyraError


def _unimplemented(rpc: str, subsystem: str) -> Callable[..., Coroutine[Any, Any, Any]]:
    async def method(self: object, ctx: object, request: object) -> Any:
        raise PalyraError(f"{rpc} is not implemented yet: the {subsystem} subsystem is not "
                          "part of this build", code=ErrorCode.UNIMPLEMENTED,
                          details={"rpc": rpc, "subsystem": subsystem})

    method.__name__ = rpc
    method.__doc__ = f"UNIMPLEMENTED: the {subsystem} subsystem is not built yet."
    # Read by the HTTP gateway to mark the operation in its OpenAPI document.
    method.__palyra_unimplemented__ = subsystem  # type: ignore[attr-defined]
    return method


class UnimplementedApi:
    """Memory, channel routing/pairing and agents: later issues."""

    route_message = _unimplemented("route_message", "channel router")
    create_pairing_code = _unimplemented("create_pairing_code", "channel pairing")
    list_pairing_codes = _unimplemented("list_pairing_codes", "channel pairing")
    list_pairing_grants = _unimplemented("list_pairing_grants", "channel pairing")
    revoke_pairing_grant = _unimplemented("revoke_pairing_grant", "channel pairing")
