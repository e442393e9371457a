"""Three clients with one interface, so each conformance scenario is written once.

* ``grpc``: Python grpclib over the generated message types;
* ``http``: httpx against the spec's HTTP routes, SSE through httpx-sse;
* ``ts``:   the TypeScript client (connect-node, generated descriptors) under
  Node, driven over stdin/stdout by ``tests/conformance/ts/client.ts stdio``.

Requests and responses are proto3 JSON (``to_dict`` form) on every client, so a
scenario's assertions do not know which transport ran. Failures raise
:class:`CallFailed` with the stable ``x-palyra-error-code`` / body code.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Protocol

import httpx
import httpx_sse
from grpclib.client import Channel
from grpclib.exceptions import GRPCError
from palyra_gen.http_routes import ROUTES
from palyra_gen.palyra import v1

ROOT = Path(__file__).resolve().parents[2]
TS_CLIENT = ROOT / "tests" / "conformance" / "ts" / "client.ts"
KINDS = ("grpc", "http", "ts")
ADMIN_TOKEN = "conformance-admin-token"
CONNECTOR_TOKEN = "conformance-connector-token"


class CallFailed(Exception):
    """A call answered with an error: ``code`` is the stable palyra error code."""

    def __init__(self, code: str, message: str, status: str = "") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        # The transport's own status: the gRPC status number or the HTTP status code.
        self.status = status


@dataclasses.dataclass
class StreamResult:
    """What a (possibly interrupted) stream delivered."""

    responses: list[dict[str, Any]]
    ended: bool  # the server finished the stream (not cut by max_events/until)

    @property
    def events(self) -> list[dict[str, Any]]:
        """The TapeEvents (proto3 JSON) of a tape stream, batched (``events``) or not."""
        return [e for r in self.responses
                for e in ([r["event"]] if "event" in r else r.get("events", []))]


@dataclasses.dataclass(frozen=True)
class Identity:
    """Who a client calls as."""

    token: str
    principal: str
    device_id: str = "01J00000000000000000000000"

    def headers(self) -> dict[str, str]:
        headers = {"x-palyra-device-id": self.device_id}
        if self.principal:  # (grpclib refuses empty metadata values: omit instead)
            headers["x-palyra-principal"] = self.principal
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        return headers


def kind_of(event: dict[str, Any]) -> str:
    """The oneof member of a TapeEvent in snake_case (``tool_approval_request``)."""
    for key in event:
        if key not in ("runId", "tapeSeq", "position", "tsUnixMs", "sessionId"):
            return "".join(f"_{c.lower()}" if c.isupper() else c for c in key)
    return ""


def _merge(base: dict[str, str], overrides: dict[str, str] | None) -> dict[str, str]:
    merged = dict(base)
    for key, value in (overrides or {}).items():
        if value == "":
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def _stop(event: dict[str, Any] | None, until: tuple[str, ...]) -> bool:
    return event is not None and kind_of(event) in until


class Client(Protocol):
    """The interface every scenario uses."""

    name: str

    async def call(self, service: str, method: str, request: dict[str, Any] | None = None, *,
                   headers: dict[str, str] | None = None) -> dict[str, Any]: ...

    async def stream(self, service: str, method: str, request: dict[str, Any], *,
                     max_events: int | None = None, until: tuple[str, ...] = (),
                     limit_s: float = 30.0) -> StreamResult: ...

    async def run_stream(self, request: dict[str, Any], *, max_events: int | None = None,
                         until: tuple[str, ...] = (), limit_s: float = 30.0) -> StreamResult: ...

    async def aclose(self) -> None: ...


SERVICE_BASES = (v1.GatewayServiceBase, v1.ApprovalsServiceBase, v1.MemoryServiceBase,
                 v1.JournalServiceBase, v1.ChannelsServiceBase, v1.UsageServiceBase)
_HANDLERS = {
    path: handler
    for base in SERVICE_BASES
    for path, handler in base().__mapping__().items()  # type: ignore[attr-defined]
}


class GrpcClient:
    """grpclib over the generated betterproto2 messages."""

    name = "grpc"

    def __init__(self, port: int, identity: Identity) -> None:
        self._channel = Channel("127.0.0.1", port)
        self._headers = identity.headers()

    async def _open(self, service: str, method: str, headers: dict[str, str] | None) -> Any:
        handler = _HANDLERS[f"/palyra.v1.{service}/{method}"]
        return handler, self._channel.request(
            f"/palyra.v1.{service}/{method}", handler.cardinality, handler.request_type,
            handler.reply_type, metadata=_merge(self._headers, headers))

    @staticmethod
    def _failed(stream: Any, exc: GRPCError) -> CallFailed:
        trailers = stream.trailing_metadata or {}
        return CallFailed(str(trailers.get("x-palyra-error-code", exc.status.name)),
                          exc.message or "", f"grpc:{exc.status.value}")

    async def call(self, service: str, method: str, request: dict[str, Any] | None = None, *,
                   headers: dict[str, str] | None = None) -> dict[str, Any]:
        handler, opened = await self._open(service, method, headers)
        async with opened as stream:
            try:
                await stream.send_message(handler.request_type.from_dict(request or {}), end=True)
                reply = await stream.recv_message()
            except GRPCError as exc:
                raise self._failed(stream, exc) from None
        return reply.to_dict()  # type: ignore[no-any-return]

    async def _collect(self, service: str, method: str, requests: list[dict[str, Any]],
                       max_events: int | None, until: tuple[str, ...], limit_s: float) -> StreamResult:
        handler, opened = await self._open(service, method, None)
        responses: list[dict[str, Any]] = []
        ended = False
        async with asyncio.timeout(limit_s):
            async with opened as stream:
                try:
                    for i, request in enumerate(requests):
                        await stream.send_message(handler.request_type.from_dict(request),
                                                  end=i == len(requests) - 1)
                    async for reply in stream:
                        responses.append(reply.to_dict())
                        if (max_events and len(responses) >= max_events) or _stop(
                                responses[-1].get("event"), until):
                            await stream.cancel()
                            return StreamResult(responses, False)
                    ended = True
                except GRPCError as exc:
                    raise self._failed(stream, exc) from None
        return StreamResult(responses, ended)

    async def stream(self, service: str, method: str, request: dict[str, Any], *,
                     max_events: int | None = None, until: tuple[str, ...] = (),
                     limit_s: float = 30.0) -> StreamResult:
        return await self._collect(service, method, [request], max_events, until, limit_s)

    async def run_stream(self, request: dict[str, Any], *, max_events: int | None = None,
                         until: tuple[str, ...] = (), limit_s: float = 30.0) -> StreamResult:
        return await self._collect("GatewayService", "RunStream", [request], max_events, until,
                                   limit_s)

    async def aclose(self) -> None:
        self._channel.close()


_ROUTES = {(r.service.rsplit(".", 1)[-1], r.method): r for r in ROUTES}


class HttpClient:
    """httpx on the spec's HTTP routes; server streams as SSE."""

    name = "http"

    def __init__(self, port: int, identity: Identity) -> None:
        self._http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30.0)
        self._headers = identity.headers()

    def _request(self, service: str, method: str, request: dict[str, Any],
                 headers: dict[str, str] | None) -> tuple[str, str, dict[str, Any]]:
        route = _ROUTES[(service, method)]
        body = dict(request)
        path = route.path
        for name in re.findall(r"\{(\w+)\}", route.path):
            camel = "".join(w if i == 0 else w.title() for i, w in enumerate(name.split("_")))
            value = body.pop(name, body.pop(camel, ""))
            path = path.replace(f"{{{name}}}", str(value))
        kwargs: dict[str, Any] = {"headers": _merge(self._headers, headers)}
        if route.body == "*":
            kwargs["json"] = body
        else:
            kwargs["params"] = {k: str(v).lower() if isinstance(v, bool) else str(v)
                                for k, v in body.items()}
        return route.http_method, path, kwargs

    @staticmethod
    def _failed(response: httpx.Response) -> CallFailed:
        try:
            body = response.json()
        except ValueError:
            return CallFailed(f"HTTP_{response.status_code}", response.text)
        return CallFailed(body.get("code", f"HTTP_{response.status_code}"), body.get("message", ""),
                          f"http:{response.status_code}")

    async def call(self, service: str, method: str, request: dict[str, Any] | None = None, *,
                   headers: dict[str, str] | None = None) -> dict[str, Any]:
        verb, path, kwargs = self._request(service, method, request or {}, headers)
        response = await self._http.request(verb, path, **kwargs)
        if response.status_code != 200:
            raise self._failed(response)
        return response.json()  # type: ignore[no-any-return]

    async def stream(self, service: str, method: str, request: dict[str, Any], *,
                     max_events: int | None = None, until: tuple[str, ...] = (),
                     limit_s: float = 30.0) -> StreamResult:
        verb, path, kwargs = self._request(service, method, request, None)
        responses: list[dict[str, Any]] = []
        async with asyncio.timeout(limit_s):
            async with httpx_sse.aconnect_sse(self._http, verb, path, **kwargs) as source:
                if source.response.status_code != 200:
                    await source.response.aread()
                    raise self._failed(source.response)
                async for sse in source.aiter_sse():
                    data = json.loads(sse.data)
                    if sse.event == "error":
                        raise CallFailed(data["code"], data["message"])
                    if "event" in data:
                        assert sse.id == str(int(data["event"].get("tapeSeq", "0")))
                    responses.append(data)
                    if (max_events and len(responses) >= max_events) or _stop(data.get("event"), until):
                        return StreamResult(responses, False)
        return StreamResult(responses, True)

    async def run_stream(self, request: dict[str, Any], *, max_events: int | None = None,
                         until: tuple[str, ...] = (), limit_s: float = 30.0) -> StreamResult:
        return await self.stream("GatewayService", "RunStream", request, max_events=max_events,
                                 until=until, limit_s=limit_s)

    async def aclose(self) -> None:
        await self._http.aclose()


class TsClient:
    """The TypeScript client under Node, one long-lived process per client."""

    name = "ts"

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self._lock = asyncio.Lock()

    @classmethod
    async def start(cls, port: int, identity: Identity) -> TsClient:
        npx = shutil.which("npx")
        if npx is None:
            raise RuntimeError("npx not found: the TypeScript client needs Node 20")
        args = [npx, "--no-install", "tsx", str(TS_CLIENT), "stdio", "--port", str(port),
                "--principal", identity.principal, "--device-id", identity.device_id]
        if identity.token:
            args += ["--token", identity.token]
        proc = await asyncio.create_subprocess_exec(
            *args, cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "NO_COLOR": "1"}, limit=64 * 1024 * 1024)
        return cls(proc)

    async def _op(self, op: dict[str, Any], limit_s: float = 60.0) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        async with self._lock, asyncio.timeout(limit_s):
            self._proc.stdin.write(json.dumps(op).encode() + b"\n")
            await self._proc.stdin.drain()
            line = await self._proc.stdout.readline()
        if not line:
            raise RuntimeError("the TypeScript client exited")
        result: dict[str, Any] = json.loads(line)
        if "error" in result:
            error = result["error"]
            raise CallFailed(error.get("code") or f"GRPC_{error.get('grpc_code')}",
                             error.get("message", ""), f"grpc:{error.get('grpc_code', '')}")
        return result

    async def call(self, service: str, method: str, request: dict[str, Any] | None = None, *,
                   headers: dict[str, str] | None = None) -> dict[str, Any]:
        result = await self._op({"op": "call", "service": service, "method": method,
                                 "request": request or {}, "headers": headers or {}})
        return result["response"]  # type: ignore[no-any-return]

    async def stream(self, service: str, method: str, request: dict[str, Any], *,
                     max_events: int | None = None, until: tuple[str, ...] = (),
                     limit_s: float = 30.0) -> StreamResult:
        result = await self._op({"op": "stream", "service": service, "method": method,
                                 "request": request, "max_events": max_events or 10**9,
                                 "until": list(until), "timeout_ms": int(limit_s * 1000)},
                                limit_s + 30)
        return StreamResult(result["responses"], bool(result["ended"]))

    async def run_stream(self, request: dict[str, Any], *, max_events: int | None = None,
                         until: tuple[str, ...] = (), limit_s: float = 30.0) -> StreamResult:
        result = await self._op({"op": "bidi", "service": "GatewayService", "method": "RunStream",
                                 "requests": [request], "max_events": max_events or 10**9,
                                 "until": list(until), "timeout_ms": int(limit_s * 1000)},
                                limit_s + 30)
        return StreamResult(result["responses"], bool(result["ended"]))

    async def aclose(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            async with asyncio.timeout(10):
                await self._proc.wait()
        except TimeoutError:
            self._proc.kill()
            await self._proc.wait()


async def open_client(kind: str, *, grpc_port: int, http_port: int, identity: Identity) -> Client:
    """A connected client of ``kind``."""
    if kind == "grpc":
        return GrpcClient(grpc_port, identity)
    if kind == "http":
        return HttpClient(http_port, identity)
    if kind == "ts":
        return await TsClient.start(grpc_port, identity)
    raise ValueError(kind)
