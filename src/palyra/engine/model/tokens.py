"""Group streamed text deltas into ``model_token`` events, in time linear in the text.

A group is released once it holds ``words`` words and more text follows it,
or once it reaches ``max_chars`` characters (text without whitespace, such as
a long base64 blob, must not grow one group without bound). Each release scans
at most ``max_chars`` characters past the group's start and the pending text
is consumed by an offset, not re-sliced, so a reply of any size and any delta
pattern costs time linear in its length. The last group (released by
:meth:`rest`) is never empty when any text was seen, so it can carry
``is_final``.
"""

from __future__ import annotations

import re

_PIECE = re.compile(r"\s*\S+")
_SPACE = re.compile(r"\s")


def _has_space(text: str) -> bool:
    return _SPACE.search(text) is not None


class TokenBuffer:
    """Collects deltas; hands out groups of ``words`` words or ``max_chars`` characters."""

    def __init__(self, words: int, max_chars: int = 4096) -> None:
        if words < 1 or max_chars < 1:
            raise ValueError("words and max_chars must be >= 1")
        self._words = words
        self._max = max_chars
        self._text = ""
        self._start = 0

    def push(self, text: str) -> list[str]:
        """Add a delta; return the groups to emit now (often none)."""
        if self._start and self._start * 2 >= len(self._text):
            self._text, self._start = self._text[self._start:], 0
        self._text += text
        # Only whitespace can complete a word group; without it only the size
        # cut can apply, which needs no scan (keeps no-space text O(1) a delta).
        if not (_has_space(text) or len(self._text) - self._start > self._max):
            return []
        groups = []
        while (group := self._take()) is not None:
            groups.append(group)
        return groups

    def _take(self) -> str | None:
        start, text = self._start, self._text
        limit = start + self._max
        last_end = start  # end of the last whole piece inside the size limit
        end = None
        for count, match in enumerate(_PIECE.finditer(text, start, min(len(text), limit + 1)), 1):
            if count > self._words:  # a piece follows the group: it is complete
                end = last_end
                break
            if match.end() <= limit:
                last_end = match.end()
        if end is None and len(text) - start > self._max:
            # No complete group in reach: cut at the last word boundary, else by size.
            end = last_end if last_end > start and last_end < len(text) else limit
        if end is None:
            return None
        self._start = end
        return text[start:end]

    def rest(self) -> str:
        """Everything not yet emitted (the final group)."""
        out = self._text[self._start:]
        self._text, self._start = "", 0
        return out


def clip_reply(text: str, max_chars: int) -> str:
    """``text``, or its prefix and a note when it is longer than ``max_chars``.

    The note says where the whole text is: the turn's ``model_token`` events
    hold every character, so clipping the summary events loses nothing.
    """
    if len(text) <= max_chars:
        return text
    note = (f"\n[reply clipped at {max_chars} of {len(text)} characters; the full text is in "
            "this turn's model_token events]")
    return text[: max_chars - len(note)] + note
