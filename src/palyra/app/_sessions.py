"""Session RPCs: list, resolve, cleanup, branch, per-session tool posture."""

from __future__ import annotations

import msgspec
from palyra_gen.palyra import v1 as pb

from palyra.app._access import require_operator
from palyra.app._base import AppBase
from palyra.app._convert import POSTURE_NAMES, identity_of, session_proto
from palyra.app.context import CallContext
from palyra.engine import Selectors

DEFAULT_SESSIONS_PAGE = 100
MAX_SESSIONS_PAGE = 500


class SessionsApi(AppBase):
    """The session half of GatewayService."""

    async def list_sessions(self, ctx: CallContext,
                            request: pb.ListSessionsRequest) -> pb.ListSessionsResponse:
        """The caller's sessions, keyset-paged by session key (default 100, max 500);
        an operator may name an ``owner`` and see that principal's on every device."""
        identity = identity_of(ctx)
        if request.owner:
            require_operator(ctx, "listing another principal's sessions")
            identity = msgspec.structs.replace(identity, principal=request.owner)
        limit = DEFAULT_SESSIONS_PAGE if request.limit == 0 else min(request.limit,
                                                                     MAX_SESSIONS_PAGE)
        page, next_key = self.engine.session_reader.list_for(
            identity, request.after_session_key, limit, request.include_archived,
            any_device=bool(request.owner))
        return pb.ListSessionsResponse(sessions=[session_proto(s) for s in page],
                                       next_after_session_key=next_key)

    async def resolve_session(self, ctx: CallContext,
                              request: pb.ResolveSessionRequest) -> pb.ResolveSessionResponse:
        """Get-or-create by id, key or label (identity-bound)."""
        plan = await self.engine.session_writer.resolve(identity_of(ctx), Selectors(
            request.session_id, request.session_key, request.session_label,
            request.reset_session, request.require_existing))
        return pb.ResolveSessionResponse(session=session_proto(plan.record),
                                         created=plan.created, reset_applied=plan.reset_applied)

    async def cleanup_session(self, ctx: CallContext,
                              request: pb.CleanupSessionRequest) -> pb.CleanupSessionResponse:
        """Archive a session; its key is freed and cached approvals are dropped."""
        result = await self.engine.session_writer.cleanup(identity_of(ctx), request.session_id)
        return pb.CleanupSessionResponse(cleaned=result.cleaned,
                                         newly_archived=result.newly_archived,
                                         previous_session_key=result.previous_session_key,
                                         run_count=result.run_count)

    async def branch_session(self, ctx: CallContext,
                             request: pb.BranchSessionRequest) -> pb.BranchSessionResponse:
        """Start a session branched from one whose latest run is terminal."""
        branch, source = await self.engine.session_writer.branch(
            identity_of(ctx), request.session_id, request.session_label,
            request.branch_session_id)
        return pb.BranchSessionResponse(session=session_proto(branch),
                                        source=session_proto(source))

    async def set_tool_posture(self, ctx: CallContext,
                               request: pb.SetToolPostureRequest) -> pb.SetToolPostureResponse:
        """Set or clear (UNSPECIFIED) one tool's posture for this session."""
        record = await self.engine.set_tool_posture(
            identity_of(ctx), request.session_id, request.tool_name,
            POSTURE_NAMES.get(request.posture, ""))
        return pb.SetToolPostureResponse(session=session_proto(record))
