"""Text embeddings for memory search, all offline.

* :class:`WordLlamaEmbedder` (default): ``wordllama``'s 256-d model (used at 128-d), whose weights
  and tokenizer ship inside its PyPI wheel. Loaded from the package directory with
  downloads disabled, so it never touches the network (its default ``load()`` would
  look in a ``tokenizer/`` cache directory the wheel does not have).
* :class:`HashEmbedder`: the seed's 64-d hashed bag of words, the fallback when
  wordllama is not installed; deterministic and dependency-free.
* :class:`palyra.memory.remote.OpenAIEmbedder` (``[memory] embedder = "openai"``): an
  OpenAI-compatible embeddings endpoint; the only one that is ``remote`` (may fail, and
  has an ``aembed`` that does not block the event loop).

All return L2-normalised float32 rows, so a dot product is the cosine.

numpy is imported where a vector is made, not with the module: the daemon builds its
embedder at start, and numpy (about 16 MB resident) would otherwise be held by every
daemon, most of which never store a memory item.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]
_WORD = re.compile(r"\w+", re.UNICODE)


class Embedder(Protocol):
    """Maps texts to unit vectors of ``dim`` floats."""

    name: str
    dim: int  # 0 while unknown (a remote embedder before its first answer)
    remote: bool  # over the network: may fail, and embeds asynchronously (``aembed``)

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit row per text."""
        ...


def normalise(rows: npt.NDArray[np.floating]) -> Vectors:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    import numpy as np

    out: Vectors = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out = (out / norms).astype(np.float32)
    return out


class HashEmbedder:
    """64-d signed feature hashing of lower-cased words (no model, no download)."""

    name = "hash64"
    dim = 64
    remote = False

    def embed(self, texts: Sequence[str]) -> Vectors:
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                h = hashlib.blake2b(word.encode(), digest_size=8).digest()
                out[row, h[0] % self.dim] += 1.0 if h[1] & 1 else -1.0
        return normalise(out)


class WordLlamaEmbedder:
    """wordllama's static embeddings from the weights inside its wheel, truncated
    (Matryoshka) from 256 to 128 dimensions: on the retrieval suite 128 ranks as well
    as 256 (recall@5 0.975 vector-only both; MRR 0.934 vs 0.909), and a query over
    100k items costs half the multiply-adds."""

    name = "wordllama-l2-256/128"
    dim = 128
    remote = False

    def __init__(self) -> None:
        # The model (its package, weights and tokenizer: about 50 MB resident) loads at
        # the first embed, not at start: a daemon whose memory is empty, or unused, never
        # pays for it. Only whether it is installed is settled here (for the fallback).
        if importlib.util.find_spec("wordllama") is None:
            raise ImportError("wordllama is not installed")
        self._loaded: Any = None

    @property
    def _model(self) -> Any:
        if self._loaded is None:
            import wordllama

            self._loaded = wordllama.WordLlama.load(
                cache_dir=os.path.dirname(wordllama.__file__), disable_download=True, dim=256,
                trunc_dim=self.dim)
        return self._loaded

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory yet (it loads at the first embed)."""
        return self._loaded is not None

    def embed(self, texts: Sequence[str]) -> Vectors:
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if len(texts) == 1:
            return self._one(texts[0])
        return normalise(self._model.embed(list(texts), norm=True))

    def _one(self, text: str) -> Vectors:
        """One text without the batch machinery (padding, masks): the same mean of token
        vectors, in half the time of ``embed([text])``; an ingest and a query embed one."""
        import numpy as np

        model = self._model
        table = model.embedding
        ids = model.tokenizer.encode(text, add_special_tokens=False).ids
        if not ids:
            return np.zeros((1, self.dim), dtype=np.float32)
        mean = table[ids].sum(axis=0, dtype=np.float32) / np.float32(len(ids))
        return normalise(mean[np.newaxis, :])


def default_embedder() -> Embedder:
    """wordllama when installed, else the hash fallback (the log line says which)."""
    try:
        return WordLlamaEmbedder()
    except ImportError:
        return HashEmbedder()
