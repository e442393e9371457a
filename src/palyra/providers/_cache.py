"""The response cache's pure half: which requests may be cached, their digest, the entry.

An entry is keyed by the SHA-256 of the exact request as the provider would
get it: provider, model, every message, every tool schema and the sampling
parameters. A request with a non-deterministic parameter (a temperature above
zero) is never cached: a cached answer would hide the variation it asked for.
The engine stores entries in the journal, so a hit survives restarts and is
as durable as the answer it repeats.
"""

from __future__ import annotations

import hashlib

import msgspec

from palyra.providers._registry import Target
from palyra.providers._types import ChatMessage, ModelRequest, ModelResponse

#: Key prefix of cache entries in the journal's ``meta`` table.
CACHE_KEY_PREFIX = "model_cache:"

_ENCODER = msgspec.json.Encoder(order="sorted")


class CachedAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """A stored answer and where it came from."""

    response: ModelResponse
    provider: str
    digest: str
    created_ms: int


def cacheable(request: ModelRequest) -> bool:
    """Whether ``request`` asks for a repeatable answer (no temperature above 0)."""
    return request.temperature is None or request.temperature == 0.0


def request_digest(target: Target, request: ModelRequest) -> str:
    """Lowercase hex SHA-256 of everything that shapes the answer.

    Tool-call ids are the one thing left out: the engine names each call by a
    fresh proposal id, which only pairs a call with its result, so they are
    renumbered in order of appearance (two runs making the same calls with the
    same results send the same request up to those names).
    """
    body = _ENCODER.encode({
        "provider": target.provider,
        "model": target.model,
        "messages": _renumbered(request.messages),
        "tools": request.tools,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
    })
    return hashlib.sha256(body).hexdigest()


def _renumbered(messages: list[ChatMessage]) -> list[ChatMessage]:
    names: dict[str, str] = {}

    def name(call_id: str) -> str:
        return names.setdefault(call_id, f"call_{len(names)}") if call_id else ""

    return [msgspec.structs.replace(
        m, tool_calls=[msgspec.structs.replace(c, id=name(c.id)) for c in m.tool_calls],
        tool_call_id=name(m.tool_call_id)) for m in messages]


def encode_entry(entry: CachedAnswer) -> bytes:
    """The stored bytes of an entry."""
    return msgspec.msgpack.encode(entry)


def decode_entry(raw: bytes) -> CachedAnswer | None:
    """An entry, or None for bytes that are not one (never trusted blindly)."""
    try:
        return msgspec.msgpack.decode(raw, type=CachedAnswer)
    except msgspec.DecodeError:
        return None
