"""``python -m bench memory``: memory ingest cost, search latency at scale, retrieval quality,
and what memory auto-inject adds to a model call.

Usage::

    python -m bench memory [--sizes 10000,100000] [--ingest 500] [--queries 200] [--json FILE]

* ingest: ``Memory.ingest`` of ``--ingest`` items one at a time through a durable journal
  (``sync=True``: the commit log's flush per item is included), ms per item;
* search: the hybrid index at each size (items generated from templates, added in bulk),
  p50 and p95 of ``--queries`` searches, ms;
* retrieval: recall@5 and MRR on ``bench/data/retrieval_suite.json`` for lexical-only,
  vector-only and hybrid ranking;
* assembly: ``MemoryContext.assemble`` (Cedar check + search + block + token count) per
  new user input, ms, over a 10k-item memory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.retrieval import evaluate
from palyra.adapters import MemoryContext
from palyra.engine import ContextRequest, IdentityRec
from palyra.journal import JournalConfig, JournalStore
from palyra.memory.embed import default_embedder
from palyra.memory.index import MemoryIndex
from palyra.memory.service import Memory
from palyra.policy import PolicyConfig, PolicyGate

_SUBJECTS = ["the staging server", "my manager", "the office", "our biggest customer",
             "the deploy key", "the backup job", "my sister", "the team budget", "the router",
             "the release", "the printer", "my flight", "the database", "the web console"]
_VERBS = ["is in", "runs on", "belongs to", "moved to", "depends on", "was renamed to",
          "is scheduled for", "costs", "is managed by", "is backed up to"]
_OBJECTS = ["Brno", "Debian 12", "PostgreSQL 16", "Vienna", "Monday", "the second floor",
            "2000 euros", "Hamburg", "the team wiki", "Lisbon", "Bitwarden", "React",
            "October", "the big meeting room", "port 8443", "Jana", "the night shift"]


def _corpus(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} "
            f"(note {i})" for i in range(n)]


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))], 3)


async def _ingest_ms(count: int) -> float:
    with tempfile.TemporaryDirectory(prefix="palyra-bench-memory-") as tmp:
        store = JournalStore.open(Path(tmp) / "data", config=JournalConfig(sync=True))
        try:
            memory = Memory(store)
            texts = _corpus(count, seed=11)
            start = time.perf_counter()
            for text in texts:
                await memory.ingest("user:bench", text)
            return round((time.perf_counter() - start) / count * 1000, 3)
        finally:
            store.close()


def _search(sizes: list[int], queries: int) -> dict[str, dict[str, float]]:
    embedder = default_embedder()
    out: dict[str, dict[str, float]] = {}
    questions = [f"where is {rng_s}" for rng_s in _SUBJECTS] + [
        f"what {v} {o}" for v in _VERBS[:4] for o in _OBJECTS[:6]]
    for size in sizes:
        texts = _corpus(size)
        index = MemoryIndex(embedder)
        vectors = embedder.embed(texts)
        for i, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
            index.add(f"m{i}", text, 1_700_000_000_000, vector)
        took = []
        for q in range(queries):
            start = time.perf_counter()
            index.search(questions[q % len(questions)], 1_700_000_000_000, limit=10)
            took.append((time.perf_counter() - start) * 1000)
        out[str(size)] = {"p50_ms": _pct(took, 50), "p95_ms": _pct(took, 95),
                          "mean_ms": round(statistics.fmean(took), 3)}
    return out


async def _assembly(items: int, runs: int = 200) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="palyra-bench-assembly-") as tmp:
        store = JournalStore.open(Path(tmp) / "data", config=JournalConfig(sync=False))
        try:
            memory = Memory(store)
            for text in _corpus(items, seed=3):  # journaled like any ingest (no flush here)
                await memory.ingest("user:bench", text)
            context = MemoryContext(memory, PolicyGate.load(PolicyConfig()))
            request = ContextRequest(IdentityRec("user:bench"), "S", "R",
                                     "where is the staging server")
            took = []
            for _ in range(runs):
                start = time.perf_counter()
                await context.assemble(request)
                took.append((time.perf_counter() - start) * 1000)
            return {"p50_ms": _pct(took, 50), "p95_ms": _pct(took, 95)}
        finally:
            store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench memory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--ingest", type=int, default=500)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    result: dict[str, Any] = {
        "embedder": default_embedder().name,
        "ingest_ms_per_item": asyncio.run(_ingest_ms(args.ingest)),
        "search": _search(sizes, args.queries),
        "retrieval": evaluate(),
        "assembly_per_input_10k": asyncio.run(_assembly(10_000)),
    }
    for line in (f"embedder                      {result['embedder']}",
                 f"ingest ms/item (durable)      {result['ingest_ms_per_item']}"):
        print(line)
    for size, figures in result["search"].items():
        print(f"search at {size:>7} items       p50 {figures['p50_ms']} ms · "
              f"p95 {figures['p95_ms']} ms")
    for ranker, figures in result["retrieval"].items():
        print(f"retrieval {ranker:<8}            recall@5 {figures['recall@5']} · "
              f"MRR {figures['mrr']}")
    a = result["assembly_per_input_10k"]
    print(f"auto-inject per user input    p50 {a['p50_ms']} ms · p95 {a['p95_ms']} ms (10k items)")
    if args.json:
        text = json.dumps(result, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    sys.stdout.flush()
    return 0
