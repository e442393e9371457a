"""Model providers: one interface over a scripted model, OpenAI and Anthropic.

Use ``build_provider(ProviderConfig(...))`` and drive ``provider.stream(request)``
(text deltas, then one ``Completed``) or ``await provider.complete(request)``.
"""

from palyra.providers._anthropic import AnthropicProvider
from palyra.providers._config import ProviderConfig, ProviderKind, ScriptedTool
from palyra.providers._factory import build_provider
from palyra.providers._openai import OpenAIProvider
from palyra.providers._scripted import ScriptedProvider, parse_tool_value, scripted_reply
from palyra.providers._types import (
    ChatMessage,
    Completed,
    FinishReason,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ProviderChunk,
    Role,
    TextDelta,
    ToolCall,
    ToolSpecForModel,
    Usage,
    collect_response,
)
from palyra.providers.resilience import BreakerState, CircuitBreaker, RetryPolicy

__all__ = [
    "AnthropicProvider",
    "BreakerState",
    "ChatMessage",
    "CircuitBreaker",
    "Completed",
    "FinishReason",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "OpenAIProvider",
    "ProviderChunk",
    "ProviderConfig",
    "ProviderKind",
    "RetryPolicy",
    "Role",
    "ScriptedProvider",
    "ScriptedTool",
    "TextDelta",
    "ToolCall",
    "ToolSpecForModel",
    "Usage",
    "build_provider",
    "collect_response",
    "parse_tool_value",
    "scripted_reply",
]
