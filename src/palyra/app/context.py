"""Who is calling: built by the transport from authenticated headers, never from bodies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from palyra.engine import IdentityRec

TokenKind = Literal["admin", "connector", "principal", "none"]


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated principal on a device, optionally through a channel."""

    principal: str
    device_id: str = ""
    channel: str = ""

    def record(self) -> IdentityRec:
        """The engine's form of this identity."""
        return IdentityRec(self.principal, self.device_id, self.channel)


@dataclass(frozen=True, slots=True)
class CallContext:
    """One call's caller: identity, which token authenticated it, request id.

    ``identity`` is None only for unauthenticated public calls (GetHealth).
    """

    identity: Identity | None
    token_kind: TokenKind = "admin"
    request_id: str = ""

    @classmethod
    def for_principal(cls, principal: str, device_id: str = "", channel: str = "",
                      request_id: str = "") -> CallContext:
        """A context for in-process callers (CLI, tests, benchmarks)."""
        return cls(Identity(principal, device_id, channel), "admin", request_id)

    @classmethod
    def from_caller(cls, caller: _CallerLike | None) -> CallContext:
        """Build from the transports' authenticated ``Caller`` (duck-typed)."""
        if caller is None:
            return cls(None, "none")
        kind: TokenKind = (caller.token_kind if caller.token_kind in ("connector", "principal")
                           else "admin")  # type: ignore[assignment]
        return cls(Identity(caller.principal, caller.device_id, caller.channel), kind,
                   caller.request_id)


class _CallerLike(Protocol):
    @property
    def principal(self) -> str: ...
    @property
    def device_id(self) -> str: ...
    @property
    def channel(self) -> str: ...
    @property
    def token_kind(self) -> str: ...
    @property
    def request_id(self) -> str: ...
