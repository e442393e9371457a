"""Token counts that work offline.

The tokenizer is the Llama-2 BPE (32k) whose definition ships inside the
``wordllama`` wheel, read with the ``tokenizers`` library: a real tokenizer, no
download. It is not any hosted model's own tokenizer (OpenAI and Anthropic
tokenizers are not available offline); every count names which tokenizer made
it. Without wordllama installed, the count is a plain word count and says so.

Counts are remembered for recent texts (an exact cache: same text, same count): input
assembly counts the same blocks again and again (an agent's system prompt on every
input, the same memory block for a repeated question), and a count costs ~0.1 ms.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections import OrderedDict
from typing import Any

CACHED = 512  # texts whose counts are kept
CACHED_CHARS = 16_384  # longer texts are counted each time (bounds the cache's memory)


class TokenCounter:
    """``count(text)`` and the ``name`` to record beside every count."""

    def __init__(self) -> None:
        self._tokenizer: Any = None
        self._counts: OrderedDict[str, int] = OrderedDict()
        try:
            # Only the wheel's file: importing wordllama itself would load its whole
            # package (about 20 MB resident) for a tokenizer that needs none of it.
            spec = importlib.util.find_spec("wordllama")
            if spec is None or not spec.submodule_search_locations:
                raise ImportError("wordllama is not installed")
            from tokenizers import Tokenizer

            path = os.path.join(next(iter(spec.submodule_search_locations)), "tokenizers",
                                "l2_supercat_tokenizer_config.json")
            self._tokenizer = Tokenizer.from_file(path)
            self.name = "llama-2 bpe 32k (offline, from the wordllama wheel)"
        except (ImportError, OSError, ValueError):
            self.name = "word count (estimate: no offline tokenizer installed)"

    def count(self, text: str) -> int:
        """Tokens in ``text`` (without the BOS token the tokenizer adds)."""
        if self._tokenizer is None:
            return len(text.split())
        known = self._counts.get(text)
        if known is not None:
            self._counts.move_to_end(text)
            return known
        count = max(0, len(self._tokenizer.encode(text).ids) - 1)
        if len(text) <= CACHED_CHARS:
            self._counts[text] = count
            if len(self._counts) > CACHED:
                self._counts.popitem(last=False)
        return count


@functools.cache
def token_counter() -> TokenCounter:
    """The process's counter (loaded once)."""
    return TokenCounter()
