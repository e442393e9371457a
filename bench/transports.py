"""The tool-loop workload over the wire: gRPC and HTTP drivers against a daemon subprocess.

:func:`open_driver` starts ``palyra serve`` on a fresh data dir and yields a
driver bound to it. The daemon is started with ``bench/_site`` first on its
``PYTHONPATH`` and ``PALYRA_BENCH_PROBE`` set, so it answers
:func:`bench.probe.snapshot` on a Unix socket: its CPU per thread, messages
built and journal counters are measured from inside, the same way as in
process (:attr:`DaemonDriver.snapshot`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx_sse
import msgspec
from grpclib.const import Cardinality
from grpclib.exceptions import GRPCError
from palyra_gen.palyra import v1 as pb

from bench import probe
from bench.grpcio_driver import GrpcioDriver
from bench.lean_http import LeanClient
from bench.workload import OnEvent, StreamedTurn
from palyra.core.protojson import decode_message
from palyra.testing.spawn import DaemonProcess
from palyra.transport.grpc import ClientCodec, CorkedChannel

TOKEN = "bench-admin-token"
DEVICE = "01J00000000000000000000000"
CLIENT_HEADERS = {"authorization": f"Bearer {TOKEN}", "x-palyra-principal": "user:bench",
                  "x-palyra-device-id": DEVICE}
APPROVER_HEADERS = {**CLIENT_HEADERS, "x-palyra-principal": "admin:bench"}
# The HTTP driver decodes SSE frames as a lean client would: msgspec and the generated
# proto3 JSON codec (palyra's own), not json + betterproto2's from_dict, which cost the
# client more CPU per step than the daemon spends serving it on this 2-core machine.
_json = msgspec.json.Decoder()
_REPO = Path(__file__).resolve().parents[1]


class GrpcDriver:
    """The workload over one multiplexed grpclib channel."""

    def __init__(self, daemon: DaemonProcess, tool: str, batch: bool = True,
                 shape: str = "stream") -> None:
        self._daemon = daemon
        self._tool = tool
        self._batch = batch
        self._shape = shape
        self._turns: dict[str, StreamedTurn] = {}
        self._hitl = False
        # approval id -> the open RunStream of its run (HITL: decided inline on it)
        self._deciding: dict[str, Any] = {}
        # The channel and codec `palyra chat` uses (palyra.cli._client): corked writes,
        # protobin both ways.
        self._channel = CorkedChannel("127.0.0.1", daemon.grpc_port, codec=ClientCodec())
        self._gateway = pb.GatewayServiceStub(self._channel, metadata=CLIENT_HEADERS)
        self._approvals = pb.ApprovalsServiceStub(self._channel, metadata=APPROVER_HEADERS)

    async def prepare_session(self, session_key: str, *, hitl: bool) -> None:
        if not hitl:
            return  # the turn's CreateRun creates the session in its accept commit
        self._hitl = True
        resolved = await self._gateway.resolve_session(
            pb.ResolveSessionRequest(session_key=session_key))
        assert resolved.session is not None
        await self._gateway.set_tool_posture(pb.SetToolPostureRequest(
            session_id=resolved.session.session_id, tool_name=self._tool,
            posture=pb.ToolPosture.ASK_EACH_TIME))

    async def start_turn(self, session_key: str, text: str) -> str:
        if self._shape == "stream":
            # One RunStream per turn, as `palyra chat` does: the message goes up with
            # `complete` (no more input: done when the loop ends, in the run's first
            # commit), the client half-closes, and the tape comes back.
            turn = StreamedTurn(self._run_stream(pb.RunStreamRequest(
                v=1, session_key=session_key, input=pb.MessageInput(text=text),
                batch=self._batch, complete=True)))
            run_id = await turn.start()
            self._turns[run_id] = turn
            return run_id
        created = await self._gateway.create_run(pb.CreateRunRequest(
            v=1, session_key=session_key, input=pb.MessageInput(text=text), complete=True))
        return (created.run or pb.Run()).run_id

    async def _run_stream(self, request: pb.RunStreamRequest
                          ) -> AsyncIterator[pb.RunStreamResponse]:
        """RunStream with one request that also ends the client's side (``end=True``: one DATA
        frame with END_STREAM, where the generated stub sends an empty DATA frame after it).

        With approvals to decide (HITL) the client's side stays open, as `palyra chat`
        keeps it: each decision goes up the same stream (``RunStreamRequest.approval``),
        not as a DecideApproval call of its own, and the client half-closes at the end.
        """
        async with self._channel.request(
                "/palyra.v1.GatewayService/RunStream", Cardinality.STREAM_STREAM,
                pb.RunStreamRequest, pb.RunStreamResponse, metadata=CLIENT_HEADERS) as stream:
            await stream.send_message(request, end=not self._hitl)
            async for response in stream:
                if self._hitl:
                    for event in response.events or [response.event]:
                        if event is not None and event.tool_approval_request is not None:
                            self._deciding[event.tool_approval_request.approval_id] = stream
                yield response
            if self._hitl:
                await stream.end()

    async def wait(self, run_id: str, on_event: OnEvent) -> pb.Run:
        if self._shape == "stream":
            try:
                return await self._turns.pop(run_id).follow(on_event)
            except GRPCError as exc:  # a failed run ends its stream with its error
                return pb.Run(run_id=run_id, state=pb.RunState.FAILED,
                              final_text=f"{exc.status.name}: {exc.message}")
        request = pb.WatchRunRequest(run_id=run_id, after_seq=-1, batch=self._batch)
        async for response in self._gateway.watch_run(request):
            for event in response.events if self._batch else [response.event]:
                if event is not None:
                    await on_event(event)
        return (await self._gateway.get_run(pb.GetRunRequest(run_id=run_id))).run or pb.Run()

    async def decide_approval(self, approval_id: str) -> None:
        stream = self._deciding.pop(approval_id, None)
        if stream is not None:
            await stream.send_message(pb.RunStreamRequest(approval=pb.InlineApprovalDecision(
                approval_id=approval_id, decision=pb.ApprovalDecision.APPROVE,
                scope=pb.ApprovalScope.ONCE, reason="bench")))
            return
        await self._approvals.decide_approval(pb.DecideApprovalRequest(
            approval_id=approval_id, decision=pb.ApprovalDecision.APPROVE,
            scope=pb.ApprovalScope.ONCE, reason="bench"))

    async def aclose(self) -> None:
        self._channel.close()


class HttpDriver:
    """The workload over HTTP/1.1 keep-alive: JSON calls, the tape as SSE.

    A turn is one ``POST /v1/runs:stream`` (RunStream over HTTP, as the web console
    sends a message: the body is RunStream's first message with ``complete``, the
    answer the run's tape as SSE, one frame per event), or with ``--rpc
    create-watch-get`` ``POST /v1/runs`` + ``GET /v1/runs/{id}/events`` + ``GET
    /v1/runs/{id}``, the same shapes the gRPC and in-process drivers use.
    """

    def __init__(self, daemon: DaemonProcess, tool: str, concurrency: int,
                 shape: str = "stream", *, lean: bool = False) -> None:
        self._daemon = daemon
        self._tool = tool
        self._shape = shape
        self._turns: dict[str, StreamedTurn] = {}
        # --http-client lean: the same requests through bench/lean_http.py (no httpx)
        self._lean = LeanClient("127.0.0.1", daemon.http_port, CLIENT_HEADERS) if lean else None
        limits = httpx.Limits(max_connections=4 * concurrency + 4,
                              max_keepalive_connections=4 * concurrency + 4)
        self._http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{daemon.http_port}",
                                       headers=CLIENT_HEADERS, limits=limits, timeout=60.0)

    async def _post(self, path: str, body: dict[str, Any],
                    headers: dict[str, str] | None = None) -> dict[str, Any]:
        if self._lean is not None:
            return _json.decode(await self._lean.request("POST", path, body, headers))  # type: ignore[no-any-return]
        response = await self._http.post(path, json=body, headers=headers)
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    async def prepare_session(self, session_key: str, *, hitl: bool) -> None:
        if not hitl:
            return  # the turn's CreateRun creates the session in its accept commit
        resolved = await self._post("/v1/sessions:resolve", {"sessionKey": session_key})
        session_id = resolved["session"]["sessionId"]
        await self._post(f"/v1/sessions/{session_id}/tool-postures",
                         {"toolName": self._tool, "posture": "ask_each_time"})

    async def start_turn(self, session_key: str, text: str) -> str:
        body = {"v": 1, "sessionKey": session_key, "input": {"text": text}, "complete": True}
        if self._shape == "stream":
            turn = StreamedTurn(self._run_stream({**body, "batch": True}))
            run_id = await turn.start()
            self._turns[run_id] = turn
            return run_id
        created = await self._post("/v1/runs", body)
        return str(created["run"]["runId"])

    async def _run_stream(self, body: dict[str, Any]) -> AsyncIterator[pb.RunStreamResponse]:
        if self._lean is not None:
            async for event, data in self._lean.sse("POST", "/v1/runs:stream", body):
                if event == "error":  # a failed run ends its stream with its error
                    raise RuntimeError(data.decode())
                yield decode_message(pb.RunStreamResponse, _json.decode(data))
            return
        async with httpx_sse.aconnect_sse(self._http, "POST", "/v1/runs:stream",
                                          json=body) as source:
            source.response.raise_for_status()
            async for sse in source.aiter_sse():
                if sse.event == "error":  # a failed run ends its stream with its error
                    raise RuntimeError(sse.data)
                yield decode_message(pb.RunStreamResponse, _json.decode(sse.data))

    async def wait(self, run_id: str, on_event: OnEvent) -> pb.Run:
        if self._shape == "stream":
            try:
                return await self._turns.pop(run_id).follow(on_event)
            except RuntimeError as exc:
                return pb.Run(run_id=run_id, state=pb.RunState.FAILED, final_text=str(exc))
        async with httpx_sse.aconnect_sse(self._http, "GET", f"/v1/runs/{run_id}/events") as source:
            source.response.raise_for_status()
            async for sse in source.aiter_sse():
                response = decode_message(pb.WatchRunResponse, _json.decode(sse.data))
                if response.event is not None:
                    await on_event(response.event)
        got = await self._http.get(f"/v1/runs/{run_id}")
        got.raise_for_status()
        return decode_message(pb.GetRunResponse, got.json()).run or pb.Run()

    async def decide_approval(self, approval_id: str) -> None:
        await self._post(f"/v1/approvals/{approval_id}:decide",
                         {"decision": "approve", "scope": "once", "reason": "bench"},
                         headers=APPROVER_HEADERS)

    async def aclose(self) -> None:
        if self._lean is not None:
            await self._lean.aclose()
        await self._http.aclose()


class DaemonDriver:
    """A driver plus the daemon behind it: its pid and its in-process probe."""

    def __init__(self, daemon: DaemonProcess, client: GrpcDriver | GrpcioDriver | HttpDriver,
                 probe_path: str, args: argparse.Namespace,
                 journal_env: dict[str, str] | None = None) -> None:
        self.daemon = daemon
        self._journal_env = journal_env or {}
        self._args = args
        self.client = client
        self._probe_path = probe_path

    @property
    def pid(self) -> int:
        """The daemon's pid."""
        return self.daemon.pid

    def snapshot(self) -> probe.Snapshot:
        """:func:`bench.probe.snapshot`, taken inside the daemon."""
        return probe.remote_snapshot(self._probe_path)

    def storage_effective(self) -> dict[str, Any]:
        """What the daemon's store is configured to do (its defaults: LMDB, sync on)."""
        if self._journal_env.get("PALYRA_JOURNAL_BACKEND") == "postgres":
            return {"engine": "postgres", "synchronous_commit": True, "group_commit": True}
        return {"engine": "lmdb", "sync": True, "metasync": True, "group_commit": True}

    def settings(self) -> dict[str, str]:
        """The daemon settings the bench changed from their defaults."""
        return daemon_settings(self._args)


SAME_WORK_AS_INPROC = {"PALYRA_LEARNING_ENABLED": "false"}
"""Daemon settings that make it do the in-process graph's work (bench/inproc.py has no
task worker): post-run reflection is off. With it on (the daemon's default, every run
sampled) each run adds its reflection task (~3 commits and a re-read of the tape), which
is learning's cost, not the transport's; ``--daemon-reflection`` measures it."""


def daemon_settings(args: argparse.Namespace) -> dict[str, str]:
    """What the bench daemon runs with beyond its defaults (printed under its table)."""
    if getattr(args, "daemon_reflection", False):
        return {"learning.enabled": "true (daemon default; in process has no reflection)"}
    return {"learning.enabled": "false (as in process; --daemon-reflection turns it on)"}


def daemon_env(args: argparse.Namespace, probe_path: str) -> dict[str, str]:
    """The daemon's settings for the workload (same engine settings and the same background
    work as in process, see :data:`SAME_WORK_AS_INPROC`) and the probe."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    path = [str(_REPO / "bench" / "_site"), str(_REPO), env.get("PYTHONPATH", "")]
    env.update({
        "PALYRA_ADMIN_TOKEN": TOKEN,
        "PALYRA_ENGINE_MAX_TURNS": str(args.steps + 2),
        "PALYRA_ENGINE_APPROVAL_TIMEOUT_S": "300",
        "PALYRA_PROVIDER_SCRIPTED_TOOL": args.tool,
        "PALYRA_LOG_LEVEL": "warning",
        "PALYRA_BENCH_PROBE": probe_path,
        "PYTHONPATH": os.pathsep.join(p for p in path if p),
    })
    if not getattr(args, "daemon_reflection", False):
        env.update(SAME_WORK_AS_INPROC)
    return env


@contextlib.asynccontextmanager
async def open_driver(kind: str, data_dir: Path, args: argparse.Namespace,
                      journal_env: dict[str, str] | None = None) -> AsyncIterator[DaemonDriver]:
    """A fresh daemon on ``data_dir`` and a ``kind`` (grpc|http) driver for it; with
    ``journal_env`` (``PALYRA_JOURNAL_*`` settings) its journal is not the default LMDB."""
    # The probe is a Unix socket: its path must fit in sun_path (108 bytes), which a
    # data dir deep in a test's temporary tree does not; a short directory of its own does.
    probe_dir = tempfile.mkdtemp(prefix="palyra-probe-")
    probe_path = os.path.join(probe_dir, "probe")
    daemon = DaemonProcess(data_dir, env={**daemon_env(args, probe_path), **(journal_env or {})},
                           log_path=data_dir.parent / f"{data_dir.name}.daemon.log")
    await asyncio.to_thread(daemon.start)
    batch, shape = not getattr(args, "unbatched", False), getattr(args, "rpc", "stream")
    client: GrpcDriver | GrpcioDriver | HttpDriver
    if kind == "grpc" and getattr(args, "grpc_client", "grpclib") == "grpcio":
        client = GrpcioDriver(daemon.grpc_port, args.tool, CLIENT_HEADERS, APPROVER_HEADERS,
                              batch, shape)
    elif kind == "grpc":
        client = GrpcDriver(daemon, args.tool, batch, shape)
    else:
        client = HttpDriver(daemon, args.tool, args.concurrency, shape,
                            lean=getattr(args, "http_client", "httpx") == "lean")
    try:
        yield DaemonDriver(daemon, client, probe_path, args, journal_env)
    finally:
        await client.aclose()
        code = await asyncio.to_thread(daemon.stop)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(probe_path)
        with contextlib.suppress(OSError):
            os.rmdir(probe_dir)
        if code != 0:
            raise RuntimeError(f"daemon exited {code}: {daemon.log()[-2000:]}")
