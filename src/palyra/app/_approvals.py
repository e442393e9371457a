"""ApprovalsService: list, get, decide (from any client), export.

Reads are caller-scoped (``palyra.app._access``): operators see every approval,
anyone else only the approvals of runs they started.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from palyra_gen.palyra import v1 as pb

from palyra.app._access import approval_visibility, sees_approval
from palyra.app._base import AppBase
from palyra.app._convert import approval_proto, identity_of
from palyra.app._export import chunked, json_document, ndjson_lines
from palyra.app.context import CallContext
from palyra.core.errors import NotFound
from palyra.engine import ApprovalRecord, approval_state_proto

DEFAULT_PAGE, MAX_PAGE = 100, 500
DEFAULT_EXPORT, MAX_EXPORT = 1000, 5000


class ApprovalsApi(AppBase):
    """Human-in-the-loop approvals over the durable records."""

    @staticmethod
    def _filter(visible: Callable[[ApprovalRecord], bool], state: pb.ApprovalState,
                session_id: str = "", run_id: str = "") -> Callable[[ApprovalRecord], bool]:
        def keep(record: ApprovalRecord) -> bool:
            return (visible(record)
                    and (state == pb.ApprovalState.UNSPECIFIED
                         or approval_state_proto(record.state) == state)
                    and (not session_id or record.session_id == session_id)
                    and (not run_id or record.run_id == run_id))
        return keep

    async def list_approvals(self, ctx: CallContext,
                             request: pb.ListApprovalsRequest) -> pb.ListApprovalsResponse:
        """The caller's visible approvals in creation order, filtered, cursor-paged (max 500)."""
        visible = approval_visibility(identity_of(ctx))
        limit = DEFAULT_PAGE if request.limit == 0 else min(request.limit, MAX_PAGE)
        # One record more than the page tells whether another *matching* record
        # exists, so a client never fetches a trailing empty page (the engine's
        # cursor only says rows remain, not that any of them pass the filter).
        found, _ = self.engine.approval_reader.scan(
            self._filter(visible, request.state, request.session_id, request.run_id),
            request.after_approval_id, limit + 1)
        page = found[:limit]
        next_id = page[-1].approval_id if len(found) > limit else ""
        return pb.ListApprovalsResponse(approvals=[approval_proto(r) for r in page],
                                        next_after_approval_id=next_id)

    async def get_approval(self, ctx: CallContext,
                           request: pb.GetApprovalRequest) -> pb.GetApprovalResponse:
        """One approval record; another principal's is NOT_FOUND for a non-operator."""
        caller = identity_of(ctx)
        record = self.engine.approval_reader.get(request.approval_id)
        if record is None or not sees_approval(caller, record):
            raise NotFound(f"approval {request.approval_id!r} not found",
                           details={"approval_id": request.approval_id})
        return pb.GetApprovalResponse(approval=approval_proto(record))

    async def decide_approval(self, ctx: CallContext,
                              request: pb.DecideApprovalRequest) -> pb.DecideApprovalResponse:
        """Decide a pending approval; the waiting run continues from the journal."""
        record = await self._decide(identity_of(ctx), request.approval_id, request.decision,
                                   request.scope, request.ttl_seconds, request.reason)
        return pb.DecideApprovalResponse(approval=approval_proto(record))

    async def export_approvals(
        self, ctx: CallContext, request: pb.ExportApprovalsRequest
    ) -> AsyncIterator[pb.ExportApprovalsResponse]:
        """The caller's visible approvals as chunks (≤ 64 KiB) of NDJSON or JSON with
        chained checksums and a trailer."""
        visible = approval_visibility(identity_of(ctx))
        limit = DEFAULT_EXPORT if request.limit == 0 else min(request.limit, MAX_EXPORT)
        records, _ = self.engine.approval_reader.scan(self._filter(visible, request.state), "",
                                                     limit)
        dicts = [approval_proto(r).to_dict() for r in records]
        pieces = (json_document(dicts) if request.format == pb.ExportFormat.JSON
                  else ndjson_lines(dicts))
        chunks = list(chunked(pieces))
        for seq, chunk in enumerate(chunks, start=1):
            yield pb.ExportApprovalsResponse(chunk=chunk, chunk_seq=seq,
                                             done=seq == len(chunks))
