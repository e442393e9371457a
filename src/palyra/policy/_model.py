"""Value types of the policy gate: requests, postures, engine results, decisions."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable

from palyra.core.capabilities import is_sensitive


class Posture(enum.StrEnum):
    """How the operator wants a tool treated.

    ``always_allow`` runs without asking (even sensitive tools, unless a forbid
    policy says otherwise); ``ask_each_time`` needs an approval per call;
    ``disabled`` never runs.
    """

    ALWAYS_ALLOW = "always_allow"
    ASK_EACH_TIME = "ask_each_time"
    DISABLED = "disabled"


class Outcome(enum.StrEnum):
    """What the engine does with a tool call."""

    ALLOW = "allow"
    DENY = "deny"
    NEEDS_APPROVAL = "needs_approval"


@dataclasses.dataclass(frozen=True, slots=True)
class ToolRequest:
    """One proposed tool call, as the gate sees it.

    Attributes:
        principal: Authenticated principal of the run (``user:alice``).
        tool_name: Tool the model asked for.
        capabilities: The tool's capabilities (strings; ``Capability`` values
            fit). Empty for an unknown tool.
        registered: The tool exists in the registry.
        session_id: Session of the run.
        run_id: The run.
        channel: Channel the run came from ("" for direct API use).
        args_digest: ``palyra.tools.args_digest`` of the call; approvals bind
            to it. The gate does not read it; it travels for the journal.
    """

    principal: str
    tool_name: str
    capabilities: frozenset[str]
    registered: bool = True
    session_id: str = ""
    run_id: str = ""
    channel: str = ""
    args_digest: str = ""

    @property
    def is_sensitive(self) -> bool:
        """Whether the call needs approval by default (see ``is_sensitive``)."""
        return not self.registered or is_sensitive(self.capabilities)

    @classmethod
    def of(
        cls, principal: str, tool_name: str, capabilities: Iterable[str] | None, **fields: str
    ) -> ToolRequest:
        """Build a request; ``capabilities=None`` marks an unregistered tool."""
        return cls(
            principal,
            tool_name,
            frozenset(capabilities or ()),
            registered=capabilities is not None,
            **fields,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class EngineResult:
    """What Cedar said about a request (translated, no cedarpy types).

    Attributes:
        allowed: Cedar allowed the request with the real ``approved`` flag.
        allowed_if_approved: Cedar would allow it if an approval existed
            (equal to ``allowed`` when the call is already approved).
        policy_ids: Ids of the policies that determined ``allowed`` (permits
            on allow, forbids on deny; empty for deny-by-default).
        errors: Engine errors (bad context, evaluation errors). Any error
            denies.
        policy_hash: Hash of the active policy set and schema.
    """

    allowed: bool
    allowed_if_approved: bool
    policy_ids: tuple[str, ...]
    errors: tuple[str, ...]
    policy_hash: str


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """The gate's answer, journaled with the call.

    Attributes:
        outcome: ``allow``, ``deny`` or ``needs_approval``.
        reason: One human-readable sentence.
        policy_ids: Policies that determined the outcome.
        policy_hash: Hash of the active policy set and schema.
    """

    outcome: Outcome
    reason: str
    policy_ids: tuple[str, ...]
    policy_hash: str

    @property
    def allowed(self) -> bool:
        """Shorthand for ``outcome is Outcome.ALLOW``."""
        return self.outcome is Outcome.ALLOW
