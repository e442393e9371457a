"""Hybrid retrieval over memory items: BM25 + cosine + recency, in memory.

Scores follow REFERENCE §8: ``5500 * lexical + 3500 * vector + 1000 * recency``
basis points, where lexical (BM25) and vector (cosine) are each normalised to
the best candidate of the query, and recency is ``1 / (1 + age_days)``.
Candidates are the union of the top lexical and top vector matches among the
items the caller may see.

BM25 is kept incrementally here (an inverted index of term -> {doc: tf}):
``bm25s``, the fast library, builds a static index, and memory is written one
item at a time. Vectors live in one growing float32 matrix; a query is one
matrix-vector product (about 9 ms over 100k x 256 here).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from palyra.memory.embed import Embedder, Vectors

LEXICAL_BPS, VECTOR_BPS, RECENCY_BPS = 5500, 3500, 1000
CANDIDATES = 50
_K1, _B = 1.2, 0.75
_TOKEN = re.compile(r"\w+", re.UNICODE)
_DAY_MS = 86_400_000


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens."""
    return _TOKEN.findall(text.lower())


@dataclass(frozen=True, slots=True)
class Hit:
    """One result: the item, its combined score (bps) and the parts."""

    memory_id: str
    score_bps: int
    lexical: float
    vector: float
    recency: float


class MemoryIndex:
    """Items by row; ``add``/``remove`` as the journal changes; ``search`` is read-only."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._rows: dict[str, int] = {}
        self._ids: list[str | None] = []
        self._created: list[int] = []
        self._vectors: Vectors = np.zeros((64, embedder.dim), dtype=np.float32)
        self._postings: dict[str, dict[int, int]] = {}
        self._lengths: dict[int, int] = {}
        self._total_len = 0

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, memory_id: str, text: str, created_ms: int,
            vector: Vectors | None = None) -> None:
        """Index one item (replacing an older version of it)."""
        self.remove(memory_id)
        row = len(self._ids)
        if row >= len(self._vectors):
            grown = np.zeros((len(self._vectors) * 2, self.embedder.dim), dtype=np.float32)
            grown[:row] = self._vectors[:row]
            self._vectors = grown
        self._vectors[row] = vector if vector is not None else self.embedder.embed([text])[0]
        self._ids.append(memory_id)
        self._created.append(created_ms)
        self._rows[memory_id] = row
        counts = Counter(tokens(text))
        for term, tf in counts.items():
            self._postings.setdefault(term, {})[row] = tf
        length = sum(counts.values())
        self._lengths[row] = length
        self._total_len += length

    def remove(self, memory_id: str) -> None:
        """Forget one item (its row stays empty)."""
        row = self._rows.pop(memory_id, None)
        if row is None:
            return
        self._ids[row] = None
        self._vectors[row] = 0.0
        self._total_len -= self._lengths.pop(row, 0)
        for posting in self._postings.values():
            posting.pop(row, None)

    def _bm25(self, query: list[str], allowed: Callable[[str], bool]) -> dict[int, float]:
        n = len(self._rows)
        if not n:
            return {}
        avg = self._total_len / n or 1.0
        scores: dict[int, float] = {}
        for term in set(query):
            posting = self._postings.get(term)
            if not posting:
                continue
            idf = math.log(1 + (n - len(posting) + 0.5) / (len(posting) + 0.5))
            for row, tf in posting.items():
                ident = self._ids[row]
                if ident is None or not allowed(ident):
                    continue
                norm = tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * self._lengths[row] / avg))
                scores[row] = scores.get(row, 0.0) + idf * norm
        return scores

    def search(self, query: str, now_ms: int, *, limit: int = 10,
               allowed: Callable[[str], bool] = lambda memory_id: True,
               weights: tuple[int, int, int] = (LEXICAL_BPS, VECTOR_BPS, RECENCY_BPS),
               ) -> list[Hit]:
        """The best ``limit`` items the ``allowed`` predicate admits, best first."""
        if not self._rows or not query.strip():
            return []
        lexical = self._bm25(tokens(query), allowed)
        used = len(self._ids)
        cosines = self._vectors[:used] @ self.embedder.embed([query])[0]
        order = np.argsort(-cosines)
        vector_rows: list[int] = []
        for row in order:
            ident = self._ids[int(row)]
            if ident is not None and cosines[row] > 0 and allowed(ident):
                vector_rows.append(int(row))
                if len(vector_rows) >= CANDIDATES:
                    break
        top_lexical = sorted(lexical, key=lexical.__getitem__, reverse=True)[:CANDIDATES]
        rows = set(top_lexical) | set(vector_rows)
        if not rows:
            return []
        best_lex = max((lexical.get(r, 0.0) for r in rows), default=0.0) or 1.0
        best_vec = max((float(cosines[r]) for r in rows), default=0.0) or 1.0
        w_lex, w_vec, w_rec = weights
        hits = []
        for row in rows:
            lex = lexical.get(row, 0.0) / best_lex
            vec = max(0.0, float(cosines[row])) / best_vec
            age_days = max(0, now_ms - self._created[row]) / _DAY_MS
            rec = 1.0 / (1.0 + age_days)
            score = round(w_lex * lex + w_vec * vec + w_rec * rec)
            ident = self._ids[row]
            assert ident is not None
            hits.append(Hit(ident, score, lex, vec, rec))
        hits.sort(key=lambda h: (-h.score_bps, h.memory_id))
        return hits[:limit]
