"""JournalService and AppendEvent: thin delegation to ``palyra.journal``.

Verify, export and checkpoint are operator-only (``palyra.app._access``); the
head is open to any authenticated caller.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from palyra_gen.palyra import v1 as pb

from palyra.app._access import require_operator
from palyra.app._base import AppBase
from palyra.app._convert import check_version, identity_of
from palyra.app._export import MAX_CHUNK
from palyra.app.context import CallContext
from palyra.core.errors import InvalidArgument
from palyra.core.ids import is_ulid
from palyra.journal import EventDraft, export_bundle, verify_store

# Kinds the daemon writes itself; a client may not forge them.
RESERVED_KIND_PREFIXES = ("tape.", "run.", "session.", "approval.")


def _payload(text: str) -> dict[str, Any]:
    # REFERENCE §4: empty → {}; non-JSON or non-object → a marker, not an error,
    # so a client's event is never lost for its encoding.
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"redacted": True, "reason": "payload is not JSON", "bytes": len(text.encode())}
    return value if isinstance(value, dict) else {"value": value}


class JournalApi(AppBase):
    """Client events, journal head, verification and export."""

    async def append_event(self, ctx: CallContext,
                           request: pb.AppendEventRequest) -> pb.AppendEventResponse:
        """Append a client event (redacted and hash-chained by the journal).

        Raises:
            InvalidArgument: bad id, missing session/run/kind/actor, ts <= 0, reserved kind.
            AlreadyExists: duplicate event id.
            PalyraError: ``PAYLOAD_TOO_LARGE``; ``UNSUPPORTED_VERSION``.
        """
        check_version(request.v)
        identity = identity_of(ctx)
        if request.event_id and not is_ulid(request.event_id):
            raise InvalidArgument("event_id must be a ULID", details={"field": "event_id"})
        for name in ("session_id", "run_id", "kind", "actor"):
            if not getattr(request, name).strip():
                raise InvalidArgument(f"{name} is required", details={"field": name})
        if request.timestamp_unix_ms <= 0:
            raise InvalidArgument("timestamp_unix_ms must be > 0",
                                  details={"field": "timestamp_unix_ms"})
        if request.kind.startswith(RESERVED_KIND_PREFIXES):
            raise InvalidArgument(f"event kind {request.kind!r} is reserved for the daemon",
                                  details={"field": "kind"})
        [stored] = await self.store.append([EventDraft(
            kind=request.kind, actor=request.actor, session_id=request.session_id,
            run_id=request.run_id, payload=_payload(request.payload_json),
            principal=identity.principal, device_id=identity.device_id,
            channel=identity.channel, event_id=request.event_id,
            ts_ms=request.timestamp_unix_ms)])
        return pb.AppendEventResponse(event_id=stored.event_id, accepted=True,
                                      position=stored.position, hash=stored.hash)

    async def get_journal_head(self, ctx: CallContext,
                               request: pb.GetJournalHeadRequest) -> pb.GetJournalHeadResponse:
        """Event count and global head hash (any authenticated caller)."""
        identity_of(ctx)
        head = self.store.head()
        return pb.GetJournalHeadResponse(event_count=head.count, head_hash=head.head_hash,
                                         head_position=head.count)

    async def verify_journal(self, ctx: CallContext,
                             request: pb.VerifyJournalRequest) -> pb.VerifyJournalResponse:
        """Recompute every hash and checkpoint signature (off the event loop). Operators only."""
        require_operator(ctx, "VerifyJournal")
        report = await asyncio.to_thread(verify_store, self.store)
        problem = report.problem
        return pb.VerifyJournalResponse(
            ok=report.ok, event_count=report.events, head_hash=report.head_hash,
            first_bad_position=problem.position if problem is not None else None,
            reason=problem.describe() if problem is not None else "",
            checkpoints_verified=report.checkpoints)

    async def export_journal(
        self, ctx: CallContext, request: pb.ExportJournalRequest
    ) -> AsyncIterator[pb.ExportJournalResponse]:
        """The self-contained NDJSON bundle (whole journal or one session), chunked.

        Operators only: a bundle carries every principal's events.
        """
        require_operator(ctx, "ExportJournal")
        with tempfile.TemporaryDirectory(prefix="palyra-export-") as tmp:
            out = Path(tmp) / "bundle.ndjson"
            await asyncio.to_thread(export_bundle, self.store, out,
                                    session_id=request.session_id or None)
            seq = 0
            with out.open("rb") as handle:
                chunk = handle.read(MAX_CHUNK)
                while chunk:
                    following = handle.read(MAX_CHUNK)
                    seq += 1
                    yield pb.ExportJournalResponse(chunk=chunk, chunk_seq=seq,
                                                   done=not following)
                    chunk = following

    async def create_checkpoint(self, ctx: CallContext,
                                request: pb.CreateCheckpointRequest) -> pb.CreateCheckpointResponse:
        """Sign the current global head with the data dir's ed25519 key and store it.

        Operators only. Goes through the journal's writer, so it works while the
        daemon holds the data dir (``palyra journal checkpoint`` calls this).
        """
        require_operator(ctx, "CreateCheckpoint")
        made = await self.store.checkpoint()
        return pb.CreateCheckpointResponse(
            position=made.position, head_hash=made.head_hash, public_key=made.public_key,
            signature=made.signature, ts_unix_ms=made.ts_ms)
