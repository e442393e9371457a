"""Retrieval quality of memory search on the suite in ``bench/data/retrieval_suite.json``.

``python -m bench memory`` prints it beside the latency figures; the tests hold a
floor. Three rankers over the same index: lexical only (BM25), vector only
(cosine over the embedder), and the hybrid palyra uses (REFERENCE weights).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from palyra.memory.embed import Embedder, default_embedder
from palyra.memory.index import MemoryIndex

SUITE = Path(__file__).resolve().parent / "data" / "retrieval_suite.json"
RANKERS = {"lexical": (10_000, 0, 0), "vector": (0, 10_000, 0), "hybrid": (5500, 3500, 1000)}
T0 = 1_700_000_000_000


def evaluate(embedder: Embedder | None = None, k: int = 5) -> dict[str, dict[str, float]]:
    """``{ranker: {"recall@5": r, "mrr": m}}`` over every query of the suite."""
    suite: dict[str, Any] = json.loads(SUITE.read_text())
    index = MemoryIndex(embedder or default_embedder())
    for key, text in suite["items"].items():
        index.add(key, text, T0)
    out: dict[str, dict[str, float]] = {}
    for name, weights in RANKERS.items():
        hits_at_k, reciprocal = 0, 0.0
        for query, wanted in suite["queries"]:
            ranked = [h.memory_id for h in index.search(query, T0, limit=50, weights=weights)]
            if wanted in ranked[:k]:
                hits_at_k += 1
            if wanted in ranked:
                reciprocal += 1 / (ranked.index(wanted) + 1)
        n = len(suite["queries"])
        out[name] = {f"recall@{k}": round(hits_at_k / n, 3), "mrr": round(reciprocal / n, 3)}
    return out
