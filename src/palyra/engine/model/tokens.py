"""Group streamed text deltas into word-group ``model_token`` events."""

from __future__ import annotations

import re

_PIECE = re.compile(r"\s*\S+")


class TokenBuffer:
    """Collects deltas; hands out groups of ``words`` words, keeping the tail.

    A group is released only when more text follows it, so the last group
    (released by :meth:`rest`) is always non-empty when any text was seen and
    can carry ``is_final``.
    """

    def __init__(self, words: int) -> None:
        self._words = words
        self._buffer = ""

    def push(self, text: str) -> str:
        """Add a delta; return a full group to emit now, or ``""``."""
        self._buffer += text
        pieces = _PIECE.findall(self._buffer)
        if len(pieces) <= self._words:
            return ""
        head = "".join(pieces[: self._words])
        self._buffer = self._buffer[len(head) :]
        return head

    def rest(self) -> str:
        """Everything not yet emitted (the final group)."""
        out, self._buffer = self._buffer, ""
        return out
