"""Hybrid retrieval over memory items: BM25 + cosine + recency, in memory.

Scores follow REFERENCE §8: ``5500 * lexical + 3500 * vector + 1000 * recency``
basis points, where lexical (BM25) and vector (cosine) are each normalised to
the best candidate of the query, and recency is ``1 / (1 + age_days)``.
Candidates are the top lexical and top vector rows that the caller may see.

Everything a query touches is a numpy array: one growing float32 matrix of
vectors, per-term posting arrays (row, term frequency) for BM25, and per-row
lengths and creation times. A query is one matrix-vector product, one vectorised
BM25 pass over its terms' postings, and ``argpartition`` for the top rows; only
those few rows are checked against the caller's visibility (widening the window
when too few pass). BM25 is kept incrementally here because ``bm25s``, the fast
library, builds a static index, and memory is written one item at a time.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

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


class _Postings:
    """Append-only (row, tf) arrays of one term; removed rows are masked at query time."""

    __slots__ = ("n", "rows", "tfs")

    def __init__(self) -> None:
        self.rows = np.zeros(8, dtype=np.int64)
        self.tfs = np.zeros(8, dtype=np.float32)
        self.n = 0

    def add(self, row: int, tf: int) -> None:
        if self.n == len(self.rows):
            self.rows = np.resize(self.rows, self.n * 2)
            self.tfs = np.resize(self.tfs, self.n * 2)
        self.rows[self.n] = row
        self.tfs[self.n] = tf
        self.n += 1


_A = TypeVar("_A", bound=npt.NDArray[Any])


def _grow(array: _A, size: int) -> _A:
    if size <= len(array):
        return array
    grown = np.zeros((max(size, len(array) * 2), *array.shape[1:]), dtype=array.dtype)
    grown[: len(array)] = array
    return cast(_A, grown)


class MemoryIndex:
    """Items by row; ``add``/``remove`` as the journal changes; ``search`` is read-only."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._rows: dict[str, int] = {}
        self._ids: list[str | None] = []
        self._vectors: Vectors = np.zeros((64, embedder.dim), dtype=np.float32)
        self._lengths = np.zeros(64, dtype=np.float32)  # 0 for a removed row
        self._created = np.zeros(64, dtype=np.float64)  # days since the epoch
        self._live = np.zeros(64, dtype=np.bool_)
        self._postings: dict[str, _Postings] = {}
        self._total_len = 0.0

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, memory_id: str, text: str, created_ms: int,
            vector: Vectors | None = None) -> None:
        """Index one item (replacing an older version of it)."""
        self.remove(memory_id)
        row = len(self._ids)
        self._vectors = _grow(self._vectors, row + 1)
        self._lengths = _grow(self._lengths, row + 1)
        self._created = _grow(self._created, row + 1)
        self._live = _grow(self._live, row + 1)
        self._vectors[row] = vector if vector is not None else self.embedder.embed([text])[0]
        counts = Counter(tokens(text))
        for term, tf in counts.items():
            self._postings.setdefault(term, _Postings()).add(row, tf)
        length = float(sum(counts.values()))
        self._lengths[row] = length
        self._created[row] = created_ms / _DAY_MS
        self._live[row] = True
        self._total_len += length
        self._ids.append(memory_id)
        self._rows[memory_id] = row

    def remove(self, memory_id: str) -> None:
        """Forget one item (its row stays, masked)."""
        row = self._rows.pop(memory_id, None)
        if row is None:
            return
        self._ids[row] = None
        self._vectors[row] = 0.0
        self._total_len -= float(self._lengths[row])
        self._lengths[row] = 0.0
        self._live[row] = False

    def _bm25(self, query: list[str], used: int) -> npt.NDArray[np.float32]:
        scores = np.zeros(used, dtype=np.float32)
        n = len(self._rows)
        if not n:
            return scores
        avg = self._total_len / n or 1.0
        for term in set(query):
            posting = self._postings.get(term)
            if posting is None or not posting.n:
                continue
            rows = posting.rows[: posting.n]
            tfs = posting.tfs[: posting.n]
            live = self._live[rows]
            df = int(live.sum())
            if not df:
                continue
            idf = float(np.log(1 + (n - df + 0.5) / (df + 0.5)))
            norm = tfs * (_K1 + 1) / (tfs + _K1 * (1 - _B + _B * self._lengths[rows] / avg))
            scores[rows] += np.where(live, idf * norm, 0.0).astype(np.float32)
        return scores

    def search(self, query: str, now_ms: int, *, limit: int = 10,
               allowed: Callable[[str], bool] = lambda memory_id: True,
               weights: tuple[int, int, int] = (LEXICAL_BPS, VECTOR_BPS, RECENCY_BPS),
               ) -> list[Hit]:
        """The best ``limit`` items the ``allowed`` predicate admits, best first."""
        used = len(self._ids)
        if not self._rows or not query.strip():
            return []
        lexical = self._bm25(tokens(query), used)
        cosines = self._vectors[:used] @ self.embedder.embed([query])[0]
        cosines = np.where(self._live[:used], np.maximum(cosines, 0.0), 0.0)
        rows = self._candidates(lexical, allowed, used) | self._candidates(cosines, allowed, used)
        if not rows:
            return []
        picked = np.fromiter(rows, dtype=np.int64)
        best_lex = float(lexical[picked].max()) or 1.0
        best_vec = float(cosines[picked].max()) or 1.0
        w_lex, w_vec, w_rec = weights
        now_days = now_ms / _DAY_MS
        hits = []
        for row in picked.tolist():
            lex = float(lexical[row]) / best_lex
            vec = float(cosines[row]) / best_vec
            rec = 1.0 / (1.0 + max(0.0, now_days - float(self._created[row])))
            ident = self._ids[row]
            assert ident is not None
            hits.append(Hit(ident, round(w_lex * lex + w_vec * vec + w_rec * rec), lex, vec, rec))
        hits.sort(key=lambda h: (-h.score_bps, h.memory_id))
        return hits[:limit]

    def _candidates(self, scores: npt.NDArray[np.float32], allowed: Callable[[str], bool],
                    used: int) -> set[int]:
        """Up to ``CANDIDATES`` best rows with a positive score that ``allowed`` admits."""
        window = CANDIDATES
        while True:
            k = min(window, used)
            top = np.argpartition(-scores, k - 1)[:k] if k < used else np.arange(used)
            top = top[scores[top] > 0]
            top = top[np.argsort(-scores[top], kind="stable")]
            out: set[int] = set()
            for row in top.tolist():
                ident = self._ids[row]
                if ident is not None and allowed(ident):
                    out.add(row)
                    if len(out) >= CANDIDATES:
                        return out
            if k >= used or len(top) < k:
                return out  # nothing more with a positive score
            window *= 4
