"""The tool-loop workload over gRPC through grpcio's asyncio client (C-core HTTP/2).

``--grpc-client grpcio``: the same calls as :class:`bench.transports.GrpcDriver`
(RunStream in batch mode with ``complete``, HITL decisions sent up the turn's own
stream) and the same betterproto2 messages, encoded with :mod:`palyra.core.protobin`,
through generic ``channel.stream_stream(path, …)`` calls: no second generated stub
set. grpclib (pure-Python h2) costs the client about a third of the daemon's CPU per
step, and the client shares the daemon's two cores; a Python client that wants speed
would use grpcio, so this driver shows how much of the gRPC figures is the client.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import betterproto2
import grpc
from palyra_gen.palyra import v1 as pb

from bench.workload import OnEvent, StreamedTurn
from palyra.core.protobin import decode_binary, encode_binary

M = TypeVar("M", bound=betterproto2.Message)
_GATEWAY = "/palyra.v1.GatewayService/"
_APPROVALS = "/palyra.v1.ApprovalsService/"


def _decoder(cls: type[M]) -> Callable[[bytes], M]:
    return functools.partial(decode_binary, cls)


class GrpcioDriver:
    """The workload over one grpcio channel (one HTTP/2 connection, calls multiplexed)."""

    def __init__(self, port: int, tool: str, headers: dict[str, str],
                 approver_headers: dict[str, str], batch: bool = True,
                 shape: str = "stream") -> None:
        self._tool = tool
        self._batch = batch
        self._shape = shape
        self._hitl = False
        self._turns: dict[str, StreamedTurn] = {}
        # approval id -> the open RunStream call of its run (HITL: decided inline on it)
        self._deciding: dict[str, Any] = {}
        self._metadata = tuple(headers.items())
        self._approver = tuple(approver_headers.items())
        # No proxy look-up: the daemon is on loopback.
        self._channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}",
                                                  options=[("grpc.enable_http_proxy", 0)])
        self._run_stream_call = self._channel.stream_stream(
            _GATEWAY + "RunStream", request_serializer=encode_binary,
            response_deserializer=_decoder(pb.RunStreamResponse))
        self._watch_run = self._channel.unary_stream(
            _GATEWAY + "WatchRun", request_serializer=encode_binary,
            response_deserializer=_decoder(pb.WatchRunResponse))

    def _unary(self, path: str, response: type[M]) -> Any:
        return self._channel.unary_unary(path, request_serializer=encode_binary,
                                         response_deserializer=_decoder(response))

    async def prepare_session(self, session_key: str, *, hitl: bool) -> None:
        if not hitl:
            return  # the turn's CreateRun creates the session in its accept commit
        self._hitl = True
        resolved: pb.ResolveSessionResponse = await self._unary(
            _GATEWAY + "ResolveSession", pb.ResolveSessionResponse)(
            pb.ResolveSessionRequest(session_key=session_key), metadata=self._metadata)
        assert resolved.session is not None
        await self._unary(_GATEWAY + "SetToolPosture", pb.SetToolPostureResponse)(
            pb.SetToolPostureRequest(session_id=resolved.session.session_id,
                                     tool_name=self._tool,
                                     posture=pb.ToolPosture.ASK_EACH_TIME),
            metadata=self._metadata)

    async def start_turn(self, session_key: str, text: str) -> str:
        if self._shape == "stream":
            turn = StreamedTurn(self._run_stream(pb.RunStreamRequest(
                v=1, session_key=session_key, input=pb.MessageInput(text=text),
                batch=self._batch, complete=True)))
            run_id = await turn.start()
            self._turns[run_id] = turn
            return run_id
        created: pb.CreateRunResponse = await self._unary(
            _GATEWAY + "CreateRun", pb.CreateRunResponse)(pb.CreateRunRequest(
                v=1, session_key=session_key, input=pb.MessageInput(text=text),
                complete=True), metadata=self._metadata)
        return (created.run or pb.Run()).run_id

    async def _run_stream(self, request: pb.RunStreamRequest
                          ) -> AsyncIterator[pb.RunStreamResponse]:
        """RunStream: the request, then the client half-closes at once, or with approvals
        to decide (HITL) only when the tape ends, each decision going up the same stream."""
        call = self._run_stream_call(metadata=self._metadata)
        await call.write(request)
        if not self._hitl:
            await call.done_writing()
        while True:
            response = await call.read()
            if response is grpc.aio.EOF:
                break
            if self._hitl:
                for event in response.events or [response.event]:
                    if event is not None and event.tool_approval_request is not None:
                        self._deciding[event.tool_approval_request.approval_id] = call
            yield response
        if self._hitl:
            await call.done_writing()  # a no-op once the call has ended

    async def wait(self, run_id: str, on_event: OnEvent) -> pb.Run:
        if self._shape == "stream":
            try:
                return await self._turns.pop(run_id).follow(on_event)
            except grpc.aio.AioRpcError as exc:  # a failed run ends its stream with its error
                return pb.Run(run_id=run_id, state=pb.RunState.FAILED,
                              final_text=f"{exc.code().name}: {exc.details()}")
        request = pb.WatchRunRequest(run_id=run_id, after_seq=-1, batch=self._batch)
        async for response in self._watch_run(request, metadata=self._metadata):
            for event in response.events if self._batch else [response.event]:
                if event is not None:
                    await on_event(event)
        got: pb.GetRunResponse = await self._unary(_GATEWAY + "GetRun", pb.GetRunResponse)(
            pb.GetRunRequest(run_id=run_id), metadata=self._metadata)
        return got.run or pb.Run()

    async def decide_approval(self, approval_id: str) -> None:
        call = self._deciding.pop(approval_id, None)
        if call is not None:
            await call.write(pb.RunStreamRequest(approval=pb.InlineApprovalDecision(
                approval_id=approval_id, decision=pb.ApprovalDecision.APPROVE,
                scope=pb.ApprovalScope.ONCE, reason="bench")))
            return
        await self._unary(_APPROVALS + "DecideApproval", pb.DecideApprovalResponse)(
            pb.DecideApprovalRequest(approval_id=approval_id,
                                     decision=pb.ApprovalDecision.APPROVE,
                                     scope=pb.ApprovalScope.ONCE, reason="bench"),
            metadata=self._approver)

    async def aclose(self) -> None:
        await self._channel.close()
