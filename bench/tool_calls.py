"""``python -m bench tool-calls``: one tool call's CPU on the daemon's side, apart from the run.

Usage::

    python -m bench tool-calls [-n CALLS] [-r ROUNDS] [--json FILE|-]

The tool-loop's three adds (the built-in ``add``, the same add served over stdio
by ``bench/mcp_add_server.py``, the example WebAssembly skill's add) called
through ``ToolRegistry.execute`` CALLS times each (after 200 warm-up calls),
alternating within each of ROUNDS rounds, in one process. Each figure is the
calling thread's CPU (``time.thread_time``, the event loop's thread: an MCP
call's wait for its server costs nothing here) and the wall time, per call,
median of the rounds; the MCP server's own CPU per call is beside it. Without
the engine, the journal and the other processes of a step, it moves far less
with the machine's load than ``tool-loop --compare-tools``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import report
from bench.inproc import EXAMPLE_SKILL, MCP_SERVER
from bench.measure import _children_cpu_s
from palyra.tools import ToolContext, ToolRegistry, default_registry

TOOLS = {"add": "add", "mcp": "mcp.bench.add", "skill": "skill.demo.add"}
WARM_UP = 200


async def _round(registry: ToolRegistry, name: str, ctx: ToolContext,
                 calls: int) -> dict[str, float]:
    arguments = {"a": 1, "b": 2}
    for _ in range(WARM_UP):
        result = await registry.execute(name, arguments, ctx)
        if not result.success:
            raise RuntimeError(f"{name}: {result.error}")
    server, cpu, wall = _children_cpu_s(), time.thread_time(), time.perf_counter()
    for _ in range(calls):
        await registry.execute(name, arguments, ctx)
    return {"cpu_us_per_call": (time.thread_time() - cpu) * 1e6 / calls,
            "wall_us_per_call": (time.perf_counter() - wall) * 1e6 / calls,
            "server_cpu_us_per_call": (_children_cpu_s() - server) * 1e6 / calls}


async def measure(calls: int, rounds: int) -> dict[str, Any]:
    """Every round of every tool, and the medians."""
    from palyra.tools.mcp import McpServerConfig
    from palyra.tools.mcp.hub import McpHub
    from palyra.tools.skills import Limits, install, register_skills

    registry = default_registry()
    runs: dict[str, list[dict[str, float]]] = {tool: [] for tool in TOOLS}
    with tempfile.TemporaryDirectory(prefix="palyra-tool-calls-") as temp:
        ctx = ToolContext(workspace_dir=Path(temp))
        install(EXAMPLE_SKILL, Path(temp) / "skills")
        register_skills(Path(temp) / "skills", registry, limits=Limits())
        async with McpHub(registry, [McpServerConfig(
                name="bench", command=sys.executable, args=(str(MCP_SERVER),),
                capabilities=("read_only",))]):
            for i in range(rounds):
                for tool, name in TOOLS.items():
                    runs[tool].append(await _round(registry, name, ctx, calls))
                    print(f"round {i + 1}/{rounds} {tool}: "
                          f"{runs[tool][-1]['cpu_us_per_call']:.1f} CPU µs/call",
                          file=sys.stderr, flush=True)
    return {tool: {"median": {key: round(statistics.median(r[key] for r in rs), 1)
                              for key in rs[0]}, "runs": rs}
            for tool, rs in runs.items()}


def render(results: dict[str, Any]) -> str:
    """The table: median CPU and wall µs per call, and the MCP server's CPU."""
    lines = [f"{'tool':6s} {'CPU µs/call':>12s} {'wall µs/call':>13s} {'server CPU µs':>14s}"]
    for tool, result in results.items():
        m = result["median"]
        lines.append(f"{tool:6s} {m['cpu_us_per_call']:12.1f} {m['wall_us_per_call']:13.1f} "
                     f"{m['server_cpu_us_per_call']:14.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench tool-calls", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--calls", type=int, default=2000, help="calls per round")
    parser.add_argument("-r", "--rounds", type=int, default=3, help="rounds, tools alternating")
    parser.add_argument("--json", default="", metavar="FILE",
                        help="also write the rounds and medians as JSON (- for stdout)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if min(args.calls, args.rounds) < 1:
        parser.error("CALLS and ROUNDS must be at least 1")
    results = asyncio.run(measure(args.calls, args.rounds))
    if args.json != "-":
        print(render(results))
    if args.json:
        report.write_json(args.json, {
            "bench": "tool-calls", "tree": report.tree_info(), "host": report.host_info(),
            "args": {"calls": args.calls, "rounds": args.rounds}, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
