"""What channel ingress answers without journaling anything, counted for ``/metrics``.

A redelivery found by its dedupe record writes nothing (admission returns the
first delivery's outcome), and a delivery whose signature or timestamp fails
is refused before anything is journaled; neither leaves an event to fold, so
they are counted here, in memory, from this daemon's start. Labels are bounded:
a channel id comes from the config or from an admitted message, and past
``MAX_LABELS`` distinct ones the rest count under ``other``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from palyra.core.errors import ErrorCode, PalyraError

K = TypeVar("K")
IngressHandler = Callable[[str, Mapping[str, str], bytes], Awaitable[dict[str, Any]]]
"""A platform's HTTP ingress: ``(name, headers, body) -> JSON answer``."""
SIGNATURE_CODES = frozenset({ErrorCode.SIGNATURE_INVALID, ErrorCode.TIMESTAMP_STALE})
MAX_LABELS = 1000
OTHER = "other"


class ChannelCounters:
    """Duplicates per channel; signature failures per (channel, reason)."""

    def __init__(self) -> None:
        self.duplicates: dict[str, int] = {}
        self.signature_failures: dict[tuple[str, str], int] = {}

    def duplicate(self, channel: str) -> None:
        """A redelivery answered from the dedupe record."""
        _count(self.duplicates, channel if channel in self.duplicates or
               len(self.duplicates) < MAX_LABELS else OTHER)

    def signature_failure(self, channel: str, reason: str) -> None:
        """A delivery refused for its signature (``reason``: the error code, lower-cased)."""
        key = (channel, reason)
        if key not in self.signature_failures and len(self.signature_failures) >= MAX_LABELS:
            key = (OTHER, reason)
        _count(self.signature_failures, key)


def _count(counts: dict[K, int], key: K) -> None:
    counts[key] = counts.get(key, 0) + 1


def counting_signature_failures(handler: IngressHandler, channel_prefix: str,
                                counters: ChannelCounters) -> IngressHandler:
    """``handler``, counting each delivery refused for its signature or timestamp under
    its channel (``channel_prefix`` + the name in the path). Only a configured name
    gets that far (another is ``NOT_FOUND`` first), so the labels stay bounded."""

    async def handle(name: str, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        try:
            return await handler(name, headers, body)
        except PalyraError as exc:
            if exc.code in SIGNATURE_CODES:
                counters.signature_failure(channel_prefix + name, exc.code.value.lower())
            raise

    return handle
