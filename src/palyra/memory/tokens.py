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


TOKENIZER_NAME = "llama-2 bpe 32k (offline, from the wordllama wheel)"
WORD_COUNT_NAME = "word count (estimate: no offline tokenizer installed)"


def _tokenizer_file() -> str | None:
    """The wheel's tokenizer definition, when it and the ``tokenizers`` library are
    installed (found, not read)."""
    # Only the wheel's file: importing wordllama itself would load its whole package
    # (about 20 MB resident) for a tokenizer that needs none of it.
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        return None
    if importlib.util.find_spec("tokenizers") is None:
        return None
    path = os.path.join(next(iter(spec.submodule_search_locations)), "tokenizers",
                        "l2_supercat_tokenizer_config.json")
    return path if os.path.isfile(path) else None


class TokenCounter:
    """``count(text)`` and the ``name`` to record beside every count.

    The tokenizer is read at the first count, not when the counter is made: loaded,
    it holds about 15 MB resident and its library 5 MB more, and input assembly asks
    for the counter (its ``name``) on every run, most of which count nothing (a first
    run of a session with no memory items, agent prompt or preferences).
    """

    def __init__(self) -> None:
        self._tokenizer: Any = None
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._file = _tokenizer_file()
        self.name = TOKENIZER_NAME if self._file else WORD_COUNT_NAME

    def count(self, text: str) -> int:
        """Tokens in ``text`` (without the BOS token the tokenizer adds)."""
        tokenizer = self._tokenizer or self._load()
        if tokenizer is None:
            return len(text.split())
        known = self._counts.get(text)
        if known is not None:
            self._counts.move_to_end(text)
            return known
        count = max(0, len(tokenizer.encode(text).ids) - 1)
        if len(text) <= CACHED_CHARS:
            self._counts[text] = count
            if len(self._counts) > CACHED:
                self._counts.popitem(last=False)
        return count

    def _load(self) -> Any:
        if self._file is None:
            return None
        try:
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_file(self._file)
        except (ImportError, OSError, ValueError):
            # Unreadable after all: words from here on, and the name says so.
            self._file, self.name = None, WORD_COUNT_NAME
        return self._tokenizer


@functools.cache
def token_counter() -> TokenCounter:
    """The process's counter (loaded once)."""
    return TokenCounter()
