"""``build_provider``: config in, provider out."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from palyra.core.errors import ErrorCode, PalyraError
from palyra.providers._anthropic import AnthropicProvider
from palyra.providers._config import ProviderConfig
from palyra.providers._openai import OpenAIProvider
from palyra.providers._scripted import ScriptedProvider
from palyra.providers._types import ModelProvider


def build_provider(
    config: ProviderConfig,
    *,
    client: httpx.AsyncClient | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> ModelProvider:
    """Build the provider named by ``config.kind``.

    Args:
        config: Provider configuration.
        client: Optional shared ``httpx.AsyncClient`` for HTTP providers (the
            caller then owns it); by default each provider owns its client.
        clock: Monotonic clock for the circuit breaker.

    Raises:
        PalyraError: ``CONFIG_INVALID`` for an unknown kind or a missing API
            key environment variable.
    """
    if config.kind == "scripted":
        return ScriptedProvider(tool=config.scripted_tool, delay_s=config.scripted_delay_s)
    if config.kind == "openai":
        return OpenAIProvider(config, client=client, clock=clock)
    if config.kind == "anthropic":
        return AnthropicProvider(config, client=client, clock=clock)
    raise PalyraError(
        f"unknown provider kind {config.kind!r}; expected scripted, openai or anthropic",
        code=ErrorCode.CONFIG_INVALID,
    )
