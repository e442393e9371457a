"""How many pairing guesses a channel and a sender get. Pure: counts over a clock.

A pairing code is 8 characters of base32 (40 bits), but unlimited guesses would
still wear it down, and every admitted guess costs journal commits. So guesses
(``pair XXXXXXXX`` DMs) are counted per sender and per channel over a sliding
window: past either budget a guess is refused before anything is journaled. And
after :data:`LOCK_AFTER` wrong guesses on a channel within the window, the
channel's pending codes are locked (withdrawn; the operator issues new ones), so
even many senders sharing the channel's budget cannot keep trying one code.

The counters live in memory and are bounded: at most :data:`MAX_KEYS` senders are
tracked (the oldest forgotten first; the channel budget still holds for them).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, deque
from typing import TypeVar

K = TypeVar("K")

WINDOW_MS = 10 * 60 * 1000
PER_SENDER = 3
"""Guesses one sender may make on one channel per window."""
PER_CHANNEL = 10
"""Guesses all senders together may make on one channel per window."""
LOCK_AFTER = 5
"""Wrong guesses on one channel within the window that lock its pending codes."""
MAX_KEYS = 10_000


@dataclasses.dataclass
class GuessLimiter:
    """Sliding-window budgets of pairing guesses (admitted guesses and wrong ones)."""

    window_ms: int = WINDOW_MS
    per_sender: int = PER_SENDER
    per_channel: int = PER_CHANNEL
    lock_after: int = LOCK_AFTER
    max_keys: int = MAX_KEYS
    _by_sender: OrderedDict[tuple[str, str], deque[int]] = dataclasses.field(
        default_factory=OrderedDict)
    _by_channel: OrderedDict[str, deque[int]] = dataclasses.field(default_factory=OrderedDict)
    _wrong: OrderedDict[str, deque[int]] = dataclasses.field(default_factory=OrderedDict)

    def admit(self, channel: str, sender: str, now_ms: int) -> bool:
        """Count one guess by ``sender`` on ``channel``; False when over a budget."""
        mine = self._recent(self._by_sender, (channel, sender), now_ms)
        everyone = self._recent(self._by_channel, channel, now_ms)
        if len(mine) >= self.per_sender or len(everyone) >= self.per_channel:
            return False
        mine.append(now_ms)
        everyone.append(now_ms)
        return True

    def wrong(self, channel: str, now_ms: int) -> bool:
        """Count one wrong guess on ``channel``; True when its codes must now be locked
        (the count then starts again)."""
        wrong = self._recent(self._wrong, channel, now_ms)
        wrong.append(now_ms)
        if len(wrong) < self.lock_after:
            return False
        wrong.clear()
        return True

    def _recent(self, table: OrderedDict[K, deque[int]], key: K, now_ms: int) -> deque[int]:
        times = table.get(key)
        if times is None:
            times = table[key] = deque()
            while len(table) > self.max_keys:
                table.popitem(last=False)
        else:
            table.move_to_end(key)
        while times and times[0] <= now_ms - self.window_ms:
            times.popleft()
        return times
