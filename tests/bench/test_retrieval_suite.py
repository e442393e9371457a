"""Retrieval quality on the shipped suite (bench/data/retrieval_suite.json): the figures
`nox -s bench -- memory` prints, held to a floor here so a regression fails."""

from __future__ import annotations

from bench.retrieval import evaluate
from palyra.memory.embed import HashEmbedder, WordLlamaEmbedder


def test_the_default_embedder_ranks_well_and_beats_the_hash_fallback() -> None:
    model = evaluate(WordLlamaEmbedder())
    fallback = evaluate(HashEmbedder())
    assert model["hybrid"]["recall@5"] >= 0.9 and model["hybrid"]["mrr"] >= 0.8
    assert model["vector"]["mrr"] > fallback["vector"]["mrr"] + 0.2
    # Hybrid never does worse than lexical alone (the keyword side stays useful).
    assert model["hybrid"]["recall@5"] >= model["lexical"]["recall@5"]
