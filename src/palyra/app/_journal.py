"""JournalService and AppendEvent: thin delegation to ``palyra.journal``.

Verify, export, checkpoint and prune are operator-only (``palyra.app._access``); the
head is open to any authenticated caller.
"""

from __future__ import annotations

import asyncio
import json
import math
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from palyra_gen.palyra import v1 as pb

from palyra.app._access import is_operator, require_operator
from palyra.app._base import AppBase
from palyra.app._convert import check_version, identity_of
from palyra.app._export import MAX_CHUNK
from palyra.app._progress import Finished, relay_progress
from palyra.app.context import CallContext
from palyra.core.errors import ErrorCode, InvalidArgument, NotFound, PalyraError, PermissionDenied
from palyra.core.ids import is_ulid
from palyra.engine import IdentityRec, live_run_ids
from palyra.journal import (
    EventDraft,
    VerifyReport,
    export_bundle,
    parse_note,
    position_of,
    prune_older_than,
    verify_store,
    witnesses,
)

_DAY_MS = 86_400_000
# Ages past this (~2,700 years) are refused: the product in ms would leave int64.
MAX_PRUNE_AGE_DAYS = 1_000_000

# WatchJournalVerify's pace: a progress message at most every this many positions
# and this many seconds (a client reading slowly gets fewer, coalesced).
VERIFY_PROGRESS_EVERY = 1024
VERIFY_PROGRESS_INTERVAL_S = 0.1

# Kinds the daemon writes itself; a client may not forge them (in any letter case).
RESERVED_KIND_PREFIXES = ("tape.", "run.", "session.", "approval.", "token.", "task.",
                          "watchdog.", "learning.", "journal.")
# Actors only the daemon itself writes as.
RESERVED_ACTOR_PREFIX = "system:"


def check_actor(identity: IdentityRec, actor: str) -> None:
    """Who a client event may claim to come from.

    Nobody writes as ``system:*`` through the API (that is the daemon). An
    operator may name any other actor; anyone else writes as itself: its own
    principal, or ``<principal>/<component>`` for a part of its own client.

    Raises:
        PermissionDenied: the actor is not the caller's to claim.
    """
    if actor.lower().startswith(RESERVED_ACTOR_PREFIX):
        raise PermissionDenied(f"actor {actor!r} is reserved for the daemon",
                               details={"field": "actor"})
    if is_operator(identity.principal):
        return
    if actor != identity.principal and not actor.startswith(identity.principal + "/"):
        raise PermissionDenied(
            f"{identity.principal!r} may append events only as itself (actor "
            f"{identity.principal!r} or {identity.principal + '/<component>'!r}), "
            f"not as {actor!r}", details={"field": "actor"})


def _payload(text: str) -> dict[str, Any]:
    # Empty → {}; non-JSON or non-object → a marker, not an error,
    # so a client's event is never lost for its encoding.
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except RecursionError:
        raise InvalidArgument("payload_json is nested too deeply",
                              details={"field": "payload_json"}) from None
    except ValueError:
        return {"redacted": True, "reason": "payload is not JSON", "bytes": len(text.encode())}
    return value if isinstance(value, dict) else {"value": value}


def _verify_response(report: VerifyReport) -> pb.VerifyJournalResponse:
    problem = report.problem
    return pb.VerifyJournalResponse(
        ok=report.ok, event_count=report.events, head_hash=report.head_hash,
        first_bad_position=problem.position if problem is not None else None,
        reason=problem.describe() if problem is not None else "",
        checkpoints_verified=report.checkpoints, pruned_positions=report.pruned)


class JournalApi(AppBase):
    """Client events, journal head, verification and export."""

    async def append_event(self, ctx: CallContext,
                           request: pb.AppendEventRequest) -> pb.AppendEventResponse:
        """Append a client event (redacted and hash-chained by the journal).

        Raises:
            InvalidArgument: bad or missing ids, kind or actor, ts <= 0, a reserved kind
                (any letter case).
            NotFound: no such run.
            PermissionDenied: the run is another principal's, or the actor is not the
                caller's to claim (``check_actor``).
            AlreadyExists: duplicate event id.
            PalyraError: ``PAYLOAD_TOO_LARGE``; ``UNSUPPORTED_VERSION``; ``STATE_CONFLICT``
                for a run of another session.
        """
        check_version(request.v)
        identity = identity_of(ctx)
        if request.event_id and not is_ulid(request.event_id):
            raise InvalidArgument("event_id must be a ULID", details={"field": "event_id"})
        for name in ("session_id", "run_id", "kind", "actor"):
            if not getattr(request, name).strip():
                raise InvalidArgument(f"{name} is required", details={"field": name})
        for name in ("session_id", "run_id"):
            if not is_ulid(getattr(request, name)):
                raise InvalidArgument(f"{name} must be a ULID", details={"field": name})
        if request.timestamp_unix_ms <= 0:
            raise InvalidArgument("timestamp_unix_ms must be > 0",
                                  details={"field": "timestamp_unix_ms"})
        if request.kind.strip().lower().startswith(RESERVED_KIND_PREFIXES):
            raise InvalidArgument(f"event kind {request.kind!r} is reserved for the daemon",
                                  details={"field": "kind"})
        check_actor(identity, request.actor)
        # The same rule as every other run RPC: the run exists (NOT_FOUND) and
        # is the caller's (PERMISSION_DENIED); the event joins that run's session.
        run = self.engine.get_run(identity, request.run_id)
        if run.session_id != request.session_id:
            # Two ids that name different things: a conflict with what is stored, not a
            # malformed request (the same code as a session id and key that disagree).
            raise PalyraError(f"run {run.run_id} belongs to another session",
                              code=ErrorCode.STATE_CONFLICT, details={"field": "session_id", "run_id": run.run_id})
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
        """Event count, global head hash and the newest signed checkpoint (any authenticated
        caller)."""
        identity_of(ctx)
        head = self.store.head()
        last = self.store.last_checkpoint()
        signed = None if last is None else pb.JournalCheckpoint(
            position=last.position, head_hash=last.head_hash, ts_unix_ms=last.ts_ms,
            public_key=last.public_key, signature=last.signature)
        return pb.GetJournalHeadResponse(event_count=head.count, head_hash=head.head_hash,
                                         head_position=head.count,
                                         pruned_through=self.store.pruned_through(),
                                         last_checkpoint=signed)

    async def verify_journal(self, ctx: CallContext,
                             request: pb.VerifyJournalRequest) -> pb.VerifyJournalResponse:
        """Recompute every hash and checkpoint signature (off the event loop). Operators only."""
        require_operator(ctx, "VerifyJournal")
        return _verify_response(await asyncio.to_thread(verify_store, self.store))

    async def watch_journal_verify(
        self, ctx: CallContext, request: pb.WatchJournalVerifyRequest
    ) -> AsyncIterator[pb.WatchJournalVerifyResponse]:
        """VerifyJournal's walk, streaming positions checked out of the head at the start,
        then its result. Operators only."""
        require_operator(ctx, "WatchJournalVerify")
        total = self.store.head().count
        yield pb.WatchJournalVerifyResponse(checked=0, total=total)
        walk = relay_progress(lambda progress: verify_store(self.store, progress=progress),
                              every=VERIFY_PROGRESS_EVERY,
                              interval_s=VERIFY_PROGRESS_INTERVAL_S)
        async for step in walk:
            if isinstance(step, Finished):
                report: VerifyReport = step.value
                yield pb.WatchJournalVerifyResponse(
                    checked=report.head_position, total=total,
                    result=_verify_response(report))
            else:
                yield pb.WatchJournalVerifyResponse(checked=step, total=total)

    async def export_journal(
        self, ctx: CallContext, request: pb.ExportJournalRequest
    ) -> AsyncIterator[pb.ExportJournalResponse]:
        """The whole journal's NDJSON bundle, or one session's records with their inclusion
        proofs (``links``: its older bundle, a line per position), chunked.

        Operators only: a bundle carries every principal's events.

        A session export first has the tree signed as it stands (a no-op when the last
        checkpoint covers it), so it holds every record committed before the call, even
        right after a run, before the daemon's own signing a second later.
        """
        require_operator(ctx, "ExportJournal")
        with tempfile.TemporaryDirectory(prefix="palyra-export-") as tmp:
            out = Path(tmp) / "bundle.ndjson"
            if request.session_id and not request.links:
                await self.store.sign_tree()
                await asyncio.to_thread(self.store.export_session_proofs, request.session_id,
                                        out)  # fmt: skip
            else:
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

    async def prune_journal(self, ctx: CallContext,
                            request: pb.PruneJournalRequest) -> pb.PruneJournalResponse:
        """Retention now: prune records older than ``older_than_days`` into hash tombstones.

        Operators only. Runs that are not terminal keep every event; the newest
        record always stays. Goes through the journal's writer in batches
        (``JournalConfig.retention_batch_records``).

        Raises:
            PermissionDenied: the caller is no operator.
            InvalidArgument: a negative, non-finite or absurdly large age.
        """
        require_operator(ctx, "PruneJournal")
        days = request.older_than_days
        if not math.isfinite(days) or not 0 <= days <= MAX_PRUNE_AGE_DAYS:
            raise InvalidArgument(f"older_than_days must be a number from 0 to "
                                  f"{MAX_PRUNE_AGE_DAYS:,}", details={"field": "older_than_days"})
        result = await prune_older_than(
            # Capped: a finite 1e308 days overflows int() (i35 fixes this too).
            self.store, int(min(days * _DAY_MS, 2.0**62)), live_runs=lambda: live_run_ids(self.store),
            batch_records=self.store.env.config.retention_batch_records)
        await self.engine.attachments.collect()  # what the pruned tapes alone kept
        return pb.PruneJournalResponse(
            first_position=result.first, through_position=result.through if result.records else 0,
            records=result.records, events=result.events, bytes_freed=result.bytes_freed,
            head_hash=result.head_hash, pruned_through=result.through)

    # --- the transparency log (docs/journal/format.md, "Transparency log") ---

    async def get_tree_checkpoint(
        self, ctx: CallContext, request: pb.GetTreeCheckpointRequest
    ) -> pb.GetTreeCheckpointResponse:
        """The last signed checkpoint note; any authenticated caller (it holds hashes only).

        Raises:
            NotFound: the log has not signed one yet.
        """
        note = self.store.tree_checkpoint()
        if note is None:
            raise NotFound("the transparency log has no signed checkpoint yet")
        return pb.GetTreeCheckpointResponse(note=note.decode(), tree_size=self.store.tree_size())

    async def prove_entry(self, ctx: CallContext,
                          request: pb.ProveEntryRequest) -> pb.ProveEntryResponse:
        """The ``tlog-proof`` of the record holding one event; operators only (it carries
        the record's content)."""
        require_operator(ctx, "ProveEntry")
        if not (request.position or request.approval_id or request.run_id):
            raise NotFound("name the entry to prove: a position, an approval_id or a run_id "
                           "(+ seq)", details={"field": "position"})
        locator = ({"position": str(request.position)} if request.position else
                   {"approval": request.approval_id} if request.approval_id else
                   {"run": request.run_id, "seq": str(request.seq)})  # fmt: skip
        approvals = self.engine.approval_reader
        position = position_of(self.store, locator,
                               lambda i: (r.run_id if (r := approvals.get(i)) else None))
        return pb.ProveEntryResponse(proof=self.store.prove_position(position).decode(),
                                     position=position)  # fmt: skip

    async def prove_consistency(
        self, ctx: CallContext, request: pb.ProveConsistencyRequest
    ) -> pb.ProveConsistencyResponse:
        """The consistency proof between two tree sizes (hashes only: any caller)."""
        return pb.ProveConsistencyResponse(
            hashes=self.store.consistency(request.old_size, request.new_size))

    async def get_tree_tile(self, ctx: CallContext,
                            request: pb.GetTreeTileRequest) -> pb.GetTreeTileResponse:
        """One tile or entry bundle (hashes only: any caller)."""
        width = request.width or 256  # omitted: a full tile
        if not -1 <= request.level <= 63 or not 1 <= width <= 256:
            raise InvalidArgument("level must be -1..63 and width 1..256",
                                  details={"field": "level"})  # fmt: skip
        return pb.GetTreeTileResponse(
            data=self.store.tile(request.level, request.index, width))

    async def add_cosignatures(
        self, ctx: CallContext, request: pb.AddCosignaturesRequest
    ) -> pb.AddCosignaturesResponse:
        """Store witnesses' cosignatures of the current checkpoint; operators only.

        Raises:
            InvalidArgument: not the current checkpoint, or no valid cosignature by a
                configured witness (``journal.tlog_witnesses``).
        """
        require_operator(ctx, "AddCosignatures")
        configured = witnesses(self.store.env.config)
        note = await self.store.add_cosignatures(request.note.encode(), configured)
        names = {w.name for w in configured}
        signed = sorted({s.name for s in parse_note(note).signatures if s.name in names})
        return pb.AddCosignaturesResponse(note=note.decode(), witnesses=signed)
