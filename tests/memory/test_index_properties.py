"""The fast index against a brute-force reference, over random corpora and queries.

The reference is the ranking written out the slow, obvious way (pure Python floats):
BM25 over every live item, cosine over every live item, candidates = the 50 best of
each (score > 0, allowed, ties by insertion order), each part normalised to the best
candidate, recency ``1/(1+age_days)``, REFERENCE's weights. The fast index
(argpartition over float32 arrays, postings, einsum) must return the same top-k.

float32 against float64 can only disagree on near-ties, so a case whose reference has
a near-tie that decides the answer (at a candidate cut, or a score on a rounding
edge) is checked on scores only (±1 bps), and hypothesis counts
how often that happens (``-s --hypothesis-show-statistics``).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

from palyra.memory.embed import HashEmbedder
from palyra.memory.index import CANDIDATES, MemoryIndex, tokens

DAY = 86_400_000
NOW = 1_700_000_000_000
WORDS = ["alpha", "beta", "gamma", "delta", "office", "brno", "cat", "miso", "server",
         "debian", "deploy", "key", "monday", "the", "is", "a"]
EMBEDDER = HashEmbedder()
K1, B = 1.2, 0.75


def reference(docs: list[tuple[str, str, int]], gone: set[str], allowed: set[str], query: str,
              limit: int, weights: tuple[int, int, int]) -> tuple[list[tuple[str, float]], bool]:
    """(memory id, unrounded score) best first, and whether the case is fragile."""
    live = [(row, mid, text, created) for row, (mid, text, created) in enumerate(docs)
            if mid not in gone]
    if not live or not query.strip():
        return [], False
    bags = {mid: Counter(tokens(text)) for _r, mid, text, _c in live}
    avg = sum(sum(b.values()) for b in bags.values()) / len(live) or 1.0
    qv = [float(x) for x in EMBEDDER.embed([query])[0]]
    lex: dict[str, float] = {}
    vec: dict[str, float] = {}
    for _row, mid, text, _c in live:
        bag, length = bags[mid], sum(bags[mid].values())
        total = 0.0
        for term in dict.fromkeys(tokens(query)):
            df = sum(1 for b in bags.values() if term in b)
            if df and term in bag:
                idf = math.log(1 + (len(live) - df + 0.5) / (df + 0.5))
                tf = bag[term]
                total += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avg))
        lex[mid] = total
        vec[mid] = sum(a * float(b) for a, b in zip(qv, EMBEDDER.embed([text])[0], strict=True))
    order = {mid: row for row, mid, _t, _c in live}
    fragile = False

    def candidates(score: dict[str, float]) -> list[str]:
        nonlocal fragile
        ranked = sorted((m for m in score if score[m] > 0), key=lambda m: (-score[m], order[m]))
        ranked = [m for m in ranked if m in allowed]
        if len(ranked) > CANDIDATES:
            a, b = score[ranked[CANDIDATES - 1]], score[ranked[CANDIDATES]]
            fragile |= a != b and abs(a - b) < 1e-4 * max(abs(a), 1.0)
        return ranked[:CANDIDATES]

    picked = set(candidates(lex)) | set(candidates(vec))
    if not picked:
        return [], fragile
    best_lex = max(lex[m] for m in picked) or 1.0
    best_vec = max(max(vec[m], 0.0) for m in picked) or 1.0
    created = {mid: c for _r, mid, _t, c in live}
    w_lex, w_vec, w_rec = weights
    totals = {m: w_lex * lex[m] / best_lex + w_vec * max(vec[m], 0.0) / best_vec
              + w_rec / (1 + max(0.0, (NOW - created[m]) / DAY)) for m in picked}
    ranked = sorted(picked, key=lambda m: (-round(totals[m]), m))
    # Only scores that can reach the top ``limit`` decide the answer.
    floor = round(totals[ranked[min(limit, len(ranked) - 1)]]) - 1
    fragile |= any(abs(t - math.floor(t) - 0.5) < 5e-3 for t in totals.values() if t >= floor)
    return [(m, totals[m]) for m in ranked[:limit]], fragile


_doc = st.tuples(st.lists(st.sampled_from(WORDS), min_size=0, max_size=8),
                 st.integers(0, 40 * DAY))
# Small corpora, and ones past the 50-candidate cut (where argpartition prunes).
corpora = st.one_of(st.lists(_doc, min_size=1, max_size=30),
                    st.lists(_doc, min_size=60, max_size=200))


@settings(max_examples=150, deadline=None)
@given(corpora, st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), st.data())
def test_fast_search_matches_brute_force(corpus: list[tuple[list[str], int]], query: list[str],
                                         data: st.DataObject) -> None:
    index = MemoryIndex(EMBEDDER)
    docs = [(f"m{i:03d}", " ".join(words), NOW - age) for i, (words, age) in enumerate(corpus)]
    late = data.draw(st.integers(0, min(5, len(docs) - 1)))  # added after a first search
    for mid, text, created in docs[: len(docs) - late]:
        index.add(mid, text, created)
    text = " ".join(query)
    index.search(text, NOW)  # fills the term cache, which the changes below must reset
    for mid, text_, created in docs[len(docs) - late:]:
        index.add(mid, text_, created)
    ids = [d[0] for d in docs]
    gone = set(data.draw(st.lists(st.sampled_from(ids), max_size=len(ids) // 3)))
    for mid in gone:
        index.remove(mid)
    allowed = set(data.draw(st.lists(st.sampled_from(ids), max_size=len(ids)))) \
        if data.draw(st.booleans()) else set(ids)
    limit = data.draw(st.integers(1, 12))
    weights = data.draw(st.sampled_from([(5500, 3500, 1000), (10_000, 0, 0), (0, 10_000, 0)]))
    if data.draw(st.booleans()):  # the row-mask form of the same rule
        mask = np.zeros(index.used, dtype=np.bool_)
        for mid in allowed:
            row = index.row_of(mid)
            if row is not None:
                mask[row] = True
        fast = index.search(text, NOW, limit=limit, weights=weights, mask=mask)
    else:
        fast = index.search(text, NOW, limit=limit, allowed=lambda m: m in allowed,
                            weights=weights)
    want, fragile = reference(docs, gone, allowed, text, limit, weights)
    assert len(fast) == len(want)
    for hit, (_mid, total) in zip(fast, want, strict=True):
        assert abs(hit.score_bps - total) <= 1.5
        assert hit.memory_id in allowed and hit.memory_id not in gone
    event("near-tie: scores only" if fragile else "exact order checked")
    event("past the candidate cut" if len(docs) - len(gone) > CANDIDATES else "small corpus")
    if not fragile:
        assert [h.memory_id for h in fast] == [m for m, _ in want]
