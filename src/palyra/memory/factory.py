"""The embedder ``[memory] embedder`` names (the daemon's composition root calls this)."""

from __future__ import annotations

from collections.abc import Mapping

from palyra.memory.config import MemoryConfig
from palyra.memory.embed import Embedder, HashEmbedder, default_embedder
from palyra.memory.remote import OpenAIEmbedder, api_key_from


def build_embedder(config: MemoryConfig, env: Mapping[str, str]) -> Embedder:
    """``hash``, ``openai`` (its key read from ``env``) or ``wordllama`` (the hash embedder
    when wordllama is not installed).

    Raises:
        PalyraError: ``CONFIG_INVALID`` when the OpenAI key variable is named but unset.
    """
    if config.embedder == "hash":
        return HashEmbedder()
    if config.embedder == "openai":
        return OpenAIEmbedder(config.openai, api_key_from(config.openai, env))
    return default_embedder()
