"""TokensService: per-principal bearer tokens, issued and revoked by operators.

A token is ``plt_<token_id>_<secret>``. Only the SHA-256 of the secret is kept,
in the journal's ``meta`` table under ``token:<token_id>``, written in the same
append as the ``token.issued`` / ``token.revoked`` event that records who did
it. The transports ask :meth:`TokenBook.principal_of` which principal a bearer
secret acts as (None: not a valid, live token of this kind).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

import msgspec
from palyra_gen.palyra import v1 as pb

from palyra.app._access import is_operator, require_operator
from palyra.app._base import AppBase
from palyra.app.context import CallContext
from palyra.core.errors import InvalidArgument, NotFound, Unauthenticated
from palyra.core.ids import is_ulid, new_ulid
from palyra.core.principals import principal_problem
from palyra.journal import EntityWrite, EventDraft, JournalStore

TOKEN_PREFIX = "plt_"
_TABLE = "meta"
_KEY = "token:"
_MAX_LABEL = 200


class TokenRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A stored token: everything but its secret."""

    token_id: str
    principal: str
    label: str = ""
    secret_sha256: str
    created_ms: int
    expires_ms: int = 0
    revoked_ms: int = 0
    issued_by: str = ""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _info(record: TokenRecord) -> pb.TokenInfo:
    return pb.TokenInfo(token_id=record.token_id, principal=record.principal, label=record.label,
                        created_at_unix_ms=record.created_ms,
                        expires_at_unix_ms=record.expires_ms,
                        revoked_at_unix_ms=record.revoked_ms, issued_by=record.issued_by)


def check_bindable(principal: str) -> str:
    """The principal a token may be bound to: ``kind:name``, not an operator's.

    Raises:
        InvalidArgument: empty, too long, not ``kind:name``, not visible ASCII (the
            holder sends it in the ``x-palyra-principal`` header, which HTTP keeps to
            ASCII), or an operator principal (operators use the admin token).
    """
    value = principal
    problem = principal_problem(value)
    if problem:
        raise InvalidArgument(f"principal {problem}; e.g. 'user:alice' (kind:name, no spaces)",
                              details={"field": "principal"})
    if not all("!" <= c <= "~" for c in value):
        raise InvalidArgument("principal must be visible ASCII: its holder sends it in the "
                              "x-palyra-principal header", details={"field": "principal"})
    if is_operator(value):
        raise InvalidArgument(f"{value!r} is an operator principal: operators use the admin "
                              "token, not a bound one", details={"field": "principal"})
    return value


class TokenBook:
    """The stored tokens, read side: what the transports ask on every request."""

    def __init__(self, store: JournalStore) -> None:
        self._store = store

    def get(self, token_id: str) -> TokenRecord | None:
        """The record of ``token_id``, or None."""
        raw = self._store.get_entity(_TABLE, _KEY + token_id) if is_ulid(token_id) else None
        return msgspec.msgpack.decode(raw, type=TokenRecord) if raw is not None else None

    def principal_of(self, bearer: str) -> str | None:
        """The principal a live ``plt_…`` token acts as, else None (constant-time compare).

        Raises:
            Unauthenticated: the secret is right but the token was revoked or has
                expired; the holder is told which (only the holder of the secret
                learns it) and where a new one comes from.
        """
        if not bearer.startswith(TOKEN_PREFIX):
            return None
        token_id, sep, secret = bearer[len(TOKEN_PREFIX):].partition("_")
        record = self.get(token_id) if sep else None
        if record is None:
            return None
        if not hmac.compare_digest(_digest(secret), record.secret_sha256):
            return None
        now = _now_ms()
        if record.revoked_ms:
            raise Unauthenticated(f"token {token_id} was revoked; {NEW_TOKEN_HINT}",
                                  details={"token_id": token_id, "reason": "revoked"})
        if record.expires_ms and record.expires_ms <= now:
            raise Unauthenticated(f"token {token_id} has expired; {NEW_TOKEN_HINT}",
                                  details={"token_id": token_id, "reason": "expired"})
        return record.principal


# Where a holder of a dead per-principal token gets a new one (stable text).
NEW_TOKEN_HINT = ("ask an operator for a new per-principal token (`palyra tokens issue "
                  "PRINCIPAL`, or POST /v1/tokens; see the README's Tokens section)")


class TokensApi(AppBase):
    """Issue, list and revoke per-principal tokens (operators only)."""

    @property
    def token_book(self) -> TokenBook:
        """The stored tokens (the daemon hands ``token_book.principal_of`` to its auth)."""
        return TokenBook(self.store)

    def _get(self, token_id: str) -> TokenRecord | None:
        return self.token_book.get(token_id)

    async def _write(self, kind: str, record: TokenRecord, ctx: CallContext) -> None:
        identity = require_operator(ctx, "managing tokens")
        await self.store.append([EventDraft(
            kind=kind, actor=identity.principal, payload={
                "token_id": record.token_id, "principal": record.principal,
                "label": record.label, "expires_at_unix_ms": record.expires_ms},
            principal=identity.principal, device_id=identity.device_id,
            channel=identity.channel,
            entity_writes=(EntityWrite(_TABLE, _KEY + record.token_id,
                                       msgspec.msgpack.encode(record)),))])

    async def issue_token(self, ctx: CallContext,
                          request: pb.IssueTokenRequest) -> pb.IssueTokenResponse:
        """A new token bound to ``request.principal``; the secret is only in this answer."""
        operator = require_operator(ctx, "issuing tokens")
        principal = check_bindable(request.principal)
        if len(request.label) > _MAX_LABEL:
            raise InvalidArgument(f"label is longer than {_MAX_LABEL} characters",
                                  details={"field": "label"})
        token_id, secret, now = new_ulid(), secrets.token_urlsafe(32), _now_ms()
        record = TokenRecord(token_id=token_id, principal=principal, label=request.label,
                             secret_sha256=_digest(secret), created_ms=now,
                             expires_ms=now + request.ttl_seconds * 1000
                             if request.ttl_seconds else 0,
                             issued_by=operator.principal)
        await self._write("token.issued", record, ctx)
        return pb.IssueTokenResponse(token=f"{TOKEN_PREFIX}{token_id}_{secret}",
                                     info=_info(record))

    async def list_tokens(self, ctx: CallContext,
                          request: pb.ListTokensRequest) -> pb.ListTokensResponse:
        """Every issued token (never a secret), newest first."""
        require_operator(ctx, "listing tokens")
        records = []
        after = ""
        while True:
            rows = self.store.scan_entities(_TABLE, _KEY, after, 1000)
            records += [msgspec.msgpack.decode(v, type=TokenRecord) for _k, v in rows]
            if len(rows) < 1000:
                break
            after = rows[-1][0]
        return pb.ListTokensResponse(tokens=[_info(r) for r in reversed(records)])

    async def revoke_token(self, ctx: CallContext,
                           request: pb.RevokeTokenRequest) -> pb.RevokeTokenResponse:
        """Refuse the token from now on (revoking twice keeps the first time)."""
        require_operator(ctx, "revoking tokens")
        record = self._get(request.token_id)
        if record is None:
            raise NotFound(f"token {request.token_id!r} not found",
                           details={"token_id": request.token_id})
        if not record.revoked_ms:
            record = msgspec.structs.replace(record, revoked_ms=_now_ms())
            await self._write("token.revoked", record, ctx)
        return pb.RevokeTokenResponse(info=_info(record))
