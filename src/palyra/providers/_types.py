"""Provider-neutral chat types and the ``ModelProvider`` protocol.

Every provider (scripted, OpenAI-compatible, Anthropic) speaks these types, so
the agent loop never sees a vendor's wire format. The types are frozen msgspec
Structs: cheap to build, encodable to JSON for the journal as they are.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

import msgspec

from palyra.core.errors import PalyraInternalError

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
FinishReason: TypeAlias = Literal["stop", "tool_calls", "length"]


class ToolCall(msgspec.Struct, frozen=True):
    """One tool invocation requested by the model.

    Attributes:
        id: The provider's call id; the matching tool message echoes it.
        name: Tool name as registered in the tool registry.
        arguments: Decoded JSON arguments. When a model emits arguments that
            are not a JSON object, providers pass ``{"_raw_arguments": text}``
            so argument validation fails with a message the model can read.
    """

    id: str
    name: str
    arguments: dict[str, Any] = {}


class ImagePart(msgspec.Struct, frozen=True):
    """An image of a message: what the store sniffed, and (once loaded) its bytes."""

    sha256: str
    mime_type: str
    width: int = 0
    height: int = 0
    data: bytes = b""

    def describe(self) -> str:
        """``image/png 2x3 sha256:<first 12 hex>`` (the scripted model's description)."""
        return f"{self.mime_type} {self.width}x{self.height} sha256:{self.sha256[:12]}"


class ChatMessage(msgspec.Struct, frozen=True):
    """One message of the conversation sent to the model.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: Text content. For ``tool`` messages, the tool's output JSON.
        tool_calls: Tool calls made by an ``assistant`` message.
        tool_call_id: For ``tool`` messages, the id of the call answered.
        images: Images of a ``user`` message (content parts after the text).
    """

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = []
    tool_call_id: str = ""
    images: list[ImagePart] = []


class ToolSpecForModel(msgspec.Struct, frozen=True):
    """A tool as advertised to the model: name, description, JSON schema."""

    name: str
    description: str
    parameters_json_schema: dict[str, Any]


class ModelRequest(msgspec.Struct, frozen=True):
    """One model call.

    Attributes:
        messages: The conversation, oldest first.
        tools: Tools the model may call; empty means none.
        model: Model override; empty uses the provider's configured model.
        max_tokens: Output token cap; 0 uses the provider's configured cap.
        temperature: Sampling temperature; ``None`` leaves the vendor default.
    """

    messages: list[ChatMessage]
    tools: list[ToolSpecForModel] = []
    model: str = ""
    max_tokens: int = 0
    temperature: float | None = None


class Usage(msgspec.Struct, frozen=True):
    """Token accounting reported by the provider (scripted: word counts).

    ``input_tokens`` counts every input token, ``cached_input_tokens`` those of
    them the vendor served from its own prompt cache (priced lower).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0


class ModelResponse(msgspec.Struct, frozen=True):
    """The complete answer of one model call.

    ``finish_reason`` is ``tool_calls`` exactly when ``tool_calls`` is non-empty
    (providers normalise vendor reasons to that rule).
    """

    text: str
    tool_calls: list[ToolCall]
    finish_reason: FinishReason
    usage: Usage = Usage()
    model: str = ""


class TextDelta(msgspec.Struct, frozen=True):
    """A piece of assistant text, streamed as soon as the provider has it."""

    text: str


class Completed(msgspec.Struct, frozen=True):
    """The last chunk of every successful stream; carries the whole response."""

    response: ModelResponse


ProviderChunk: TypeAlias = TextDelta | Completed


@runtime_checkable
class ModelProvider(Protocol):
    """What the agent loop needs from a model.

    Cancellation is plain asyncio cancellation: the caller cancels the task
    that iterates ``stream``. Providers never swallow ``CancelledError`` and
    release their HTTP connection when the generator is closed, so callers
    that may stop early should iterate inside ``contextlib.aclosing``.

    Errors are ``PalyraError``: ``PROVIDER_UNAVAILABLE`` (5xx, connection
    failures, open circuit breaker), ``RESOURCE_EXHAUSTED`` (429 after
    retries), ``DEADLINE_EXCEEDED`` (timeout), ``CONFIG_INVALID`` (401/403/404:
    bad key, URL or model) and ``INVALID_ARGUMENT`` (the vendor rejected the
    request).
    """

    @property
    def name(self) -> str:
        """Provider kind: ``scripted``, ``openai`` or ``anthropic``."""
        ...

    def stream(self, request: ModelRequest) -> AsyncGenerator[ProviderChunk, None]:
        """Stream text deltas, then exactly one ``Completed`` chunk.

        Implementations are async generator functions. The return type is
        ``AsyncGenerator`` rather than ``AsyncIterator`` so callers can
        ``aclose()`` it (and so ``contextlib.aclosing`` type-checks).
        """
        ...

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Run ``stream`` to the end and return the final response."""
        ...

    async def aclose(self) -> None:
        """Release pooled connections. Idempotent."""
        ...


async def collect_response(stream: AsyncGenerator[ProviderChunk, None]) -> ModelResponse:
    """Drain a provider stream and return its ``Completed`` response.

    Args:
        stream: A stream returned by ``ModelProvider.stream``; it is closed on
            every exit path, including cancellation.

    Raises:
        PalyraInternalError: If the stream ended without a ``Completed`` chunk.
    """
    async with aclosing(stream) as chunks:
        async for chunk in chunks:
            if isinstance(chunk, Completed):
                return chunk.response
    raise PalyraInternalError("provider stream ended without a Completed chunk")
