"""LearningService: list, accept and reject learning candidates.

Operators see every candidate; a user sees those learned from runs they
started. Accepting or rejecting is the Cedar action ``learning.review``.
"""

from __future__ import annotations

from palyra_gen.palyra import v1 as pb

from palyra.app._access import is_operator
from palyra.app._base import AppBase
from palyra.app._convert import identity_of
from palyra.app.context import CallContext
from palyra.core.errors import InvalidArgument
from palyra.learning import Candidate, Learning, LearningConfig, State

MAX_PAGE = 500
_STATE_PROTO = {State.PENDING_REVIEW: pb.LearningCandidateState.PENDING_REVIEW,
                State.APPLIED: pb.LearningCandidateState.APPLIED,
                State.ACCEPTED: pb.LearningCandidateState.ACCEPTED,
                State.REJECTED: pb.LearningCandidateState.REJECTED}
_STATE_OF = {v: k for k, v in _STATE_PROTO.items()}


def candidate_proto(c: Candidate) -> pb.LearningCandidate:
    """The wire form of a candidate."""
    return pb.LearningCandidate(
        candidate_id=c.candidate_id, kind=c.kind, text=c.text, confidence_bps=c.confidence_bps,
        state=_STATE_PROTO[State(c.state)], session_id=c.session_id, run_id=c.run_id,
        tape_seqs=c.tape_seqs, source_positions=c.positions, source_sha256=c.source_sha256,
        memory_id=c.memory_id, decided_by=c.decided_by, decided_at_unix_ms=c.decided_ms,
        reason=c.reason, created_at_unix_ms=c.created_ms, task_id=c.task_id)


class LearningApi(AppBase):
    """The LearningService group."""

    learning: Learning | None = None

    def _learning(self) -> Learning:
        if self.learning is None:
            self.learning = Learning(self.store, self.engine.provider, LearningConfig())
        return self.learning

    async def list_candidates(self, ctx: CallContext,
                              request: pb.ListCandidatesRequest) -> pb.ListCandidatesResponse:
        """Newest first; yours only unless you are an operator."""
        identity = identity_of(ctx)
        state = ""
        if request.state != pb.LearningCandidateState.UNSPECIFIED:
            state = str(_STATE_OF[request.state])
        limit = 100 if request.limit == 0 else max(1, min(request.limit, MAX_PAGE))
        everyone = is_operator(identity.principal)
        found = self._learning().candidates(
            state=state, run_id=request.run_id, limit=limit,
            visible=lambda c: everyone or c.principal == identity.principal)
        return pb.ListCandidatesResponse(candidates=[candidate_proto(c) for c in found])

    async def accept_candidate(self, ctx: CallContext,
                               request: pb.AcceptCandidateRequest) -> pb.AcceptCandidateResponse:
        """Accept: the candidate becomes a memory item with its provenance."""
        cand = await self._review(ctx, request.candidate_id, request.reason, accept=True)
        return pb.AcceptCandidateResponse(candidate=candidate_proto(cand))

    async def reject_candidate(self, ctx: CallContext,
                               request: pb.RejectCandidateRequest) -> pb.RejectCandidateResponse:
        """Reject: nothing is remembered."""
        cand = await self._review(ctx, request.candidate_id, request.reason, accept=False)
        return pb.RejectCandidateResponse(candidate=candidate_proto(cand))

    async def _review(self, ctx: CallContext, candidate_id: str, reason: str, *,
                      accept: bool) -> Candidate:
        identity = identity_of(ctx)
        if not candidate_id:
            raise InvalidArgument("candidate_id is required")
        policy = self.engine.policy

        def allowed(cand: Candidate, decision: str) -> tuple[bool, str]:
            return policy.learning_review(identity, cand.candidate_id,
                                          run_principal=cand.principal, decision=decision,
                                          kind=cand.kind, session_id=cand.session_id)

        return await self._learning().review(identity, candidate_id, accept, reason, allowed)
