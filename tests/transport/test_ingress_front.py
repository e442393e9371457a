"""The platform ingress, answered in front of Litestar, on a real listener on loopback.

What the catch-all route did for a platform's delivery still holds: the handler gets
the name, the lower-cased headers and the whole body; the header count, the body cap
and a handler's refusal are answered with the spec's ``ErrorDetail`` and mapped status;
every other request still reaches the spec's routes.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import pytest
from palyra_gen.errors import ERROR_MAPPING

from palyra.config import HttpConfig
from palyra.core.errors import ErrorCode, PalyraError
from palyra.daemon.listen import bind_listener, bound_port
from palyra.transport.auth import Authenticator
from palyra.transport.http import HttpGateway, create_http_app
from palyra.transport.http._asgi import BODY_DEADLINE, body_within_deadline
from tests.transport._served import served_by_gateway

LIMIT = 1000


class Platform:
    """An ingress handler that records what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str], bytes]] = []

    async def handle(self, name: str, headers: Mapping[str, str], body: bytes
                     ) -> dict[str, Any]:
        self.calls.append((name, dict(headers), body))
        if name == "refuse":
            raise PalyraError("bad signature", code=ErrorCode.SIGNATURE_INVALID)
        if name == "crash":
            raise RuntimeError("secret internal detail")
        return {"accepted": True, "size": len(body)}


@pytest.fixture
async def served() -> AsyncIterator[tuple[Platform, int]]:
    platform = Platform()
    app = create_http_app(object(), authenticator=Authenticator(admin_token="adm"),  # type: ignore[arg-type]
                          make_ctx=lambda c: c,
                          config=HttpConfig(max_request_bytes=LIMIT, max_headers=20),
                          ingress={"/v1/ingress/test": platform.handle})
    async with served_by_gateway(app) as (_http, port):
        yield platform, port


async def test_a_delivery_reaches_its_handler_with_name_headers_and_body(
        served: tuple[Platform, int]) -> None:
    platform, port = served
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        answer = await client.post("/v1/ingress/test/acme%20bot", content=b"x" * 600,
                                   headers={"X-Signature": "abc"})
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {"accepted": True, "size": 600}
    [(name, headers, body)] = platform.calls
    assert (name, body) == ("acme bot", b"x" * 600)
    assert headers["x-signature"] == "abc"


@pytest.mark.parametrize(("name", "status", "code"), [
    ("refuse", 401, "SIGNATURE_INVALID"),
    ("crash", 500, "INTERNAL"),
])
async def test_a_refusal_is_the_specs_error_body_and_status(
        served: tuple[Platform, int], name: str, status: int, code: str) -> None:
    _platform, port = served
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        answer = await client.post(f"/v1/ingress/test/{name}", content=b"{}")
    assert answer.status_code == status == ERROR_MAPPING[code].http_status
    assert answer.json()["code"] == code
    assert "secret" not in answer.text


async def test_limits_are_answered_before_the_handler(served: tuple[Platform, int]) -> None:
    platform, port = served
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        big = await client.post("/v1/ingress/test/acme", content=b"x" * (LIMIT + 1))
        many = await client.post("/v1/ingress/test/acme", content=b"{}",
                                 headers={f"x-h{i}": "v" for i in range(30)})
    assert (big.status_code, big.json()["code"]) == (413, "PAYLOAD_TOO_LARGE")
    assert (many.status_code, many.json()["code"]) == (431, "HEADERS_TOO_LARGE")
    assert platform.calls == []


async def test_a_declared_length_over_the_cap_is_refused_before_the_body_comes(
        served: tuple[Platform, int]) -> None:
    """Only the head is sent: the answer comes anyway, without waiting for the body."""
    platform, port = served
    loop = asyncio.get_running_loop()
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.setblocking(False)
        await loop.sock_sendall(conn, b"POST /v1/ingress/test/acme HTTP/1.1\r\nhost: x\r\n"
                                      b"content-length: 5000\r\n\r\n")
        head = await asyncio.wait_for(loop.sock_recv(conn, 4096), timeout=5)
    assert head.startswith(b"HTTP/1.1 413")
    assert platform.calls == []


async def test_other_requests_still_reach_the_spec_routes(served: tuple[Platform, int]) -> None:
    platform, port = served
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        nested = await client.post("/v1/ingress/test/a/b", content=b"{}")
        got = await client.get("/v1/ingress/test/acme")
        schema = await client.get("/schema/openapi.json")
    assert nested.status_code == 404 and nested.json()["code"] == "NOT_FOUND"
    assert got.status_code in (404, 405)
    assert schema.status_code == 200
    assert platform.calls == []


async def test_whitespace_around_a_header_value_is_not_part_of_it(
        served: tuple[Platform, int]) -> None:
    # RFC 9110 5.5: optional whitespace around a field value is not part of it (h11 dropped
    # it; llhttp keeps what trails), so a signature compared byte for byte still matches.
    platform, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/ingress/test/acme HTTP/1.1\r\nhost: x\r\n"
                 b"x-signature: \t abc \t \r\ncontent-length: 2\r\n\r\n{}")
    async with asyncio.timeout(10):
        answer = await reader.readuntil(b"\r\n\r\n")
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200")
    [(_name, headers, _body)] = platform.calls
    assert headers["x-signature"] == "abc"


def _late_body(delay_s: float) -> Any:
    async def receive() -> dict[str, Any]:
        await asyncio.sleep(delay_s)
        return {"type": "http.request", "body": b"late", "more_body": False}
    return receive


async def test_the_servers_body_deadline_serves_instead_of_the_apps() -> None:
    """A server that bounds the body in time itself (palyra's protocol, which says so in
    the scope) is the body's one deadline; the app arms its own only otherwise, or when
    the server's is later."""
    config = HttpConfig(body_timeout_s=0.05)
    with pytest.raises(PalyraError) as refused:
        await body_within_deadline(_late_body(0.2), {}, config)
    assert refused.value.code is ErrorCode.REQUEST_TIMEOUT
    bounded = {"extensions": {BODY_DEADLINE: {"timeout_s": 0.05}}}
    assert await body_within_deadline(_late_body(0.2), {}, config, bounded) == b"late"
    later = {"extensions": {BODY_DEADLINE: {"timeout_s": 10.0}}}
    with pytest.raises(PalyraError):
        await body_within_deadline(_late_body(0.2), {}, config, later)
    with pytest.raises(PalyraError):
        await body_within_deadline(_late_body(0.2), {}, config, {"extensions": {}})


async def test_palyras_server_tells_the_app_it_bounds_the_body() -> None:
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope.get("extensions"))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    sock = bind_listener("127.0.0.1", 0)
    http = HttpGateway(app, limits=HttpConfig(body_timeout_s=7.0))
    async with asyncio.TaskGroup() as tg:
        tg.create_task(http.serve(sock))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{bound_port(sock)}") as client:
            for _ in range(2):  # each request of a kept-alive connection
                assert (await client.post("/x", content=b"body")).status_code == 204
        http.close()
    sock.close()
    assert [extensions[BODY_DEADLINE] for extensions in seen] == [{"timeout_s": 7.0}] * 2
