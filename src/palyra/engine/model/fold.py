"""The agent loop as a fold over the tape.

The live loop and recovery share this one reducer: every tape event the
engine commits is applied here, and after a restart the same events are read
back and applied in order. The state therefore always says exactly what the
journal says, and ``next_action`` decides what to do next from it, so a run
resumes from its last journaled step without a second code path.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import betterproto2
import msgspec
from palyra_gen.palyra import v1 as pb

from palyra.engine.model import compaction
from palyra.engine.model.compaction import History, PinRecord
from palyra.engine.model.lifecycle import RunStateId, run_state_of_proto
from palyra.engine.model.prune import estimate_tokens
from palyra.providers import ChatMessage, ImagePart, ToolCall

#: The ``context_stage`` a compaction attempt that changed nothing writes (it counts
#: as an attempt, so a summariser that never helps cannot make compaction loop).
COMPACTION_FAILED_STAGE = "compaction"
#: The ``context_stage`` saying why a loop's start was not compacted (not an attempt).
COMPACTION_SKIPPED_STAGE = "compaction_skipped"


class ProposalPhase(enum.Enum):
    """Where one tool call stands."""

    PROPOSED = "proposed"  # no policy decision yet
    ALLOWED = "allowed"  # may run (policy allow, cached grant or approval)
    NEEDS_APPROVAL = "needs_approval"  # ask (or consult the grant cache)
    WAITING = "waiting"  # an approval record is pending
    DENIED = "denied"  # a denial result must be written
    DONE = "done"  # a tool_result is on the tape


@dataclass(slots=True)
class Proposal:
    """One tool call of the current turn."""

    proposal_id: str
    tool_name: str
    input_json: str
    phase: ProposalPhase = ProposalPhase.PROPOSED
    approval_id: str = ""
    policy_hash: str = ""
    deny_reason: str = ""
    # The journal redacted a secret out of ``input_json``: this copy (rebuilt
    # from the tape after a restart) is not the call the model asked for, and
    # must never be executed. Live proposals hold the exact arguments.
    args_redacted: bool = False
    # The daemon proposed this call for a context reference (e.g. ``@url:…``) whose
    # tool needs an approval; its result becomes a context block, not a tool message.
    context_reference: str = ""
    # The posture its decision was made under (the tape's ``ToolDecision.posture``).
    posture: str = ""
    # ``input_json`` decoded, once: live, the arguments the engine encoded it from
    # (``LoopState.live_arguments``); after a restart, decoded at the first ask.
    decoded: dict[str, Any] | None = None

    def arguments(self) -> dict[str, Any]:
        """The decoded arguments (``{"_raw_arguments": text}`` when not an object)."""
        if self.decoded is None:
            self.decoded = decode_arguments(self.input_json)
        return self.decoded


def decode_arguments(input_json: str) -> dict[str, Any]:
    """A proposal's ``input_json`` as arguments (``{"_raw_arguments": text}`` when it is not
    a JSON object)."""
    try:
        value = json.loads(input_json) if input_json else {}
    except ValueError:
        return {"_raw_arguments": input_json}
    return value if isinstance(value, dict) else {"_raw_arguments": input_json}


# What of an approved reference's result reaches the model (as for any reference).
REFERENCE_CHARS = 8_000


def reference_block(p: Proposal, result: pb.ToolResult) -> str:
    """The context block a context reference resolved after its approval becomes."""
    label = p.context_reference
    if result.success:
        body = f"[{label}] (read with {p.tool_name} after approval)\n" + (
            result.output_json[:REFERENCE_CHARS])
    else:
        body = f"[{label}] (not resolved: {result.error or 'failed'})"
    return "<context_references>\n" + body + "\n</context_references>"


class Action(enum.Enum):
    """What the loop must do next."""

    IDLE = "idle"  # no loop running: take the next input or finish
    START_TURN = "start_turn"  # call the model
    RESOLVE_TOOL = "resolve_tool"  # advance the first unfinished proposal
    COMPLETE_TURN = "complete_turn"  # every tool call of the turn has a result


@dataclass(slots=True)
class LoopState:
    """Everything the loop needs, rebuilt from the tape alone."""

    state: str = RunStateId.PENDING
    messages: list[ChatMessage] = field(default_factory=list)
    loop_active: bool = False
    loop_turns: int = 0
    proposals: list[Proposal] = field(default_factory=list)
    turn_count: int = 0
    tool_call_count: int = 0
    final_text: str = ""
    tape_len: int = 0
    # Blocks input assembly added for the current loop (``context_stage`` content),
    # sent as system messages before the conversation on every turn of the loop.
    context_blocks: list[str] = field(default_factory=list)
    loops_started: int = 0
    # Compaction (``engine.model.compaction``): ``message_seqs[i]`` is the tape seq
    # ``messages[i]`` came from; ``pin_records`` the approvals and policy decisions
    # no compaction covers yet; ``compacted_through`` the first seq none covers.
    message_seqs: list[int] = field(default_factory=list)
    # ``message_tokens[i]`` is ``estimate_tokens(messages[i])``, made once when the
    # message is folded: pruning and compaction sum these instead of estimating the
    # whole history again on every turn.
    message_tokens: list[int] = field(default_factory=list)
    pin_records: list[PinRecord] = field(default_factory=list)
    compacted_through: int = 0
    compaction_attempts: int = 0
    last_compaction_ms: int | None = None
    # Not from the tape: the arguments of proposals the engine is about to commit, by
    # proposal id, exactly as it encoded their ``input_json`` (see ``expect_arguments``).
    live_arguments: dict[str, dict[str, Any]] = field(default_factory=dict)

    def expect_arguments(self, proposal_id: str, arguments: dict[str, Any]) -> None:
        """The live path: the next ``ToolProposal`` of ``proposal_id`` has ``arguments``
        as its ``input_json``, so its fold takes them instead of decoding the text the
        engine has just encoded (recovery has no such entry and decodes the tape)."""
        self.live_arguments[proposal_id] = arguments

    def apply(self, member: betterproto2.Message | None, *, redacted: bool = False) -> None:
        """Fold one committed tape event into the state.

        ``redacted``: the stored event had secrets redacted (only recovery,
        which reads the journal, passes it; live members are the exact ones).
        """
        seq = self.tape_len
        self.tape_len += 1
        # By exact class: a chain of isinstance checks against betterproto2's
        # ABC-based classes cost more than the fold itself.
        fold = _FOLDS.get(type(member))
        if fold is not None:
            fold(self, member, seq, redacted)

    def _fold_status(self, member: pb.RunStatus, seq: int, redacted: bool) -> None:
        self.state = run_state_of_proto(member.state, self.state)

    def _fold_input(self, member: pb.UserInput, seq: int, redacted: bool) -> None:
        self._append(ChatMessage(role="user", content=member.text, images=images_of(member)))
        self.message_seqs.append(seq)

    def _fold_loop(self, member: pb.AgentLoop, seq: int, redacted: bool) -> None:
        self._apply_loop(member)

    def _fold_output(self, member: pb.ProviderTurnOutput, seq: int, redacted: bool) -> None:
        self.loop_turns += 1
        self.turn_count += 1
        self._append(ChatMessage(role="assistant", content=member.text))
        self.message_seqs.append(seq)

    def _fold_proposal(self, member: pb.ToolProposal, seq: int, redacted: bool) -> None:
        self._apply_proposal(member, redacted)
        if member.decision is not None:  # folded in (older tapes: a separate event)
            self.pin_records.append(PinRecord(seq, "tape.tool_proposal", member.decision,
                                              member.tool_name))
            self._apply_decision(member.decision)

    def _fold_decision(self, member: pb.ToolDecision, seq: int, redacted: bool) -> None:
        self.pin_records.append(PinRecord(seq, "tape.tool_decision", member))
        self._apply_decision(member)

    def _fold_approval_request(self, member: pb.ToolApprovalRequest, seq: int,
                               redacted: bool) -> None:
        self.pin_records.append(PinRecord(seq, "tape.tool_approval_request", member))
        p = self.find(member.proposal_id)
        if p is not None:
            p.phase, p.approval_id = ProposalPhase.WAITING, member.approval_id

    def _fold_approval_response(self, member: pb.ToolApprovalResponse, seq: int,
                                redacted: bool) -> None:
        self.pin_records.append(PinRecord(seq, "tape.tool_approval_response", member))
        p = self.find(member.proposal_id)
        if p is not None:
            p.approval_id = member.approval_id or p.approval_id
            p.phase = ProposalPhase.ALLOWED if member.approved else ProposalPhase.DENIED
            if not member.approved:
                p.deny_reason = member.reason or "approval denied"

    def _fold_result(self, member: pb.ToolResult, seq: int, redacted: bool) -> None:
        before = len(self.messages)
        self._apply_result(member)
        if len(self.messages) > before:  # a context reference's result is a block
            self.message_seqs.append(seq)

    def _fold_replied(self, member: pb.MessageReplied, seq: int, redacted: bool) -> None:
        self.final_text = member.reply_text

    def _fold_stage(self, member: pb.ContextStage, seq: int, redacted: bool) -> None:
        if member.content:
            self.context_blocks.append(member.content)
        elif member.stage == COMPACTION_FAILED_STAGE:
            self.compaction_attempts += 1

    def _fold_compaction(self, member: pb.SessionCompaction, seq: int, redacted: bool) -> None:
        self._apply_compaction(member, seq)

    def history(self) -> History:
        """The folded conversation as a compaction sees it."""
        return History(self.messages, self.message_seqs, self.pin_records,
                       self.compacted_through, self.tape_len)

    def _apply_compaction(self, member: pb.SessionCompaction, seq: int) -> None:
        self.messages, self.message_seqs, self.pin_records = compaction.apply(
            self.history(), member, seq)
        self.message_tokens = [estimate_tokens(m) for m in self.messages]
        self.compacted_through = member.last_seq + 1
        self.compaction_attempts += 1
        self.last_compaction_ms = member.created_unix_ms

    def _apply_loop(self, member: pb.AgentLoop) -> None:
        if member.phase == pb.AgentLoopPhase.STARTED:
            self.loop_active, self.loop_turns, self.proposals = True, 0, []
            self.context_blocks = []
            self.loops_started += 1
        elif member.phase == pb.AgentLoopPhase.TURN_COMPLETED:
            self.proposals = []
            self.live_arguments.clear()  # a batch that never folded its proposals left some
        elif member.phase == pb.AgentLoopPhase.TERMINATED:
            self.loop_active, self.proposals = False, []
            self.live_arguments.clear()

    def _apply_proposal(self, member: pb.ToolProposal, redacted: bool) -> None:
        proposal = Proposal(member.proposal_id, member.tool_name, member.input_json,
                            args_redacted=redacted, context_reference=member.context_reference,
                            decoded=self.live_arguments.pop(member.proposal_id, None))
        self.proposals.append(proposal)
        if proposal.context_reference:
            return  # the daemon's call, not the model's: no assistant message carries it
        # The assistant message of this turn carries the call; the proposal id
        # doubles as the call id so a rebuilt conversation is self-consistent.
        for i in range(len(self.messages) - 1, -1, -1):
            msg = self.messages[i]
            if msg.role == "assistant":
                call = ToolCall(id=proposal.proposal_id, name=proposal.tool_name,
                                arguments=proposal.arguments())
                self.messages[i] = msg = msgspec.structs.replace(
                    msg, tool_calls=[*msg.tool_calls, call]
                )
                self.message_tokens[i] = estimate_tokens(msg)
                break

    def _apply_decision(self, member: pb.ToolDecision) -> None:
        p = self.find(member.proposal_id)
        if p is None:
            return
        p.policy_hash, p.posture = member.policy_hash, member.posture
        if member.outcome == pb.ToolDecisionOutcome.ALLOW:
            p.phase = ProposalPhase.ALLOWED
        elif member.outcome == pb.ToolDecisionOutcome.NEEDS_APPROVAL:
            p.phase = ProposalPhase.NEEDS_APPROVAL
        else:
            p.phase, p.deny_reason = ProposalPhase.DENIED, member.reason or "denied by policy"

    def _apply_result(self, member: pb.ToolResult) -> None:
        p = self.find(member.proposal_id)
        if p is not None:
            p.phase = ProposalPhase.DONE
            if p.context_reference:
                self.context_blocks.append(reference_block(p, member))
                return
        self.tool_call_count += 1
        content = member.output_json if member.success else json.dumps(
            {"error": member.error or "tool failed"}
        )
        self._append(
            ChatMessage(role="tool", content=content, tool_call_id=member.proposal_id,
                        images=images_of(member))
        )

    def _append(self, message: ChatMessage) -> None:
        self.messages.append(message)
        self.message_tokens.append(estimate_tokens(message))

    def history_tokens(self) -> list[int] | None:
        """The estimate of each message of ``messages`` (None if they ever disagreed in
        length, which no fold does: the caller then estimates them itself)."""
        tokens = self.message_tokens
        return tokens if len(tokens) == len(self.messages) else None

    def find(self, proposal_id: str) -> Proposal | None:
        """The proposal of the current turn with this id."""
        for p in self.proposals:
            if p.proposal_id == proposal_id:
                return p
        return None

    def next_action(self) -> tuple[Action, Proposal | None]:
        """What the loop does next, from the state alone."""
        if not self.loop_active:
            return Action.IDLE, None
        for p in self.proposals:
            if p.phase is not ProposalPhase.DONE:
                return Action.RESOLVE_TOOL, p
        if self.proposals:
            return Action.COMPLETE_TURN, None
        return Action.START_TURN, None


_Fold = Callable[[LoopState, Any, int, bool], None]
# The tape members the loop folds, by exact class (generated messages are never
# subclassed); every other member only advances ``tape_len``.
_FOLDS: dict[type, _Fold] = {
    pb.RunStatus: LoopState._fold_status,
    pb.UserInput: LoopState._fold_input,
    pb.AgentLoop: LoopState._fold_loop,
    pb.ProviderTurnOutput: LoopState._fold_output,
    pb.ToolProposal: LoopState._fold_proposal,
    pb.ToolDecision: LoopState._fold_decision,
    pb.ToolApprovalRequest: LoopState._fold_approval_request,
    pb.ToolApprovalResponse: LoopState._fold_approval_response,
    pb.ToolResult: LoopState._fold_result,
    pb.MessageReplied: LoopState._fold_replied,
    pb.ContextStage: LoopState._fold_stage,
    pb.SessionCompaction: LoopState._fold_compaction,
}


def images_of(member: pb.UserInput | pb.ToolResult) -> list[ImagePart]:
    """The input's (or tool result's) images as references (the bytes are loaded for
    the call)."""
    return [ImagePart(a.sha256, a.mime_type, a.width, a.height) for a in member.attachments]
