"""Memory settings: ``[memory]`` and ``[memory.openai]`` in TOML, ``PALYRA_MEMORY_*`` in the env."""

from __future__ import annotations

import dataclasses
from typing import Literal, TypeAlias

EmbedderKind: TypeAlias = Literal["wordllama", "hash", "openai"]


@dataclasses.dataclass(frozen=True, slots=True)
class OpenAIEmbeddingsConfig:
    """An OpenAI-compatible ``POST {base_url}/embeddings`` endpoint.

    Attributes:
        base_url: The API root, e.g. ``https://api.openai.com/v1`` or a local server's
            ``http://127.0.0.1:11434/v1``.
        model: The embedding model name sent with each request.
        api_key_env: The environment variable holding the bearer key; empty for a
            server that wants none. Named but unset is a configuration error.
        dimensions: The vector length; sent as ``dimensions`` (models that can shorten
            their vectors) and checked on every answer. 0: learned from the first answer.
        timeout_s: Per HTTP request.
        batch_size: Texts per request.
        max_retries: Retries of a request after a 429, a 5xx, a timeout or a connection
            error (the provider resilience helpers: backoff with jitter, circuit breaker).
    """

    base_url: str = "https://api.openai.com/v1"
    model: str = "text-embedding-3-small"
    api_key_env: str = "OPENAI_API_KEY"
    dimensions: int = 0
    timeout_s: float = 10.0
    batch_size: int = 128
    max_retries: int = 2

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must be an http(s) URL")
        if not self.model:
            raise ValueError("model must not be empty")
        if self.dimensions < 0 or self.timeout_s <= 0 or self.max_retries < 0:
            raise ValueError("dimensions and max_retries must be >= 0, timeout_s > 0")
        if not 1 <= self.batch_size <= 2048:
            raise ValueError("batch_size must be 1..2048")


@dataclasses.dataclass(frozen=True, slots=True)
class MemoryConfig:
    """How memory embeds text.

    Attributes:
        embedder: ``wordllama`` (the default: offline, weights inside its wheel; the hash
            embedder when it is not installed), ``hash`` (the 64-d hashed bag of words)
            or ``openai`` (an OpenAI-compatible endpoint, ``[memory.openai]``).
        openai: The endpoint, when ``embedder = "openai"``.
    """

    embedder: EmbedderKind = "wordllama"
    openai: OpenAIEmbeddingsConfig = dataclasses.field(default_factory=OpenAIEmbeddingsConfig)
