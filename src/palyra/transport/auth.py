"""Bearer-token authentication shared by the gRPC and HTTP gateways.

Both transports hand the same lower-cased header mapping to
:meth:`Authenticator.authenticate`, so the rules cannot drift between them:

* every call but the public ones (GetHealth; over HTTP also the OpenAPI
  document) needs ``authorization: Bearer <token>``;
* the admin token may call anything (what a principal may *do*, e.g. decide
  approvals, is the engine's Cedar check, not ours);
* a connector token may call only RouteMessage, and only as ``channel:<ch>``;
* a per-principal token (``plt_…``, issued by an operator through TokensService)
  acts as the one principal it is bound to: the ``x-palyra-principal`` header may
  be left out, and naming anyone else, or any ``x-palyra-channel``, is refused;
* otherwise ``x-palyra-principal`` (non-empty) and ``x-palyra-device-id`` are required,
  ``x-palyra-channel`` is optional.

Missing or wrong credentials raise ``Unauthenticated``; a valid credential
used outside its rights raises ``PermissionDenied``.
"""

from __future__ import annotations

import dataclasses
import hmac
from collections.abc import Callable, Iterable, Mapping
from typing import Literal, TypeAlias

from palyra.config import AuthConfig
from palyra.core.errors import PermissionDenied, Unauthenticated
from palyra.core.ids import is_ulid, new_ulid

TokenKind: TypeAlias = Literal["admin", "connector", "principal"]

PRINCIPAL_HEADER = "x-palyra-principal"
DEVICE_HEADER = "x-palyra-device-id"
CHANNEL_HEADER = "x-palyra-channel"
REQUEST_ID_HEADER = "x-request-id"

# What an UNAUTHENTICATED answer tells the caller to do. Stable texts (clients
# and docs quote them); no runtime paths, so nothing about the host leaks.
TOKEN_HINT = ("use the daemon's admin token (the file <data-dir>/admin.token, or "
              "$PALYRA_ADMIN_TOKEN if the daemon was started with it) or a connector "
              "token from PALYRA_CONNECTOR_TOKENS")
IDENTITY_HINT = (f"every authenticated call needs 'authorization: Bearer <token>', "
                 f"{PRINCIPAL_HEADER} (e.g. user:alice) and {DEVICE_HEADER} (a ULID, "
                 f"e.g. 01J00000000000000000000000); {CHANNEL_HEADER} is optional")
MISSING_CREDENTIALS = f"missing credentials: send 'authorization: Bearer <token>'; {TOKEN_HINT}"
MALFORMED_AUTHORIZATION = (f"malformed authorization header: expected 'authorization: Bearer "
                           f"<token>'; {TOKEN_HINT}")
INVALID_TOKEN = f"invalid token: {TOKEN_HINT}"
MISSING_PRINCIPAL = f"the {PRINCIPAL_HEADER} header is required; {IDENTITY_HINT}"
MISSING_DEVICE = f"the {DEVICE_HEADER} header is required; {IDENTITY_HINT}"
DEVICE_NOT_ULID = (f"{DEVICE_HEADER} must be a ULID (26 Crockford base32 characters, e.g. "
                   f"01J00000000000000000000000)")

# RPCs (proto method names) anyone may call without a token.
PUBLIC_RPCS = frozenset({"GetHealth"})
# The only RPC a connector token may call.
CONNECTOR_RPCS = frozenset({"RouteMessage"})


@dataclasses.dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated caller, as the transports pass it to the application."""

    principal: str
    device_id: str
    channel: str
    token_kind: TokenKind
    request_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class _ConnectorToken:
    token: str
    channel: str  # "" = may speak for any channel


def parse_connector_tokens(entries: Iterable[str]) -> list[tuple[str, str]]:
    """``["tok", "discord=tok2"]`` → ``[("tok", ""), ("tok2", "discord")]``."""
    parsed = []
    for entry in entries:
        channel, sep, token = entry.partition("=")
        parsed.append((token, channel) if sep else (channel, ""))
    return parsed


class Authenticator:
    """Checks credentials and identity headers; holds the tokens, nothing else."""

    def __init__(
        self,
        *,
        admin_token: str,
        connector_tokens: Iterable[tuple[str, str]] = (),
        bound_principal: str = "",
        principal_tokens: Callable[[str], str | None] = lambda token: None,
        require_ulid_device_id: bool = True,
    ) -> None:
        if not admin_token:
            raise ValueError("an admin token is required")
        self._admin = admin_token.encode()
        self._connectors = [_ConnectorToken(t, ch) for t, ch in connector_tokens]
        self._bound_principal = bound_principal
        # Which principal a per-principal token acts as (None: not one, or not live).
        self._principal_tokens = principal_tokens
        self._require_ulid = require_ulid_device_id

    @classmethod
    def from_config(cls, config: AuthConfig, admin_token: str,
                    principal_tokens: Callable[[str], str | None] = lambda token: None,
                    ) -> Authenticator:
        """Build from the auth section plus the resolved admin token."""
        return cls(
            admin_token=admin_token,
            connector_tokens=parse_connector_tokens(config.connector_tokens),
            bound_principal=config.bound_principal,
            principal_tokens=principal_tokens,
            require_ulid_device_id=config.require_ulid_device_id,
        )

    def authenticate(self, rpc: str, headers: Mapping[str, str]) -> Caller | None:
        """Authenticate one call to proto method ``rpc``.

        Args:
            rpc: The proto RPC name, e.g. ``"CreateRun"``.
            headers: Request headers/metadata with lower-case names.

        Returns:
            The caller, or ``None`` for a public RPC called without credentials.

        Raises:
            Unauthenticated: no, malformed or unknown token; missing identity headers.
            PermissionDenied: a connector token outside RouteMessage / its channel,
                or a principal other than the configured ``bound_principal``.
        """
        auth = headers.get("authorization", "")
        if rpc in PUBLIC_RPCS and not auth:
            return None
        kind, connector, bound = self._check_token(auth)
        principal = headers.get(PRINCIPAL_HEADER, "").strip()
        device_id = headers.get(DEVICE_HEADER, "").strip()
        channel = headers.get(CHANNEL_HEADER, "").strip()
        if kind == "principal":
            # The token says who acts; a header naming someone else is refused.
            if principal and principal != bound:
                raise PermissionDenied(f"this token is bound to {bound!r}; it cannot act as "
                                       f"{principal!r}", details={"principal": principal})
            if channel:
                # The channel reaches Cedar's context (and a run's identity): a bound
                # caller would name a channel it does not speak for.
                raise PermissionDenied(f"this token is bound to {bound!r}; it cannot claim "
                                       f"{CHANNEL_HEADER} {channel!r}",
                                       details={"channel": channel})
            principal = bound
        if not principal:
            raise Unauthenticated(MISSING_PRINCIPAL)
        if not device_id:
            raise Unauthenticated(MISSING_DEVICE)
        if self._require_ulid and not is_ulid(device_id):
            raise Unauthenticated(DEVICE_NOT_ULID)
        if kind == "connector":
            assert connector is not None
            self._check_connector(rpc, connector, principal, channel)
        elif self._bound_principal and principal != self._bound_principal:
            raise PermissionDenied("this daemon is bound to another principal")
        request_id = headers.get(REQUEST_ID_HEADER, "").strip()[:64] or new_ulid()
        return Caller(principal, device_id, channel, kind, request_id)

    def _check_token(self, auth: str) -> tuple[TokenKind, _ConnectorToken | None, str]:
        scheme, _, token = auth.strip().partition(" ")
        if not auth:
            raise Unauthenticated(MISSING_CREDENTIALS)
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated(MALFORMED_AUTHORIZATION)
        raw = token.strip().encode()
        # compare_digest against every candidate keeps timing independent of
        # which token (if any) matched.
        is_admin = hmac.compare_digest(raw, self._admin)
        match = None
        for connector in self._connectors:
            if hmac.compare_digest(raw, connector.token.encode()):
                match = connector
        if is_admin:
            return "admin", None, ""
        if match is not None:
            return "connector", match, ""
        bound = self._principal_tokens(token.strip())
        if bound:
            return "principal", None, bound
        raise Unauthenticated(INVALID_TOKEN)

    @staticmethod
    def _check_connector(rpc: str, token: _ConnectorToken, principal: str, channel: str) -> None:
        if rpc not in CONNECTOR_RPCS:
            raise PermissionDenied(f"a connector token may not call {rpc}")
        prefix, _, ch = principal.partition(":")
        if prefix != "channel" or not ch:
            raise PermissionDenied("a connector token must use principal 'channel:<channel>'")
        if token.channel and ch != token.channel:
            raise PermissionDenied(f"this connector token may only speak for channel:{token.channel}")
        if channel and channel != ch:
            raise PermissionDenied(f"{CHANNEL_HEADER} does not match the principal's channel")
