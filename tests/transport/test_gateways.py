"""Both gateways on loopback, over a stand-in facade.

These isolate what the transports alone must guarantee (auth before the app
is called, one error translation, no tracebacks on the wire, SSE framing and
cursors) with a facade that can raise arbitrary errors on demand. The real
daemon is exercised end to end in tests/conformance and test_serve.py.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from grpclib.client import Channel
from grpclib.const import Cardinality, Status
from grpclib.exceptions import GRPCError
from palyra_gen import http_routes
from palyra_gen.errors import ERROR_MAPPING
from palyra_gen.palyra import v1
from palyra_gen.services import RPCS

from palyra.config import GrpcConfig, HttpConfig
from palyra.core.errors import ErrorCode, NotFound, PalyraError
from palyra.daemon.listen import bind_listener, bound_port
from palyra.transport.auth import Authenticator, Caller
from palyra.transport.grpc import GrpcGateway
from palyra.transport.http import HttpGateway, create_http_app

HEADERS = {"authorization": "Bearer adm", "x-palyra-principal": "user:a",
           "x-palyra-device-id": "01J00000000000000000000000"}


class _EveryRpcUnimplemented:
    """Every RPC of the spec, answering UNIMPLEMENTED (the stand-in overrides a few)."""


def _unimplemented(name: str) -> Any:
    async def method(self: object, ctx: object, request: object) -> Any:
        raise PalyraError(f"{name} is not implemented", code=ErrorCode.UNIMPLEMENTED)
    return method


for _rpc in RPCS:
    setattr(_EveryRpcUnimplemented, _rpc.python_method, _unimplemented(_rpc.python_method))


class StandIn(_EveryRpcUnimplemented):
    """Answers a few RPCs; records the callers it saw."""

    def __init__(self) -> None:
        self.callers: list[Caller | None] = []
        self.live_closed = asyncio.Event()

    async def get_health(self, ctx: Caller | None, request: v1.GetHealthRequest) -> v1.GetHealthResponse:
        return v1.GetHealthResponse(service="palyra")

    async def get_run(self, ctx: Caller | None, request: v1.GetRunRequest) -> v1.GetRunResponse:
        self.callers.append(ctx)
        if request.run_id == "boom":
            raise RuntimeError("secret internal detail")
        raise NotFound(f"no run {request.run_id}")

    async def watch_run(self, ctx: Caller | None, request: v1.WatchRunRequest) -> AsyncIterator[v1.WatchRunResponse]:
        if request.run_id == "missing":
            raise NotFound("no such run")
        if request.run_id == "live":
            try:
                yield v1.WatchRunResponse(event=v1.TapeEvent(run_id="live", status=v1.RunStatus()))
                await asyncio.Event().wait()  # a live run that never ends
            finally:
                self.live_closed.set()
        for seq in range(request.after_seq + 1, 3):
            yield v1.WatchRunResponse(event=v1.TapeEvent(
                run_id=request.run_id, tape_seq=seq, model_token=v1.ModelToken(token=f"t{seq}")))

    async def run_stream(self, ctx: Caller | None, requests: AsyncIterator[v1.RunStreamRequest]) -> AsyncIterator[v1.RunStreamResponse]:
        seq = 0
        async for request in requests:
            yield v1.RunStreamResponse(event=v1.TapeEvent(
                run_id="R", tape_seq=seq, user_input=v1.UserInput(text=request.input.text)))
            seq += 1


@pytest.fixture
async def servers() -> AsyncIterator[tuple[StandIn, int, int]]:
    app = StandIn()
    auth = Authenticator(admin_token="adm", connector_tokens=[("con", "")])
    grpc_sock, http_sock = bind_listener("127.0.0.1", 0), bind_listener("127.0.0.1", 0)
    grpc = GrpcGateway(app, authenticator=auth, make_ctx=lambda c: c, config=GrpcConfig())
    http = HttpGateway(create_http_app(app, authenticator=auth, make_ctx=lambda c: c,
                                       config=HttpConfig(max_request_bytes=1000,
                                                         sse_keepalive_s=0.2)))
    await grpc.start(grpc_sock)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(http.serve(http_sock))
        yield app, bound_port(grpc_sock), bound_port(http_sock)
        http.close()
    await grpc.close()
    grpc_sock.close()
    http_sock.close()


async def test_grpc_errors_carry_status_message_and_code_trailer(servers: tuple[StandIn, int, int]) -> None:
    app, grpc_port, _ = servers
    async with Channel("127.0.0.1", grpc_port) as channel:
        async with channel.request("/palyra.v1.GatewayService/GetRun", Cardinality.UNARY_UNARY,
                                   v1.GetRunRequest, v1.GetRunResponse, metadata=HEADERS) as stream:
            await stream.send_message(v1.GetRunRequest(run_id="x"), end=True)
            with pytest.raises(GRPCError) as info:
                await stream.recv_message()
        assert (info.value.status, info.value.message) == (Status.NOT_FOUND, "no run x")
        assert stream.trailing_metadata is not None
        assert stream.trailing_metadata["x-palyra-error-code"] == "NOT_FOUND"
        stub = v1.GatewayServiceStub(channel, metadata=HEADERS)
        with pytest.raises(GRPCError) as info:
            await stub.get_run(v1.GetRunRequest(run_id="boom"))
        assert info.value.status is Status.INTERNAL
        assert "secret" not in (info.value.message or "")
        assert "Traceback" not in (info.value.message or "")
        caller = app.callers[0]
        assert caller is not None and caller.principal == "user:a"


async def test_grpc_auth_runs_before_the_app(servers: tuple[StandIn, int, int]) -> None:
    app, grpc_port, _ = servers
    async with Channel("127.0.0.1", grpc_port) as channel:
        stub = v1.GatewayServiceStub(channel)
        assert (await stub.get_health()).service == "palyra"
        cases = [({}, Status.UNAUTHENTICATED), ({**HEADERS, "authorization": "Bearer no"}, Status.UNAUTHENTICATED),
                 ({**HEADERS, "authorization": "Bearer con"}, Status.PERMISSION_DENIED)]
        for metadata, status in cases:
            with pytest.raises(GRPCError) as info:
                await stub.get_run(v1.GetRunRequest(run_id="x"), metadata=metadata)
            assert info.value.status is status
        assert app.callers == []


async def test_grpc_unimplemented_and_streams(servers: tuple[StandIn, int, int]) -> None:
    _, grpc_port, _ = servers
    async with Channel("127.0.0.1", grpc_port) as channel:
        stub = v1.GatewayServiceStub(channel, metadata=HEADERS)
        with pytest.raises(GRPCError) as info:
            await stub.list_agents(v1.ListAgentsRequest())
        assert info.value.status is Status.UNIMPLEMENTED
        seqs = [r.event.tape_seq async for r in stub.watch_run(v1.WatchRunRequest(run_id="r", after_seq=0)) if r.event]
        assert seqs == [1, 2]
        texts = [r.event.user_input.text async for r in stub.run_stream(
            [v1.RunStreamRequest(input=v1.MessageInput(text=t)) for t in ("a", "b")]) if r.event and r.event.user_input]
        assert texts == ["a", "b"]


async def test_http_errors_are_error_detail_bodies(servers: tuple[StandIn, int, int]) -> None:
    _, _, http_port = servers
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}") as client:
        cases: list[tuple[str, str, dict[str, Any], int, str]] = [
            ("GET", "/v1/runs/x", {}, 401, "UNAUTHENTICATED"),
            ("GET", "/v1/runs/x", {"headers": {**HEADERS, "authorization": "Bearer con"}}, 403, "PERMISSION_DENIED"),
            ("GET", "/v1/runs/x", {"headers": HEADERS}, 404, "NOT_FOUND"),
            ("GET", "/v1/runs/boom", {"headers": HEADERS}, 500, "INTERNAL"),
            ("POST", "/v1/runs", {"headers": HEADERS, "content": b"{"}, 400, "MALFORMED_REQUEST"),
            ("POST", "/v1/runs", {"headers": HEADERS, "content": b"x" * 1001}, 413, "PAYLOAD_TOO_LARGE"),
            ("GET", "/v1/agents", {"headers": HEADERS}, 501, "UNIMPLEMENTED"),
            ("GET", "/v1/nowhere", {"headers": HEADERS}, 404, "NOT_FOUND"),
            ("PUT", "/v1/nowhere", {"headers": HEADERS}, 404, "NOT_FOUND"),
            ("TRACE", "/v1/nowhere", {"headers": HEADERS}, 404, "NOT_FOUND"),
            ("DELETE", "/v1/runs", {"headers": HEADERS}, 405, "METHOD_NOT_ALLOWED"),
            ("TRACE", "/v1/runs", {}, 405, "METHOD_NOT_ALLOWED"),
            ("POST", "/schema/openapi.json", {}, 405, "METHOD_NOT_ALLOWED"),
        ]
        for method, path, kwargs, status, code in cases:
            response = await client.request(method, path, **kwargs)
            assert response.status_code == status, (path, response.text)
            body = response.json()
            assert body["code"] == code and set(body) == {"code", "message", "retryable", "details"}
            _assert_body_agrees_with_status(response)
            assert "secret" not in response.text and "Traceback" not in response.text
        health = await client.get("/healthz")
        assert health.json() == {"service": "palyra"}
        for headers in ({}, {**HEADERS, "authorization": "Bearer wrong"}):
            refused = (await client.get("/v1/runs/x", headers=headers)).json()["message"]
            assert "<data-dir>/admin.token" in refused and "PALYRA_ADMIN_TOKEN" in refused


def _assert_body_agrees_with_status(response: httpx.Response) -> None:
    """The error body's ``code`` maps (in the spec) to exactly the status sent."""
    body = response.json()
    mapping = ERROR_MAPPING[body["code"]]
    assert mapping.http_status == response.status_code, (
        response.request.method, response.request.url.path, response.status_code, body)
    assert body["retryable"] is bool(mapping.retryable)


def _concrete(template: str) -> str:
    return re.sub(r"\{[a-z_]+\}", "x1", template)


async def test_every_route_answers_a_wrong_method_with_a_consistent_405(
    servers: tuple[StandIn, int, int],
) -> None:
    _, _, http_port = servers
    by_path: dict[str, set[str]] = {}
    for r in http_routes.ROUTES:
        by_path.setdefault(_concrete(r.path), set()).add(r.http_method.upper())
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}", headers=HEADERS) as client:
        for path, methods in sorted(by_path.items()):
            for wrong in sorted({"GET", "POST", "PUT", "PATCH", "DELETE", "TRACE"} - methods):
                response = await client.request(wrong, path)
                assert response.status_code == 405, (wrong, path, response.text)
                assert response.json()["code"] == "METHOD_NOT_ALLOWED"
                assert response.headers["allow"] == ", ".join(sorted(methods)), (wrong, path)
                assert wrong in response.json()["message"] and path in response.json()["message"]
                _assert_body_agrees_with_status(response)
            unknown = await client.request(sorted(methods)[0], "/nope" + path)
            assert unknown.status_code == 404 and unknown.json()["code"] == "NOT_FOUND", path
            _assert_body_agrees_with_status(unknown)


def _sse(text: str) -> list[dict[str, str]]:
    frames = []
    for block in text.strip().split("\n\n"):
        frame = {}
        for line in block.splitlines():
            key, _, value = line.partition(": ")
            frame[key] = value
        frames.append(frame)
    return frames


async def test_http_sse_ids_and_last_event_id(servers: tuple[StandIn, int, int]) -> None:
    _, _, http_port = servers
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}", headers=HEADERS) as client:
        response = await client.get("/v1/runs/r/events")
        assert response.headers["content-type"].startswith("text/event-stream")
        frames = _sse(response.text)
        assert [(f["id"], f["event"]) for f in frames] == [("0", "model_token"), ("1", "model_token"), ("2", "model_token")]
        resumed = _sse((await client.get("/v1/runs/r/events", headers={"Last-Event-ID": "1"})).text)
        assert [f["id"] for f in resumed] == ["2"]
        missing = await client.get("/v1/runs/missing/events")
        assert missing.status_code == 404 and missing.json()["code"] == "NOT_FOUND"
        stream = _sse((await client.post("/v1/runs:stream", json={"input": {"text": "hi"}})).text)
        assert '"text":"hi"' in stream[0]["data"]


async def test_openapi_describes_the_spec_routes(servers: tuple[StandIn, int, int]) -> None:
    _, _, http_port = servers
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}") as client:
        doc = (await client.get("/schema/openapi.json")).json()
    assert doc["openapi"] == "3.2.0"
    for path, method in [("/healthz", "get"), ("/v1/runs", "post"), ("/v1/runs/{run_id}/events", "get"),
                         ("/v1/approvals/{approval_id}:decide", "post"), ("/v1/journal/head", "get")]:
        assert method in doc["paths"][path], path
    assert doc["paths"]["/healthz"]["get"]["security"] == []
    assert "CreateRunRequest" in doc["components"]["schemas"]


async def test_http_sse_keepalive_and_disconnect_release_the_follow(
    servers: tuple[StandIn, int, int],
) -> None:
    app, _, http_port = servers
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}", headers=HEADERS) as client:
        async with client.stream("GET", "/v1/runs/live/events") as response:
            chunks = []
            async for chunk in response.aiter_text():
                chunks.append(chunk)
                if ": keepalive" in "".join(chunks):
                    break
        assert "event: status" in "".join(chunks)
    # The client went away: the server stops following within a moment.
    async with asyncio.timeout(5):
        await app.live_closed.wait()


def _awaiting(task: asyncio.Task[Any]) -> list[str]:
    """The qualified names of the coroutines a task's await chain runs through."""
    names, coro = [], task.get_coro()
    while coro is not None and hasattr(coro, "cr_code"):
        names.append(coro.cr_code.co_qualname)
        coro = coro.cr_await
    return names


async def test_an_sse_stream_resumes_without_the_front_in_its_chain(
    servers: tuple[StandIn, int, int],
) -> None:
    """The front hands the request's task the answering part's awaitable: a stream's
    every wake-up goes from uvicorn's ``run_asgi`` to the spec front, not through a
    coroutine of the front's own."""
    app, _, http_port = servers
    async with (asyncio.timeout(5),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}",
                                  headers=HEADERS) as client,
                client.stream("GET", "/v1/runs/live/events") as response):
        assert "event: status" in await anext(response.aiter_text())
        (chain,) = [chain for chain in map(_awaiting, asyncio.all_tasks())
                    if chain[:1] == ["RequestResponseCycle.run_asgi"]]
        assert chain[:3] == ["RequestResponseCycle.run_asgi", "SpecFront.serve",
                             "SseResponse.__call__"], chain
    async with asyncio.timeout(5):
        await app.live_closed.wait()
