"""Model providers: one interface over a scripted model, OpenAI and Anthropic.

Use ``build_provider(ProviderConfig(...))`` and drive ``provider.stream(request)``
(text deltas, then one ``Completed``) or ``await provider.complete(request)``.
"""

from palyra.providers._anthropic import AnthropicProvider
from palyra.providers._cache import (
    CACHE_KEY_PREFIX,
    CachedAnswer,
    cacheable,
    decode_entry,
    encode_entry,
    request_digest,
)
from palyra.providers._config import ProviderConfig, ProviderKind, ScriptedTool
from palyra.providers._factory import build_provider
from palyra.providers._failover import Answered, Failover, complete_routed, stream_routed
from palyra.providers._openai import OpenAIProvider
from palyra.providers._registry import ProviderRegistry, Target, parse_target
from palyra.providers._scripted import ScriptedProvider, parse_tool_value, scripted_reply
from palyra.providers._types import (
    ChatMessage,
    Completed,
    FinishReason,
    ImagePart,
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
    "CACHE_KEY_PREFIX",
    "Answered",
    "AnthropicProvider",
    "BreakerState",
    "CachedAnswer",
    "ChatMessage",
    "CircuitBreaker",
    "Completed",
    "Failover",
    "FinishReason",
    "ImagePart",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "OpenAIProvider",
    "ProviderChunk",
    "ProviderConfig",
    "ProviderKind",
    "ProviderRegistry",
    "RetryPolicy",
    "Role",
    "ScriptedProvider",
    "ScriptedTool",
    "Target",
    "TextDelta",
    "ToolCall",
    "ToolSpecForModel",
    "Usage",
    "build_provider",
    "cacheable",
    "collect_response",
    "complete_routed",
    "decode_entry",
    "encode_entry",
    "parse_target",
    "parse_tool_value",
    "request_digest",
    "scripted_reply",
    "stream_routed",
]
