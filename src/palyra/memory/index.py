"""Hybrid retrieval over memory items: BM25 + cosine + recency, in memory.

Scores: ``5500 * lexical + 3500 * vector + 1000 * recency``
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

The matrix-vector product is ``np.einsum`` rather than ``@``: ``@`` goes to the
BLAS, whose worker threads turn a short product into a long tail on a loaded two-core
machine (100k rows: 2 ms became a 5-8 ms p95; even 10k rows: 0.035 ms became 8 ms at
p95 with other work running), where einsum's single-threaded loop has no tail.

One index holds one vector space: the embedder it was built with (``space``, its
name and dimension). A vector of another length is refused, so spaces never mix;
an item whose vector is not known yet (a remote embedder that failed) is indexed
for BM25 and recency only until :meth:`MemoryIndex.set_vector` gives it one.

Ties are broken by insertion order (older row first), in candidate selection and
in the final ranking's score ties after the memory id, so a query's answer does not
depend on how ``argpartition`` happens to order equal scores.
"""

from __future__ import annotations

import re
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from palyra.memory.embed import Embedder, Vectors

LEXICAL_BPS, VECTOR_BPS, RECENCY_BPS = 5500, 3500, 1000
CANDIDATES = 50
PARTS, PART_MIN = 32, 256  # cached BM25 term contributions: how many, from what length
_K1, _B = 1.2, 0.75
_TOKEN = re.compile(r"\w+", re.UNICODE)
_DAY_MS = 86_400_000
_START = 64


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens."""
    return _TOKEN.findall(text.lower())


@dataclass(frozen=True, slots=True)
class Hit:
    """One result: the item, its combined score (bps) and the parts.

    ``lexical`` and ``vector`` are normalised to the query's best candidate, so
    the best of unrelated items still scores high; ``cosine`` is the raw
    similarity (0.0 without a query vector), an absolute measure of relevance.
    """

    memory_id: str
    score_bps: int
    lexical: float
    vector: float
    recency: float
    cosine: float = 0.0


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


def top_rows(scores: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.int64]:
    """The ``k`` best rows with a positive score, best first, ties by row (older first)."""
    used = len(scores)
    if k < used:
        part = np.argpartition(scores, used - k)[used - k:]
        kth = scores[part].min()
        above = np.flatnonzero(scores > kth)
        ties = np.flatnonzero(scores == kth)[: k - len(above)]
        rows = np.concatenate([above, ties])
    else:
        rows = np.arange(used)
    rows = rows[scores[rows] > 0]
    # lexsort's last key is the primary one: score descending, then row ascending.
    ordered: npt.NDArray[np.int64] = rows[np.lexsort((rows, -scores[rows]))]
    return ordered


class MemoryIndex:
    """Items by row; ``add``/``remove`` as the journal changes; ``search`` is read-only."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._rows: dict[str, int] = {}
        self._ids: list[str | None] = []
        self._dim = embedder.dim  # 0: learned from the first vector (a remote embedder)
        self._vectors: Vectors = np.zeros((_START, max(self._dim, 1)), dtype=np.float32)
        self._lengths = np.zeros(_START, dtype=np.float32)  # 0 for a removed row
        self._created = np.zeros(_START, dtype=np.float64)  # days since the epoch
        self._live = np.zeros(_START, dtype=np.bool_)
        self._postings: dict[str, _Postings] = {}
        self._total_len = 0.0
        self._dead = 0  # removed rows still in the arrays
        self._changes = 0  # adds and removes: what cached term contributions depend on
        self._parts: OrderedDict[str, tuple[int, npt.NDArray[np.float32]]] = OrderedDict()
        self.pending: set[str] = set()  # live items without a vector yet

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def used(self) -> int:
        """Rows in use (live and removed); a row mask has this length."""
        return len(self._ids)

    def row_of(self, memory_id: str) -> int | None:
        """The row of a live item."""
        return self._rows.get(memory_id)

    @property
    def space(self) -> str:
        """The vector space: the embedder's name and the dimension in use."""
        return f"{self.embedder.name}/{self._dim or '?'}"

    def add(self, memory_id: str, text: str, created_ms: int,
            vector: Vectors | None = None, *, embed: bool = True) -> None:
        """Index one item (replacing an older version of it).

        Args:
            memory_id: The item.
            text: Its text (tokenised for BM25; embedded when no ``vector`` is given).
            created_ms: Its creation time (recency).
            vector: Its unit vector from this index's embedder.
            embed: Without a ``vector``, embed ``text`` now (``False``: index it without
                one, as pending, until :meth:`set_vector`).
        """
        self.remove(memory_id)
        self._changes += 1
        if vector is None and embed:
            vector = self.embedder.embed([text])[0]
        row = len(self._ids)
        self._vectors = _grow(self._vectors, row + 1)
        self._lengths = _grow(self._lengths, row + 1)
        self._created = _grow(self._created, row + 1)
        self._live = _grow(self._live, row + 1)
        counts = Counter(tokens(text))
        for term, tf in counts.items():
            posting = self._postings.get(term)
            if posting is None:
                posting = self._postings[term] = _Postings()
            posting.add(row, tf)
        length = float(sum(counts.values()))
        self._lengths[row] = length
        self._created[row] = created_ms / _DAY_MS
        self._live[row] = True
        self._total_len += length
        self._ids.append(memory_id)
        self._rows[memory_id] = row
        if vector is None:
            self.pending.add(memory_id)
        else:
            self._put(row, vector)

    def set_vector(self, memory_id: str, vector: Vectors) -> None:
        """Give a pending (or any live) item its vector."""
        row = self._rows.get(memory_id)
        if row is not None:
            self._put(row, vector)
            self.pending.discard(memory_id)

    def _put(self, row: int, vector: Vectors) -> None:
        if not self._dim:
            self._dim = len(vector)
            self._vectors = np.zeros((len(self._lengths), self._dim), dtype=np.float32)
        if vector.shape != (self._dim,):
            raise ValueError(f"vector of shape {vector.shape} does not fit the index's "
                             f"space {self.space}")
        self._vectors[row] = vector

    def remove(self, memory_id: str) -> None:
        """Forget one item (its row stays, masked)."""
        row = self._rows.pop(memory_id, None)
        if row is None:
            return
        self.pending.discard(memory_id)
        self._ids[row] = None
        self._vectors[row] = 0.0  # a removed row's cosine is 0: never a vector candidate
        self._total_len -= float(self._lengths[row])
        self._lengths[row] = 0.0
        self._live[row] = False
        self._dead += 1
        self._changes += 1

    def _bm25(self, query: list[str], used: int) -> npt.NDArray[np.float32]:
        scores = np.zeros(used, dtype=np.float32)
        n = len(self._rows)
        if not n:
            return scores
        avg = self._total_len / n or 1.0
        for term in dict.fromkeys(query):  # each term once, in query order
            posting = self._postings.get(term)
            if posting is None or not posting.n:
                continue
            rows = posting.rows[: posting.n]
            part = self._term_part(term, posting, n, avg)
            if part is not None:
                scores[rows] += part  # a row appears once in a term's postings
        return scores

    def _term_part(self, term: str, posting: _Postings, n: int,
                   avg: float) -> npt.NDArray[np.float32] | None:
        """The term's BM25 contribution to each row of its postings (None: no live row).

        Common terms (long postings) recur in most queries and cost the most, so their
        contributions are kept until the next add or remove changes n, df or the average
        length; the cache is exact."""
        cached = self._parts.get(term)
        if cached is not None and cached[0] == self._changes:
            self._parts.move_to_end(term)
            return cached[1]
        rows = posting.rows[: posting.n]
        tfs = posting.tfs[: posting.n]
        live = self._live[rows] if self._dead else None
        df = int(live.sum()) if live is not None else posting.n
        if not df:
            return None
        idf = float(np.log(1 + (n - df + 0.5) / (df + 0.5)))
        part = (tfs * np.float32(idf * (_K1 + 1)) / (
            tfs + np.float32(_K1 * (1 - _B)) + np.float32(_K1 * _B / avg) * self._lengths[rows]
        )).astype(np.float32, copy=False)  # float32 already; says so to the type checker
        if live is not None:
            part[~live] = 0.0
        if posting.n >= PART_MIN:
            self._parts[term] = (self._changes, part)
            if len(self._parts) > PARTS:
                self._parts.popitem(last=False)
        return part

    def cosines(self, query_vector: Vectors | None, used: int) -> npt.NDArray[np.float32]:
        """Every row's cosine with ``query_vector`` (zeros without one)."""
        if query_vector is None or not self._dim or query_vector.shape != (self._dim,):
            return np.zeros(used, dtype=np.float32)
        out: npt.NDArray[np.float32] = np.einsum("ij,j->i", self._vectors[:used], query_vector)
        return out

    def search(self, query: str, now_ms: int, *, limit: int = 10,
               allowed: Callable[[str], bool] = lambda memory_id: True,
               weights: tuple[int, int, int] = (LEXICAL_BPS, VECTOR_BPS, RECENCY_BPS),
               query_vector: Vectors | None = None, embed: bool = True,
               mask: npt.NDArray[np.bool_] | None = None) -> list[Hit]:
        """The best ``limit`` items the ``allowed`` predicate admits, best first.

        Args:
            query: The query text (BM25 terms; embedded unless ``query_vector`` is given).
            now_ms: The time recency is measured from.
            limit: Most hits returned.
            allowed: Which items the caller may see.
            weights: Lexical, vector and recency weights in bps.
            query_vector: The query's vector from this index's embedder, if known.
            embed: Without a ``query_vector``, embed ``query`` now (``False``: rank
                without the vector part).
            mask: The rows the caller may see (one bool per row in use), instead of
                ``allowed``: candidates are then picked without a per-row call.
        """
        used = len(self._ids)
        if not self._rows or not query.strip():
            return []
        lexical = self._bm25(tokens(query), used)
        if query_vector is None and embed:
            query_vector = self.embedder.embed([query])[0]
        cosines = self.cosines(query_vector, used)
        if mask is not None:
            if not mask.all():  # a caller who sees everything needs no masking pass
                lexical = np.where(mask, lexical, 0.0).astype(np.float32, copy=False)
                cosines = np.where(mask, cosines, 0.0).astype(np.float32, copy=False)
            rows = (set(top_rows(lexical, CANDIDATES).tolist())
                    | set(top_rows(cosines, CANDIDATES).tolist()))
        else:
            rows = self._candidates(lexical, allowed) | self._candidates(cosines, allowed)
        if not rows:
            return []
        picked = np.fromiter(sorted(rows), dtype=np.int64)
        lex_of = lexical[picked].astype(np.float64)
        raw_cos = cosines[picked].astype(np.float64)
        vec_of = np.maximum(raw_cos, 0.0)
        lex_of /= float(lex_of.max()) or 1.0
        vec_of /= float(vec_of.max()) or 1.0
        rec_of = 1.0 / (1.0 + np.maximum(0.0, now_ms / _DAY_MS - self._created[picked]))
        w_lex, w_vec, w_rec = weights
        totals = np.rint(w_lex * lex_of + w_vec * vec_of + w_rec * rec_of).astype(np.int64)
        ids = self._ids
        if len(totals) > limit:  # only rows scoring at least the limit-th can place
            floor = np.partition(totals, len(totals) - limit)[len(totals) - limit]
            near = np.flatnonzero(totals >= floor).tolist()
        else:
            near = list(range(len(totals)))
        order = sorted(near, key=lambda i: (-int(totals[i]), ids[int(picked[i])] or ""))[:limit]
        return [Hit(ids[int(picked[i])] or "", int(totals[i]), float(lex_of[i]),
                    float(vec_of[i]), float(rec_of[i]), float(raw_cos[i])) for i in order]

    def _candidates(self, scores: npt.NDArray[np.float32],
                    allowed: Callable[[str], bool]) -> set[int]:
        """Up to ``CANDIDATES`` best rows with a positive score that ``allowed`` admits."""
        used = len(scores)
        window = CANDIDATES
        while True:
            top = top_rows(scores, min(window, used))
            out: set[int] = set()
            for row in top.tolist():
                ident = self._ids[row]
                if ident is not None and allowed(ident):
                    out.add(row)
                    if len(out) >= CANDIDATES:
                        return out
            if window >= used or len(top) < window:
                return out  # nothing more with a positive score
            window *= 4
