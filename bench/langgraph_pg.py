"""Workload tool-loop v1 on LangGraph with its own PostgreSQL checkpointer (the comparison).

Run by ``python -m bench tool-loop --backend postgres --langgraph`` in a process of its
own, on the same PostgreSQL server and in the same sitting as palyra's runs::

    python -m bench.langgraph_pg --dsn DSN --warm-dsn DSN2 [-n N] [-k K] [-c C] [--server-pid P]

It prints one JSON line with the workload's keys (``steps_per_s``, ``p50_step_ms``,
``p99_step_ms``, ``cpu_ms_per_step`` of this process, ``ok``) plus the database's
committed transactions per step (``pg_stat_database``).

The graph is LangGraph's own tool loop: a model node and ``ToolNode`` with
``tools_condition``, ``MessagesState``, and ``AsyncPostgresSaver`` over a pool of
connections (one per worker, so the C sessions do not queue on one connection).
Every step is durable before the next begins: ``durability="sync"`` writes each
superstep's checkpoint before the next superstep starts, and the server runs with
``fsync`` and ``synchronous_commit`` on. The model follows the workload's scripted
rule (no LLM), and the tool is ``add``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from bench.pgcpu import cluster_cpu_s

PROMPT = ("Start from 0 and add 1 to the running total {k} times, one `add` tool call per "
          "step, then reply with the final result.")


@tool
def add(a: int, b: int) -> int:
    """a + b."""
    return a + b


def build(k: int, saver: AsyncPostgresSaver) -> Any:
    """The tool loop, checkpointed by ``saver``."""

    def model(state: MessagesState) -> dict[str, list[Any]]:
        # The workload's scripted rule over the messages since the last user message.
        messages = state["messages"]
        last_user = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
        results = [m for m in messages[last_user:] if isinstance(m, ToolMessage)]
        total = int(results[-1].content) if results else 0
        if len(results) < k:
            call = {"name": "add", "args": {"a": total, "b": 1}, "id": f"call_{len(results)}"}
            return {"messages": [AIMessage(content="", tool_calls=[call])]}
        return {"messages": [AIMessage(content=f"result={total}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", ToolNode([add]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=saver)


async def turn(app: Any, thread: str, k: int, steps: list[float]) -> bool:
    """One user turn; the interval of each tool step goes to ``steps``; True if ``result=k``."""
    config = {"configurable": {"thread_id": thread}, "recursion_limit": 4 * k + 10}
    last = time.perf_counter()
    final = ""
    async for update in app.astream({"messages": [HumanMessage(PROMPT.format(k=k))]}, config,
                                    stream_mode="updates", durability="sync"):
        if "tools" in update:
            now = time.perf_counter()
            steps.append(now - last)
            last = now
        elif "model" in update:
            final = str(update["model"]["messages"][-1].content)
    return final == f"result={k}"


async def drive(app: Any, sessions: int, k: int, c: int, prefix: str
                ) -> tuple[float, list[float], bool]:
    """``sessions`` turns through ``c`` closed-loop workers: wall seconds, step intervals, ok."""
    queue = list(range(sessions))
    steps: list[float] = []
    ok = True

    async def worker() -> None:
        nonlocal ok
        while queue:
            n = queue.pop()
            ok = await turn(app, f"{prefix}-{n}", k, steps) and ok

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(c)))
    return time.perf_counter() - began, steps, ok


async def transactions(pool: AsyncConnectionPool[Any]) -> int:
    """Committed transactions of this database so far (as the statistics have them)."""
    async with pool.connection() as conn:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        row = await (await conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )).fetchone()
    return int(row["xact_commit"]) if row else 0


def _pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile ``p`` of ``values`` (seconds), in ms."""
    ordered = sorted(values)
    return round(ordered[max(0, min(len(ordered), math.ceil(p * len(ordered))) - 1)] * 1000, 2)


async def open_saver(dsn: str, c: int) -> tuple[AsyncConnectionPool[Any], AsyncPostgresSaver]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn, min_size=c, max_size=c, open=False,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row})
    await pool.open(wait=True)
    saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
    await saver.setup()
    return pool, saver


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    pool, saver = await open_saver(args.warm_dsn, args.concurrency)
    try:
        await drive(build(args.steps, saver), 3, args.steps, min(3, args.concurrency), "warm")
    finally:
        await pool.close()
    pool, saver = await open_saver(args.dsn, args.concurrency)
    try:
        app = build(args.steps, saver)
        before = await transactions(pool)
        load = os.getloadavg()[0]
        cpu, server_cpu = time.process_time(), cluster_cpu_s(args.server_pid or None)
        wall, steps, ok = await drive(app, args.sessions, args.steps, args.concurrency, "s")
        cpu, server_cpu = (time.process_time() - cpu,
                           cluster_cpu_s(args.server_pid or None) - server_cpu)
        await asyncio.sleep(1.0)  # the statistics collector flushes about once a second
        xacts = await transactions(pool) - before
    finally:
        await pool.close()
    n = args.sessions * args.steps
    return {
        "system": "langgraph", "workload": "tool-loop", "workload_version": 1,
        "checkpointer": "langgraph-checkpoint-postgres AsyncPostgresSaver",
        "durability": "sync", "ok": ok and len(steps) == n,
        "steps_per_s": round(n / wall, 1), "wall_s": round(wall, 3),
        "p50_step_ms": _pct(steps, 0.50), "p99_step_ms": _pct(steps, 0.99),
        "cpu_ms_per_step": round(cpu * 1000 / n, 3),
        **({"postgres_cpu_ms_per_step": round(server_cpu * 1000 / n, 3)}
           if args.server_pid else {}),
        "pg_transactions_per_step": round(xacts / n, 2),
        "load_avg_1m": {"before": load, "after": os.getloadavg()[0]},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.langgraph_pg", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="the measured run's (fresh) database")
    parser.add_argument("--warm-dsn", required=True, help="a throwaway database to warm up on")
    parser.add_argument("-k", "--steps", type=int, default=10)
    parser.add_argument("-n", "--sessions", type=int, default=200)
    parser.add_argument("-c", "--concurrency", type=int, default=16)
    parser.add_argument("--server-pid", type=int, default=0,
                        help="the postmaster's pid: report the server's CPU per step")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    result = asyncio.run(main_async(args))
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
