"""What a tool is: spec, execution context, output and result types."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Generic, TypeAlias, TypeVar

import msgspec

from palyra.core.capabilities import Capability
from palyra.core.errors import ErrorCode, PalyraError

ArgsT = TypeVar("ArgsT")  # a msgspec Struct, or ``dict`` for a tool with an input_schema

MemorySearchHook: TypeAlias = Callable[[str, int], Awaitable[list[dict[str, Any]]]]
"""``(query, limit) -> hits``: searches the session's memory; hits are JSON objects."""


class ToolError(PalyraError):
    """Raised by a tool handler for an expected failure (bad path, blocked URL).

    The registry turns it into a failed ``ToolResult`` whose ``error`` is the
    message, which is fed back to the model.
    """

    code = ErrorCode.TOOL_FAILED

    def __init__(self, message: str, *, facts: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.facts: dict[str, str] = dict(facts or {})


@dataclasses.dataclass(frozen=True, slots=True)
class ToolContext:
    """What a running tool may know about its surroundings.

    Attributes:
        workspace_dir: Root of the file tools; nothing outside it is reachable.
        session_id: Session the call belongs to.
        run_id: Run the call belongs to.
        memory_search: Hook for ``memory.search``; ``None`` means no memory.
        posture: The call's posture as resolved when it was decided ("" when
            unknown); ``process.run`` picks its sandbox tier by it.
    """

    workspace_dir: Path
    session_id: str = ""
    run_id: str = ""
    memory_search: MemorySearchHook | None = None
    posture: str = ""


class ToolImage(msgspec.Struct, frozen=True):
    """An image a tool returned, sniffed from its bytes (``core.images``): the engine
    stores it as an attachment and the model sees it on its next turn.

    Attributes:
        sha256: Lowercase hex SHA-256 of ``data``.
        mime_type: The sniffed type.
        width: Pixels.
        height: Pixels.
        data: The bytes (at most ``core.images.MAX_ATTACHMENT_BYTES``).
    """

    sha256: str
    mime_type: str
    width: int
    height: int
    data: bytes


class ToolOutput(msgspec.Struct, frozen=True):
    """What a handler returns.

    Attributes:
        value: Any msgspec-encodable value; the registry encodes it as JSON.
        truncated: The handler already cut its output (e.g. a large file).
        facts: What the execution vouches for beyond its output (the files'
            digests, the sandbox tier, the MCP server's version); journaled in
            the attestation and covered by its hash.
        images: Images the tool returned (an MCP server's image content).
    """

    value: Any
    truncated: bool = False
    facts: dict[str, str] = msgspec.field(default_factory=dict)
    images: tuple[ToolImage, ...] = ()


class ToolResult(msgspec.Struct, frozen=True):
    """Outcome of one execution, ready to journal and feed to the model.

    Attributes:
        success: The handler returned normally.
        output_json: JSON text of the output ("" when failed).
        error: Human-readable failure ("" on success).
        timed_out: The handler was stopped by the tool's timeout.
        truncated: The output was cut to ``max_output_bytes`` (here or by the
            handler itself).
        facts: The handler's ``ToolOutput.facts`` (or a ``ToolError``'s).
        images: The handler's ``ToolOutput.images``.
    """

    success: bool
    output_json: str = ""
    error: str = ""
    timed_out: bool = False
    truncated: bool = False
    facts: dict[str, str] = msgspec.field(default_factory=dict)
    images: tuple[ToolImage, ...] = ()

    def model_content(self) -> str:
        """The text to put in the ``tool`` message for the model."""
        if self.success:
            return self.output_json
        return msgspec.json.encode({"error": self.error}).decode()


Handler: TypeAlias = Callable[[ArgsT, ToolContext], Awaitable[ToolOutput]]


@dataclasses.dataclass(frozen=True, slots=True)
class ToolSpec(Generic[ArgsT]):
    """A registered tool.

    Attributes:
        name: Unique name the model calls (``fs.read``).
        description: One sentence for the model.
        args_type: msgspec Struct of the arguments (use
            ``forbid_unknown_fields=True``); also gives the JSON schema.
        capabilities: What the tool may touch; drives policy and posture.
        handler: ``async (args, ctx) -> ToolOutput``.
        timeout_s: Wall-clock limit of one call.
        max_output_bytes: Cap on the encoded output JSON.
        executor: What runs it, as the attestation names it: ``builtin``,
            ``mcp`` (a user's MCP server) or ``sandbox`` (``process.run``).
        input_schema: A JSON Schema of the arguments given by the tool's owner
            (an MCP server); then the handler gets the arguments as a plain
            ``dict`` (``args_type`` is ``dict``) once ``check_args`` passed.
        check_args: With ``input_schema``: returns why the arguments do not
            match it, or ``None``.
        origin: Who provides it beyond the daemon: a skill's ``name@version``,
            an MCP server's name ("" for a built-in).
        risk: The risk an approval prompt states (``medium``/``high``);
            empty: HIGH for a sensitive tool, MEDIUM otherwise.
        risk_by_posture: The risk under a resolved posture, where it differs
            by posture (``process.run``, whose sandbox tier follows it).
        idempotent: Running the same call again has the effect of running it
            once (``agent.delegate`` finds the child run it started), so a call
            a restart left in flight runs again like a read-only one, though
            the tool is not read-only for approvals.
    """

    name: str
    description: str
    args_type: type[ArgsT]
    capabilities: frozenset[Capability]
    handler: Handler[ArgsT]
    timeout_s: float = 30.0
    max_output_bytes: int = 64 * 1024
    executor: str = "builtin"
    input_schema: Mapping[str, Any] | None = None
    risk: str = ""
    risk_by_posture: Mapping[str, str] = dataclasses.field(default_factory=dict)
    origin: str = ""
    check_args: Callable[[dict[str, Any]], str | None] | None = None
    idempotent: bool = False

    @property
    def follows_posture(self) -> bool:
        """Whether a call runs differently by its posture (it states a risk per posture)."""
        return bool(self.risk_by_posture)

    def risk_for(self, posture: str) -> str:
        """The risk an approval prompt states for a call under ``posture``."""
        return self.risk_by_posture.get(posture, self.risk)

    def json_schema(self) -> dict[str, Any]:
        """JSON schema of the arguments, inlined for models.

        ``msgspec.json.schema`` wraps a Struct in ``$ref``/``$defs``; models
        handle a plain object schema better, so the top level is inlined (other
        definitions, if any, stay under ``$defs``).
        """
        if self.input_schema is not None:
            return dict(self.input_schema)
        schema = msgspec.json.schema(self.args_type)
        defs: dict[str, Any] = dict(schema.get("$defs", {}))
        ref = schema.get("$ref", "")
        if not ref.startswith("#/$defs/"):
            return schema
        top: dict[str, Any] = dict(defs.pop(ref.removeprefix("#/$defs/")))
        # The tool description already says what the struct docstring says.
        top.pop("title", None)
        top.pop("description", None)
        if defs:
            top["$defs"] = defs
        return top
