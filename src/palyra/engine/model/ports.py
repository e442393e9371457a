"""What the engine needs from policy and tools, as narrow protocols.

The engine codes against these; ``palyra.adapters`` binds them to ``palyra.policy``
and ``palyra.tools``. Keeping the seam here means a change in either package
touches one adapter, not the run loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from palyra_gen.palyra import v1 as pb

from palyra.engine.model.records import ApprovalRecord, AttachmentRec, IdentityRec
from palyra.providers import ToolSpecForModel


@dataclass(frozen=True, slots=True)
class ToolVerdict:
    """The policy gate's answer for one proposed tool call."""

    outcome: pb.ToolDecisionOutcome
    reason: str
    policy_hash: str
    policy_ids: tuple[str, ...] = ()
    risk_level: str = "high"
    # The tool's posture as resolved for this call; taped with the decision.
    posture: str = ""


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """One proposed tool call, with who asks and where."""

    identity: IdentityRec
    session_id: str
    run_id: str
    tool_name: str
    arguments: Mapping[str, Any]
    postures: Mapping[str, str]
    calls_made: int = 0


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What executing a tool produced (also for denials fed back to the model)."""

    success: bool
    output_json: str
    error: str = ""
    timed_out: bool = False
    truncated: bool = False
    execution_sha256: str = ""
    executor: str = "builtin"
    # What the executor vouches for (ToolAttestation.facts), covered by the hash.
    facts: Mapping[str, str] = field(default_factory=dict)
    # Images the tool returned, sniffed: stored as attachments, referenced on the tape.
    images: tuple[tuple[AttachmentRec, bytes], ...] = ()


class PolicyPort(Protocol):
    """The Cedar gate, as the engine uses it."""

    @property
    def policy_hash(self) -> str:
        """SHA-256 of the active policy set and schema."""
        ...

    def decide_tool(self, request: ToolRequest) -> ToolVerdict:
        """Allow, deny or ask for one tool call."""
        ...

    def may_decide_approval(self, identity: IdentityRec, approval: ApprovalRecord) -> bool:
        """Whether ``identity`` may decide ``approval`` (Cedar ``approval.decide``)."""
        ...

    def posture_change(self, identity: IdentityRec, session_id: str, tool_name: str,
                       posture: str) -> tuple[bool, str]:
        """Whether ``identity`` may set the posture (Cedar ``session.set_posture``), and why."""
        ...

    def memory_change(self, identity: IdentityRec, action: str, *, session_id: str = "",
                      count: int = 1) -> tuple[bool, str]:
        """Whether ``identity`` may delete or purge memory (Cedar ``memory.delete`` /
        ``memory.purge``), and why."""
        ...

    def model_select(self, identity: IdentityRec, provider: str, model: str, *,
                     agent_id: str, in_agent_route: bool) -> tuple[bool, str]:
        """Whether ``identity`` may have ``provider``/``model`` answer its run (Cedar
        ``model.select``), and why."""
        ...

    def cron_delete(self, identity: IdentityRec, schedule_id: str, *,
                    owner: str) -> tuple[bool, str]:
        """Whether ``identity`` may delete a scheduled prompt (Cedar ``cron.delete``), and why."""
        ...

    def learning_review(self, identity: IdentityRec, candidate_id: str, *, run_principal: str,
                        decision: str, kind: str, session_id: str) -> tuple[bool, str]:
        """Whether ``identity`` may accept/reject a learning candidate (Cedar
        ``learning.review``), and why."""
        ...


class ToolsPort(Protocol):
    """The tool registry and executor, as the engine uses it."""

    def catalog(self) -> list[ToolSpecForModel]:
        """Tools advertised to the model."""
        ...

    def catalog_hash(self) -> str:
        """Digest of the catalog (taped once per loop)."""
        ...

    def is_read_only(self, name: str) -> bool:
        """True when the tool declares ``read_only`` and nothing sensitive (such calls
        allowed outright run together in a parallel group)."""
        ...

    def may_rerun(self, name: str) -> bool:
        """True when running a call again that a crash left in flight is safe: the
        tool is read-only, or idempotent by its own design."""
        ...

    def args_digest(self, name: str, arguments: Mapping[str, Any]) -> str:
        """SHA-256 hex of the canonical JSON of the exact arguments."""
        ...

    async def execute(
        self, name: str, arguments: Mapping[str, Any], *, session_id: str, run_id: str,
        timeout_s: float, posture: str = "", args_json: str = "",
    ) -> ToolOutcome:
        """Run the tool; cancellable by plain asyncio cancellation.

        ``posture`` is the one taped with the call's decision (a tool may
        confine itself by it: ``process.run``'s sandbox tier).

        ``args_json``: the canonical JSON of ``arguments``
        (``tools.canonical_args_json``) when the caller already made it (the
        proposal's ``input_json``), so the attestation does not encode them again.

        The port enforces ``timeout_s`` (the loop's remaining wall-clock time, or
        less): a call that outlasts it is a ``timed_out`` outcome, not an error.
        The engine sets no timer of its own around this call.
        """
        ...


@dataclass(frozen=True, slots=True)
class ContextRequest:
    """What input assembly knows when a new user input starts a loop."""

    identity: IdentityRec
    session_id: str
    run_id: str
    text: str
    # The session's previous run, on this run's first loop only ("" otherwise).
    previous_run_id: str = ""
    # The agent serving the run ("" for none).
    agent_id: str = ""
    # The tool postures the run's own tool calls are decided under (the agent's,
    # then the session's), so a reference is gated exactly like its tool.
    postures: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReferenceCall:
    """A context reference whose tool needs an approval: the engine proposes the call
    (``ToolProposal.context_reference``), parks the run like any tool call, and feeds
    the result to the model as a context block."""

    label: str  # e.g. ``@url:https://example.com``
    tool_name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ContextContribution:
    """One stage's contribution to the provider input (taped as ``context_stage``)."""

    stage: str
    content: str
    tokens: int
    tokenizer: str
    reason: str
    item_ids: tuple[str, ...] = ()
    scores_bps: tuple[int, ...] = ()
    # References left for an approval (resolved after the run is unparked).
    awaiting_approval: tuple[ReferenceCall, ...] = ()


class ContextPort(Protocol):
    """Provider input assembly beyond the run's own tape (memory, …)."""

    async def assemble(self, request: ContextRequest) -> list[ContextContribution]:
        """The stages that contribute for this input, in the documented order."""
        ...
