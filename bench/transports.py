"""The tool-loop workload over the wire: gRPC and HTTP drivers against a daemon subprocess.

``python -m bench.transports --transport grpc|http [--concurrency C] [--sessions N]
[--steps K] [--hitl] [--compare-inproc]`` prints one JSON line with the
workload's keys (see /work/shared/workloads/tool-loop.md), where process
figures are the **daemon's** (``peak_rss_mib`` = VmHWM from
``/proc/<pid>/status``, ``cpu_s`` from ``/proc/<pid>/stat``) and the client's
are reported separately (``client_peak_rss_mib``, ``client_cpu_s``). With
``--compare-inproc`` the in-process run (bench.tool_loop) is measured with the
same arguments and ``overhead`` gives the ratios.

For ``bench.tool_loop --transport``: :func:`open_driver` yields a
:class:`bench.tool_loop.Driver` (``GrpcDriver`` or ``HttpDriver``) bound to a
fresh daemon on ``data_dir``; :func:`daemon_proc_stats` reads the daemon's
/proc figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx_sse
from grpclib.client import Channel
from palyra_gen.palyra import v1 as pb

from bench import tool_loop
from bench.tool_loop import OnEvent
from palyra.testing.spawn import DaemonProcess

TOKEN = "bench-admin-token"
DEVICE = "01J00000000000000000000000"
CLIENT_HEADERS = {"authorization": f"Bearer {TOKEN}", "x-palyra-principal": "user:bench",
                  "x-palyra-device-id": DEVICE}
APPROVER_HEADERS = {**CLIENT_HEADERS, "x-palyra-principal": "admin:bench"}
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def daemon_proc_stats(pid: int) -> dict[str, float]:
    """The daemon's VmHWM/VmRSS (MiB), user+sys CPU (s) and write counters."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(value.split()[0]) / 1024
    with open(f"/proc/{pid}/stat") as handle:
        # Fields after the parenthesised comm; utime and stime are fields 14 and 15.
        fields = handle.read().rpartition(")")[2].split()
    out["cpu_s"] = (int(fields[11]) + int(fields[12])) / _CLK_TCK
    with contextlib.suppress(OSError), open(f"/proc/{pid}/io") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in ("wchar", "write_bytes"):
                out[key] = int(value)
    return out


class GrpcDriver:
    """The workload over one multiplexed grpclib channel."""

    def __init__(self, daemon: DaemonProcess, tool: str) -> None:
        self._daemon = daemon
        self._tool = tool
        self._channel = Channel("127.0.0.1", daemon.grpc_port)
        self._gateway = pb.GatewayServiceStub(self._channel, metadata=CLIENT_HEADERS)
        self._approvals = pb.ApprovalsServiceStub(self._channel, metadata=APPROVER_HEADERS)

    async def prepare_session(self, session_key: str, *, hitl: bool) -> None:
        resolved = await self._gateway.resolve_session(
            pb.ResolveSessionRequest(session_key=session_key))
        if hitl:
            await self._gateway.set_tool_posture(pb.SetToolPostureRequest(
                session_id=resolved.session.session_id, tool_name=self._tool,
                posture=pb.ToolPosture.ASK_EACH_TIME))

    async def start_turn(self, session_key: str, text: str) -> str:
        created = await self._gateway.create_run(pb.CreateRunRequest(
            v=1, session_key=session_key, input=pb.MessageInput(text=text), complete=True))
        return (created.run or pb.Run()).run_id

    async def wait(self, run_id: str, on_event: OnEvent) -> pb.Run:
        async for response in self._gateway.watch_run(pb.WatchRunRequest(run_id=run_id, after_seq=-1)):
            if response.event is not None:
                await on_event(response.event)
        return (await self._gateway.get_run(pb.GetRunRequest(run_id=run_id))).run or pb.Run()

    async def decide_approval(self, approval_id: str) -> None:
        await self._approvals.decide_approval(pb.DecideApprovalRequest(
            approval_id=approval_id, decision=pb.ApprovalDecision.APPROVE,
            scope=pb.ApprovalScope.ONCE, reason="bench"))

    @property
    def pid(self) -> int:
        """The daemon's pid."""
        return self._daemon.pid

    def server_stats(self) -> dict[str, Any]:
        return server_stats(self._daemon)

    async def aclose(self) -> None:
        self._channel.close()


class HttpDriver:
    """The workload over HTTP/1.1 keep-alive: JSON calls, the tape as SSE."""

    def __init__(self, daemon: DaemonProcess, tool: str, concurrency: int) -> None:
        self._daemon = daemon
        self._tool = tool
        limits = httpx.Limits(max_connections=4 * concurrency + 4,
                              max_keepalive_connections=4 * concurrency + 4)
        self._http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{daemon.http_port}",
                                       headers=CLIENT_HEADERS, limits=limits, timeout=60.0)

    async def _post(self, path: str, body: dict[str, Any],
                    headers: dict[str, str] | None = None) -> dict[str, Any]:
        response = await self._http.post(path, json=body, headers=headers)
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    async def prepare_session(self, session_key: str, *, hitl: bool) -> None:
        resolved = await self._post("/v1/sessions:resolve", {"sessionKey": session_key})
        if hitl:
            session_id = resolved["session"]["sessionId"]
            await self._post(f"/v1/sessions/{session_id}/tool-postures",
                             {"toolName": self._tool, "posture": "ask_each_time"})

    async def start_turn(self, session_key: str, text: str) -> str:
        created = await self._post("/v1/runs", {"v": 1, "sessionKey": session_key,
                                                "input": {"text": text}, "complete": True})
        return str(created["run"]["runId"])

    async def wait(self, run_id: str, on_event: OnEvent) -> pb.Run:
        async with httpx_sse.aconnect_sse(self._http, "GET", f"/v1/runs/{run_id}/events") as source:
            source.response.raise_for_status()
            async for sse in source.aiter_sse():
                response = pb.WatchRunResponse.from_dict(json.loads(sse.data))
                if response.event is not None:
                    await on_event(response.event)
        got = await self._http.get(f"/v1/runs/{run_id}")
        got.raise_for_status()
        return pb.GetRunResponse.from_dict(got.json()).run or pb.Run()

    async def decide_approval(self, approval_id: str) -> None:
        await self._post(f"/v1/approvals/{approval_id}:decide",
                         {"decision": "approve", "scope": "once", "reason": "bench"},
                         headers=APPROVER_HEADERS)

    @property
    def pid(self) -> int:
        """The daemon's pid."""
        return self._daemon.pid

    def server_stats(self) -> dict[str, Any]:
        return server_stats(self._daemon)

    async def aclose(self) -> None:
        await self._http.aclose()


def journal_commits(daemon: DaemonProcess) -> int:
    """The daemon's durable journal commits so far, from ``GET /healthz``."""
    health = httpx.get(f"http://127.0.0.1:{daemon.http_port}/healthz", timeout=10.0).json()
    return int(health.get("journalCommits", "0"))


def server_stats(daemon: DaemonProcess) -> dict[str, Any]:
    """What the harness can see of the daemon from outside: /proc and /healthz."""
    return {"commits": journal_commits(daemon), "proc": daemon_proc_stats(daemon.pid),
            "storage_effective": {"engine": "lmdb", "sync": True, "group_commit": True}}


def daemon_env(args: argparse.Namespace) -> dict[str, str]:
    """The daemon's settings for the workload (same engine settings as in-process)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    env.update({
        "PALYRA_ADMIN_TOKEN": TOKEN,
        "PALYRA_ENGINE_MAX_TURNS": str(args.steps + 2),
        "PALYRA_ENGINE_APPROVAL_TIMEOUT_S": "300",
        "PALYRA_PROVIDER_SCRIPTED_TOOL": args.tool,
        "PALYRA_LOG_LEVEL": "warning",
    })
    return env


@contextlib.asynccontextmanager
async def open_driver(kind: str, data_dir: Path, args: argparse.Namespace
                      ) -> AsyncIterator[GrpcDriver | HttpDriver]:
    """A fresh daemon on ``data_dir`` and a ``kind`` (grpc|http) driver for it."""
    daemon = DaemonProcess(data_dir, env=daemon_env(args),
                           log_path=data_dir.parent / f"{data_dir.name}.daemon.log")
    await asyncio.to_thread(daemon.start)
    driver: GrpcDriver | HttpDriver = (
        GrpcDriver(daemon, args.tool) if kind == "grpc"
        else HttpDriver(daemon, args.tool, args.concurrency))
    try:
        yield driver
    finally:
        await driver.aclose()
        code = await asyncio.to_thread(daemon.stop)
        if code != 0:
            raise RuntimeError(f"daemon exited {code}: {daemon.log()[-2000:]}")


def _client_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run_transport(args: argparse.Namespace) -> dict[str, Any]:
    """Measure one transport: warm the daemon with 3 sessions, then N sessions."""
    root = Path(args.db) if args.db else Path(tempfile.mkdtemp(prefix="palyra-bench-"))
    root.mkdir(parents=True, exist_ok=True)  # like the in-process mode: --db may not exist yet
    data_dir = root / f"{args.transport}-{time.time_ns()}"
    limits = tool_loop.physical_limits(root)
    async with open_driver(args.transport, data_dir, args) as driver:
        # Warm-up runs in the measured daemon: warming a throwaway process
        # would leave the measured one cold.
        await tool_loop.drive(driver, args, 3, "warmup")
        before = daemon_proc_stats(driver.pid)
        commits_before = driver.server_stats()["commits"]
        client_cpu = _client_cpu_s()
        t = time.perf_counter()
        tally = await tool_loop.drive(driver, args, args.sessions, "s")
        wall = time.perf_counter() - t
        client_cpu = _client_cpu_s() - client_cpu
        after = daemon_proc_stats(driver.pid)
        commits = driver.server_stats()["commits"] - commits_before
        sizes = tool_loop._db_sizes(data_dir)
    steps = args.sessions * args.turns * args.steps
    cpu = after["cpu_s"] - before["cpu_s"]
    wchar = after.get("wchar", 0) - before.get("wchar", 0)
    result: dict[str, Any] = {
        "system": "palyra", "workload": "tool-loop", "workload_version": 1,
        "transport": args.transport, "steps": args.steps, "sessions": args.sessions,
        "concurrency": args.concurrency, "turns": args.turns, "hitl": args.hitl,
        "tool": args.tool,
        "turns_per_s": round(len(tally.turns) / wall, 3),
        "steps_per_s": round(steps / wall, 3), "wall_s": round(wall, 3),
        "step_latency_ms": tool_loop._dist(tally.steps),
        "p50_step_ms": tool_loop._pct(tally.steps, 50),
        "p99_step_ms": tool_loop._pct(tally.steps, 99),
        "step_p50_ms_by_index": [tool_loop._pct(tally.by_index.get(i, []), 50)
                                 for i in range(args.steps)],
        "turn_latency_ms": tool_loop._dist(tally.turns),
        "final_answer_latency_ms": tool_loop._dist(tally.finals),
        "checkpointer_calls": {"total": commits,
                               "per_step": round(commits / steps, 3) if steps else 0},
        "proc_io": {"wchar": wchar, "write_bytes": after.get("write_bytes", 0)
                    - before.get("write_bytes", 0)},
        "wchar_per_step": round(wchar / steps, 1) if steps else 0,
        **sizes,
        "peak_rss_mib": round(after["VmHWM"], 1),
        "rss_before_run_mib": round(before["VmRSS"], 1),
        "cpu_s": round(cpu, 3), "cpu_util": round(cpu / wall, 3),
        "cpu_ms_per_step": round(cpu * 1000 / steps, 3) if steps else 0,
        "client_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "client_cpu_s": round(client_cpu, 3),
        "client_cpu_ms_per_step": round(client_cpu * 1000 / steps, 3) if steps else 0,
        "storage_effective": {"engine": "lmdb", "sync": True, "group_commit": True},
        "physical_limits": limits,
        "runs": tally.runs, "approvals": tally.approvals, "db_dir": str(data_dir),
        "ok": not tally.failures and len(tally.turns) == args.sessions * args.turns,
    }
    if tally.failures:
        result["failures"] = tally.failures[:5]
    if not args.keep_db and not args.db:
        shutil.rmtree(root, ignore_errors=True)
    return result


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.transports", description=__doc__)
    parser.add_argument("--transport", choices=("grpc", "http"), required=True)
    parser.add_argument("--steps", type=int, default=10, help="K tool calls per turn")
    parser.add_argument("--sessions", type=int, default=200, help="N sessions")
    parser.add_argument("--concurrency", type=int, default=1, help="C closed-loop workers")
    parser.add_argument("--turns", type=int, default=1, help="T user turns per session")
    parser.add_argument("--hitl", action="store_true", help="every tool call needs approval")
    parser.add_argument("--db", default="", help="parent dir of the data dir; default temp")
    parser.add_argument("--tool", choices=("add", "echo"), default="add")
    parser.add_argument("--keep-db", action="store_true", help="keep the temp data dir")
    parser.add_argument("--compare-inproc", action="store_true",
                        help="also run bench.tool_loop in process and report the overhead")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point; prints one JSON line, exit 0 iff every turn answered result=K."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    result = asyncio.run(run_transport(args))
    if args.compare_inproc:
        inproc_args = tool_loop.parse_args([
            "--steps", str(args.steps), "--sessions", str(args.sessions),
            "--concurrency", str(args.concurrency), "--turns", str(args.turns),
            "--tool", args.tool, *(["--hitl"] if args.hitl else [])])
        inproc = asyncio.run(tool_loop.run_bench(inproc_args))
        result["inproc"] = {k: inproc[k] for k in (
            "steps_per_s", "p50_step_ms", "p99_step_ms", "cpu_ms_per_step", "peak_rss_mib", "ok")}
        result["overhead"] = {
            "steps_per_s_ratio": round(inproc["steps_per_s"] / result["steps_per_s"], 3),
            "p50_step_ratio": round(result["p50_step_ms"] / max(inproc["p50_step_ms"], 1e-9), 3),
            "cpu_ms_per_step_ratio": round(
                result["cpu_ms_per_step"] / max(inproc["cpu_ms_per_step"], 1e-9), 3),
        }
    print(json.dumps(result))
    return 0 if result["ok"] and result.get("inproc", {"ok": True})["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
