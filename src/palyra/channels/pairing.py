"""Pairing, durable (REFERENCE §7, Part B 9): codes, approvals, grants and owners.

An operator issues a code for a channel (8 characters of Crockford's base32,
which has no I, L, O or U to misread; a TTL; at most 3 pending per channel). A
sender who DMs ``pair CODE`` uses the code up and opens an approval (risk
medium; options ``allow_session``, ``allow_8h``, ``deny``) decided through the
normal approvals API. Approving grants the sender access until the grant
expires or is revoked; the first approved pairing on a channel makes that
sender its owner. Guesses are limited per sender and per channel, and wrong ones
lock the channel's codes (``guesses.py``). Every change is one journal commit of the ``channels``
table and a ``channel.pairing_*`` event, so all of it survives restarts.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping

import msgspec

from palyra.channels.guesses import GuessLimiter
from palyra.core.errors import ErrorCode, InvalidArgument, PalyraError
from palyra.core.ids import new_ulid
from palyra.engine import (
    ApprovalDecision,
    ApprovalEvent,
    ApprovalRecord,
    ApprovalStateId,
    IdentityRec,
    PromptRec,
    approval_write,
    decided,
)
from palyra.journal import EntityWrite, EventDraft, JournalStore

TABLE = "channels"
ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
CODE_LENGTH = 8
MAX_PENDING_CODES = 3
MIN_CODE_TTL_S, MAX_CODE_TTL_S = 30, 24 * 3600
APPROVAL_TTL_S = 15 * 60
TIMEBOX_DEFAULT_S = 8 * 3600
MAX_GRANT_S = 30 * 24 * 3600
SUBJECT_PREFIX = "dm_pairing:"
OPTIONS = ("allow_session", "allow_8h", "deny")
_CODE, _GRANT, _OWNER = "pair.code:", "pair.grant:", "pair.owner:"


def _now() -> int:
    return time.time_ns() // 1_000_000


class PairingCodeRec(msgspec.Struct, frozen=True, kw_only=True):
    code: str
    channel: str
    created_ms: int
    expires_ms: int
    issued_by: str


class PairingGrantRec(msgspec.Struct, frozen=True, kw_only=True):
    grant_id: str
    channel: str
    sender: str
    granted_ms: int
    expires_ms: int
    approval_id: str
    decided_by: str


Commit = Callable[[list[EventDraft], ApprovalRecord, PairingGrantRec | None], Awaitable[None]]
"""Appends a pairing decision's drafts (with whatever else must land in that commit)."""


def new_code() -> str:
    """8 random characters of the unambiguous alphabet."""
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


def clamp_ttl(ttl_s: int, default_s: int) -> int:
    """A code's TTL: ``default_s`` for 0, else clamped to 30 s .. 24 h."""
    return min(max(ttl_s or default_s, MIN_CODE_TTL_S), MAX_CODE_TTL_S)


def grant_seconds(decision: ApprovalDecision, session_ttl_s: int) -> int:
    """How long an approved pairing lasts: ``allow_session`` (scope ``session``) the
    configured grant TTL, a timeboxed answer its own TTL (``allow_8h`` = 8 h), ``once`` 8 h;
    never more than 30 days."""
    if decision.scope == "session":
        seconds = session_ttl_s
    elif decision.scope == "timeboxed" and decision.ttl_seconds > 0:
        seconds = decision.ttl_seconds
    else:
        seconds = TIMEBOX_DEFAULT_S
    return min(seconds, MAX_GRANT_S)


class PairingBook:
    """Codes, pairing approvals, grants and channel owners in the journal."""

    def __init__(self, store: JournalStore, *, policy_hash: Callable[[], str] = lambda: "",
                 grant_ttl_s: int = MAX_GRANT_S, code_ttl_s: int = 600,
                 now_ms: Callable[[], int] = _now) -> None:
        self._store = store
        self._policy_hash = policy_hash
        self._grant_ttl_s = grant_ttl_s
        self._code_ttl_s = code_ttl_s
        self._now = now_ms
        self.guesses = GuessLimiter()

    # -- reads ---------------------------------------------------------------
    def _rows(self, prefix: str) -> list[tuple[str, bytes]]:
        out: list[tuple[str, bytes]] = []
        after = ""
        while True:
            rows = self._store.scan_entities(TABLE, prefix, after, 1000)
            out += rows
            if len(rows) < 1000:
                return out
            after = rows[-1][0]

    def codes(self, channel: str, *, include_expired: bool = False) -> list[PairingCodeRec]:
        """The channel's pending codes, oldest first."""
        now = self._now()
        recs = [msgspec.msgpack.decode(v, type=PairingCodeRec)
                for _k, v in self._rows(f"{_CODE}{channel}\x1f")]
        recs = [r for r in recs if include_expired or r.expires_ms > now]
        return sorted(recs, key=lambda r: r.created_ms)

    def grants(self, channel: str, *, include_expired: bool = False) -> list[PairingGrantRec]:
        """The channel's grants, oldest first."""
        now = self._now()
        recs = [msgspec.msgpack.decode(v, type=PairingGrantRec)
                for _k, v in self._rows(f"{_GRANT}{channel}\x1f")]
        recs = [r for r in recs if include_expired or r.expires_ms > now]
        return sorted(recs, key=lambda r: r.granted_ms)

    def paired(self, channel: str, sender: str) -> bool:
        """``sender`` holds a live grant on ``channel``."""
        return any(g.sender == sender for g in self.grants(channel))

    def owner(self, channel: str) -> str:
        """The channel's owner ("" before the first approved pairing)."""
        raw = self._store.get_entity(TABLE, _OWNER + channel)
        return raw.decode() if raw is not None else ""

    # -- writes --------------------------------------------------------------
    async def create_code(self, channel: str, ttl_s: int, by: str) -> PairingCodeRec:
        """Issue a code; expired codes of the channel are dropped in the same commit.

        Raises:
            InvalidArgument: no channel.
            PalyraError: ``RESOURCE_EXHAUSTED`` with 3 codes already pending.
        """
        if not channel:
            raise InvalidArgument("channel is required", details={"field": "channel"})
        now = self._now()
        every = self.codes(channel, include_expired=True)
        live = [c for c in every if c.expires_ms > now]
        if len(live) >= MAX_PENDING_CODES:
            raise PalyraError(f"{channel} already has {MAX_PENDING_CODES} pending pairing codes",
                              code=ErrorCode.RESOURCE_EXHAUSTED,
                              details={"channel": channel, "limit": str(MAX_PENDING_CODES)})
        rec = PairingCodeRec(code=new_code(), channel=channel, created_ms=now,
                             expires_ms=now + clamp_ttl(ttl_s, self._code_ttl_s) * 1000,
                             issued_by=by)
        writes = [EntityWrite(TABLE, _code_key(c.channel, c.code), None)
                  for c in every if c.expires_ms <= now]
        writes.append(EntityWrite(TABLE, _code_key(channel, rec.code), msgspec.msgpack.encode(rec)))
        # The code itself is a secret: the journal keeps its hash, not the code.
        await self._append("channel.pairing_code_created", by, channel, writes,
                           code_sha256=_sha(rec.code), expires_ms=str(rec.expires_ms))
        return rec

    async def request(self, channel: str, sender: str, code: str, *,
                      reply_route: Mapping[str, str] | None = None) -> ApprovalRecord | None:
        """Use ``code`` for ``sender``: the pending approval, or None for a bad/expired code.

        The code is used up in the same commit that opens the approval.
        ``reply_route`` (``sink``, ``conversation_id``, ``thread_id``) is kept in
        the approval's arguments, so the decision can be told to the sender.
        """
        raw = self._store.get_entity(TABLE, _code_key(channel, code.upper()))
        if raw is None:
            return None
        rec = msgspec.msgpack.decode(raw, type=PairingCodeRec)
        now = self._now()
        if rec.expires_ms <= now:
            return None
        args = json.dumps({"channel": channel, "sender": sender, **(reply_route or {})},
                          sort_keys=True, separators=(",", ":"))
        subject = f"{SUBJECT_PREFIX}{channel}:{sender}"
        approval = ApprovalRecord(
            approval_id=new_ulid(now), session_id="", run_id="", proposal_id="",
            tool_name="dm_pairing", args_digest=_sha(args), args_json=args,
            policy_hash=self._policy_hash(), risk_level="medium",
            prompt=PromptRec(title=f"Pair {sender} on {channel}", risk_level="medium",
                             subject_id=subject,
                             summary=f"{sender} used a pairing code on {channel} and asks to "
                                     "talk to the agent",
                             options=OPTIONS, timeout_seconds=APPROVAL_TTL_S,
                             details_json=args),
            state=ApprovalStateId.PENDING, created_ms=now,
            expires_at_ms=now + APPROVAL_TTL_S * 1000,
            requested_by=IdentityRec(f"channel:{channel}", "", channel))
        await self._append("channel.pairing_requested", f"channel:{channel}", channel,
                           [EntityWrite(TABLE, _code_key(channel, rec.code), None),
                            approval_write(approval)],
                           sender=sender, approval_id=approval.approval_id)
        return approval

    async def decide(self, record: ApprovalRecord, decision: ApprovalDecision, *,
                     commit: Commit | None = None) -> ApprovalRecord:
        """Commit a pairing approval's decision and, if approved, the grant (and owner).

        ``commit`` appends the decision's drafts in place of a plain append (the
        router adds the sender's notice to the same commit); it gets the drafts,
        the decided record and the grant (None when denied).

        Raises:
            PalyraError: ``APPROVAL_ALREADY_DECIDED`` when the approval expired first
                (the expiry is committed).
        """
        args = json.loads(record.args_json)
        channel, sender = args["channel"], args["sender"]
        now = self._now()
        if record.expires_at_ms <= now:
            timed_out = decided(record, ApprovalDecision(
                ApprovalEvent.TIME_OUT, "", 0, "pairing approval expired", "system:channels", now))
            await self._append("channel.pairing_expired", "system:channels", channel,
                               [approval_write(timed_out)], sender=sender,
                               approval_id=record.approval_id)
            raise PalyraError(f"approval {record.approval_id} expired before it was decided",
                              code=ErrorCode.APPROVAL_ALREADY_DECIDED,
                              details={"approval_id": record.approval_id, "state": "timed_out"})
        new = decided(record, decision)
        grant: PairingGrantRec | None = None
        writes = [approval_write(new)]
        extra: dict[str, str] = {"sender": sender, "approval_id": record.approval_id,
                                 "approved": str(new.state == ApprovalStateId.APPROVED).lower()}
        if new.state == ApprovalStateId.APPROVED:
            grant = PairingGrantRec(
                grant_id=new_ulid(now), channel=channel, sender=sender, granted_ms=now,
                expires_ms=now + grant_seconds(decision, self._grant_ttl_s) * 1000,
                approval_id=record.approval_id, decided_by=decision.decided_by)
            writes.append(EntityWrite(TABLE, _grant_key(channel, grant.grant_id),
                                      msgspec.msgpack.encode(grant)))
            extra["grant_id"] = grant.grant_id
            if not self.owner(channel):
                writes.append(EntityWrite(TABLE, _OWNER + channel, sender.encode()))
                extra["owner"] = sender
        drafts = [_draft("channel.pairing_decided", decision.decided_by, channel, writes,
                         **extra)]
        if commit is None:
            await self._store.append(drafts)
        else:
            await commit(drafts, new, grant)
        return new

    async def revoke(self, channel: str, grant_id: str, by: str) -> bool:
        """Remove a grant (False when there is none)."""
        key = _grant_key(channel, grant_id)
        if self._store.get_entity(TABLE, key) is None:
            return False
        await self._append("channel.pairing_revoked", by, channel, [EntityWrite(TABLE, key, None)],
                           grant_id=grant_id)
        return True

    async def lock_codes(self, channel: str) -> int:
        """Withdraw the channel's pending codes after too many wrong guesses; how many."""
        every = self.codes(channel, include_expired=True)
        if not every:
            return 0
        await self._append("channel.pairing_codes_locked", "system:channels", channel,
                           [EntityWrite(TABLE, _code_key(channel, c.code), None) for c in every],
                           codes=str(len(every)))
        return len(every)

    async def _append(self, kind: str, actor: str, channel: str, writes: list[EntityWrite],
                      **payload: str) -> None:
        await self._store.append([_draft(kind, actor, channel, writes, **payload)])


def _draft(kind: str, actor: str, channel: str, writes: list[EntityWrite],
           **payload: str) -> EventDraft:
    return EventDraft(kind=kind, actor=actor, principal=actor,
                      payload={"channel": channel, **payload}, entity_writes=tuple(writes))


def _code_key(channel: str, code: str) -> str:
    return f"{_CODE}{channel}\x1f{code}"


def _grant_key(channel: str, grant_id: str) -> str:
    return f"{_GRANT}{channel}\x1f{grant_id}"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
