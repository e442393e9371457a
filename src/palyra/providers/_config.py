"""Configuration of the model provider (one frozen dataclass, passed explicitly)."""

from __future__ import annotations

import dataclasses
from typing import Literal, TypeAlias

ProviderKind: TypeAlias = Literal["scripted", "openai", "anthropic"]
# The tool the tool-loop script calls: ``echo`` gets ``{"text": ...}``; any other
# name is an ``add`` (``{"a": r, "b": 1}``): the built-in, or the same tool served
# by an MCP server (``mcp.bench.add``) or a skill.
ScriptedTool: TypeAlias = str


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderConfig:
    """How to reach the model.

    Attributes:
        name: The registry name agents and the tape use. In ``[[providers]]``
            it is required and unique; the default ``[provider]`` may leave it
            empty and is then named by its kind.
        kind: ``scripted`` (default; deterministic, no keys), ``openai``
            (any OpenAI-compatible ``/v1/chat/completions``) or ``anthropic``.
        model: Default model name sent to the vendor.
        models: Models this provider offers (an agent may name only these);
            empty: any model name is passed through.
        vision: The provider's models accept images; a call with images to one
            that does not is refused before it is made.
        base_url: Vendor base URL without the ``/v1/...`` path; empty picks the
            vendor's public endpoint.
        api_key_env: Name of the environment variable holding the API key.
            Empty sends no key (useful for local OpenAI-compatible servers).
        max_tokens: Default output token cap when a request leaves it at 0.
        timeout_s: Total per-attempt timeout for a non-streamed read and the
            maximum gap between two streamed bytes.
        connect_timeout_s: TCP/TLS connect timeout.
        max_retries: Retries after the first attempt on 429, 5xx, connection
            errors and timeouts, as long as nothing was streamed yet.
        backoff_base_s: First retry delay; doubles per retry (with jitter).
        backoff_max_s: Cap of a single retry delay (also caps ``Retry-After``).
        breaker_failure_threshold: Consecutive failed calls that open the
            circuit breaker.
        breaker_reset_s: How long an open breaker rejects calls before letting
            one trial call through.
        anthropic_version: Value of the ``anthropic-version`` header.
        scripted_tool: Tool the scripted provider calls in the tool-loop
            workload: ``add`` (default), ``echo``, or another add-like tool
            by name (``mcp.bench.add``).
        scripted_delay_s: Delay the scripted provider sleeps before answering,
            so cancellation can catch it mid-call. Default 0.
    """

    name: str = ""
    kind: ProviderKind = "scripted"
    model: str = ""
    models: tuple[str, ...] = ()
    vision: bool = True
    base_url: str = ""
    api_key_env: str = ""
    max_tokens: int = 1024
    timeout_s: float = 60.0
    connect_timeout_s: float = 10.0
    max_retries: int = 2
    backoff_base_s: float = 0.5
    backoff_max_s: float = 8.0
    breaker_failure_threshold: int = 3
    breaker_reset_s: float = 30.0
    anthropic_version: str = "2023-06-01"
    scripted_tool: ScriptedTool = "add"
    scripted_delay_s: float = 0.0

    @property
    def registry_name(self) -> str:
        """The name the registry and the tape know this provider by."""
        return self.name or self.kind
