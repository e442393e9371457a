"""``python -m bench memory``: memory ingest cost, search latency at scale, retrieval quality,
and what memory auto-inject adds to a model call.

Usage::

    python -m bench memory [--sizes 10000,100000] [--ingest 500] [--queries 200]
                           [--assembly-items 10000] [--loop-sessions 60] [--json FILE]

* ingest: ``Memory.ingest`` of ``--ingest`` items one at a time through a durable journal
  (``sync=True``: the commit log's flush per item is included), ms per item;
* search: the hybrid index at each size (items generated from templates, added in bulk),
  p50 and p95 of ``--queries`` searches, ms (wall, and the searching thread's CPU time);
* retrieval: recall@5 and MRR on ``bench/data/retrieval_suite.json`` for lexical-only,
  vector-only and hybrid ranking;
* assembly: ``MemoryContext.assemble`` (Cedar check + search + block + token count) per
  new user input, ms, over a 10k-item memory;
* tool loop: the tool-loop workload (bench/workload.py: K=10 ``add`` steps per turn, the
  scripted model, in process, durable journal, C=1) on a journal holding 10k memory items
  of the client's principal, with input assembly off and on (memory auto-inject +
  preferences, as the daemon wires them), alternating, 3 times each (medians). The assembly's own time (measured around the
  context port) divided by the model calls (K+1 per turn) is the overhead per model call,
  reported as a share of the step cost (mean step with assembly off); target <= 10 %.
  The difference of the mean turns (on - off) per model call is printed beside it as a
  cross-check (noisier: two runs on a shared machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.inproc import InProcessDriver
from bench.retrieval import evaluate
from bench.workload import drive
from palyra.adapters import GatePolicy, InputAssembly, MemoryContext, Preferences, RegistryTools
from palyra.app import PalyraApp
from palyra.engine import ContextContribution, ContextRequest, Engine, EngineConfig, IdentityRec
from palyra.journal import JournalConfig, JournalStore
from palyra.memory.embed import default_embedder
from palyra.memory.index import MemoryIndex
from palyra.memory.service import Memory
from palyra.policy import PolicyConfig, PolicyGate
from palyra.providers import ScriptedProvider
from palyra.tools import default_registry

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
        took, cpu = [], []
        for q in range(queries):
            start, cpu_start = time.perf_counter(), time.thread_time()
            index.search(questions[q % len(questions)], 1_700_000_000_000, limit=10)
            took.append((time.perf_counter() - start) * 1000)
            cpu.append((time.thread_time() - cpu_start) * 1000)
        # CPU time beside wall time: on a shared machine a search that waits for a core
        # shows in the wall tail, not in its CPU time.
        out[str(size)] = {"p50_ms": _pct(took, 50), "p95_ms": _pct(took, 95),
                          "mean_ms": round(statistics.fmean(took), 3),
                          "cpu_p50_ms": _pct(cpu, 50), "cpu_p95_ms": _pct(cpu, 95)}
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


class _Timed:
    """The context port, with the time spent in it summed."""

    def __init__(self, inner: InputAssembly) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self.calls = 0

    async def assemble(self, request: ContextRequest) -> list[ContextContribution]:
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return await self.inner.assemble(request)
        finally:
            self.seconds += time.perf_counter() - start
            self.cpu_seconds += time.thread_time() - cpu  # the stages never yield
            self.calls += 1


async def _memory_journal(data: Path, items: int) -> None:
    """A journal holding ``items`` memory items of the client's principal, journaled like any
    ingest (unflushed: setup, not measured)."""
    store = JournalStore.open(data, config=JournalConfig(sync=False))
    try:
        memory = Memory(store)
        for text in _corpus(items, seed=5):
            await memory.ingest("user:bench", text)
    finally:
        store.close()


async def _loop_once(template: Path, sessions: int, steps: int,
                     assembly: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="palyra-bench-loop-") as tmp:
        data = Path(tmp) / "data"
        shutil.copytree(template, data)
        store = JournalStore.open(data)  # durable, as the tool-loop bench runs it
        try:
            gate = PolicyGate.load(PolicyConfig())
            memory = Memory(store)  # rebuilt from the journal, as at a daemon start
            timed = _Timed(InputAssembly([MemoryContext(memory, gate, skip_kinds=("preference",)),
                                          Preferences(memory, gate)]))
            registry = default_registry()
            engine = Engine(store, ScriptedProvider(tool="add"),
                            GatePolicy(gate, registry), RegistryTools(registry, data),
                            EngineConfig(max_turns=steps + 2, approval_timeout_s=300.0),
                            context=timed if assembly else None)
            args = argparse.Namespace(hitl=False, turns=1, steps=steps, tool="add",
                                      concurrency=1)
            async with engine:
                await engine.recover()
                driver = InProcessDriver(PalyraApp(engine), store, "add")
                await drive(driver, args, 3, "warmup")
                timed.seconds, timed.cpu_seconds, timed.calls = 0.0, 0.0, 0
                cpu = time.process_time()
                tally = await drive(driver, args, sessions, "s")
                cpu = time.process_time() - cpu
            if tally.failures:
                raise RuntimeError(f"tool loop failed: {tally.failures[:3]}")
            model_calls = tally.runs * (steps + 1)
            return {"step_mean_ms": statistics.fmean(tally.steps) * 1000,
                    "turn_mean_ms": statistics.fmean(tally.turns) * 1000,
                    "assembly_ms_per_model_call": timed.seconds * 1000 / model_calls,
                    "cpu_ms_per_model_call": cpu * 1000 / model_calls,
                    "assembly_cpu_ms_per_model_call": timed.cpu_seconds * 1000 / model_calls}
        finally:
            store.close()


async def _tool_loop(items: int, sessions: int, steps: int = 10,
                     repeats: int = 3) -> dict[str, Any]:
    """Assembly off and on, alternating, ``repeats`` times each; medians."""
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="palyra-bench-loop-memory-") as tmp:
        template = Path(tmp) / "data"
        await _memory_journal(template, items)
        for _ in range(repeats):
            for assembly in (False, True):
                runs[assembly].append(await _loop_once(template, sessions, steps, assembly))

    def median(assembly: bool, key: str) -> float:
        return statistics.median(r[key] for r in runs[assembly])

    step_off = median(False, "step_mean_ms")
    per_call = median(True, "assembly_ms_per_model_call")
    diff = (median(True, "turn_mean_ms") - median(False, "turn_mean_ms")) / (steps + 1)
    cpu_off = median(False, "cpu_ms_per_model_call")
    cpu_asm = median(True, "assembly_cpu_ms_per_model_call")
    return {"items": items, "sessions": sessions, "steps": steps, "repeats": repeats,
            "step_mean_ms_off": round(step_off, 3),
            "step_mean_ms_on": round(median(True, "step_mean_ms"), 3),
            "assembly_per_input_ms": round(per_call * (steps + 1), 3),
            "assembly_ms_per_model_call": round(per_call, 3),
            "assembly_pct_of_step": round(100 * per_call / step_off, 2),
            "turn_diff_ms_per_model_call": round(diff, 3),
            "turn_diff_pct_of_step": round(100 * diff / step_off, 2),
            # CPU (this process: event loop and journal writer), steadier on a shared machine.
            "cpu_ms_per_model_call_off": round(cpu_off, 3),
            "assembly_cpu_ms_per_model_call": round(cpu_asm, 3),
            "assembly_cpu_pct": round(100 * cpu_asm / cpu_off, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench memory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--ingest", type=int, default=500)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--assembly-items", type=int, default=10_000,
                        help="memory items behind the auto-inject and tool-loop figures")
    parser.add_argument("--loop-sessions", type=int, default=60,
                        help="tool-loop turns per phase (0: skip the tool-loop figure)")
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    result: dict[str, Any] = {
        "embedder": default_embedder().name,
        "ingest_ms_per_item": asyncio.run(_ingest_ms(args.ingest)),
        "search": _search(sizes, args.queries),
        "retrieval": evaluate(),
        "assembly_per_input_10k": asyncio.run(_assembly(args.assembly_items)),
    }
    if args.loop_sessions:
        result["tool_loop_assembly"] = asyncio.run(_tool_loop(args.assembly_items,
                                                              args.loop_sessions))
    for line in (f"embedder                      {result['embedder']}",
                 f"ingest ms/item (durable)      {result['ingest_ms_per_item']}"):
        print(line)
    for size, figures in result["search"].items():
        print(f"search at {size:>7} items       p50 {figures['p50_ms']} ms · "
              f"p95 {figures['p95_ms']} ms (CPU p50 {figures['cpu_p50_ms']} · "
              f"p95 {figures['cpu_p95_ms']} ms)")
    for ranker, figures in result["retrieval"].items():
        print(f"retrieval {ranker:<8}            recall@5 {figures['recall@5']} · "
              f"MRR {figures['mrr']}")
    a = result["assembly_per_input_10k"]
    print(f"auto-inject per user input    p50 {a['p50_ms']} ms · p95 {a['p95_ms']} ms "
          f"({args.assembly_items} items)")
    loop = result.get("tool_loop_assembly")
    if loop:
        print(f"tool loop, assembly per model call  {loop['assembly_ms_per_model_call']} ms = "
              f"{loop['assembly_pct_of_step']} % of the step ({loop['step_mean_ms_off']} ms "
              f"mean without assembly; target <= 10 %); turns on - off: "
              f"{loop['turn_diff_ms_per_model_call']} ms per model call "
              f"({loop['turn_diff_pct_of_step']} %); CPU: {loop['assembly_cpu_ms_per_model_call']}"
              f" of {loop['cpu_ms_per_model_call_off']} ms per model call "
              f"({loop['assembly_cpu_pct']} %)")
    if args.json:
        text = json.dumps(result, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    sys.stdout.flush()
    return 0
