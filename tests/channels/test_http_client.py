"""The reply sinks' lean HTTP/1.1 transport, held to httpx's own transport on a real server.

A scripted server on loopback answers each request with raw bytes; the same requests go
through ``platform_client`` and through httpx's default transport (httpcore, the
oracle), and both must see the same statuses, headers, bodies and errors.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from palyra.channels.adapters import _http_client
from palyra.channels.adapters._http_client import LeanTransport, platform_client

Script = Callable[[bytes, int], bytes | None]
"""(request head and body, connection's request number) -> raw answer (None: hang up)."""


@asynccontextmanager
async def scripted_server(script: Script, *, close_after: int = 0
                          ) -> AsyncIterator[tuple[str, list[int]]]:
    """A loopback HTTP/1.1 server answering with ``script``; yields its base URL and the
    number of connections accepted so far (one list element per connection)."""
    connections: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(0)
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                answer = script(head + body, served)
                served += 1
                if answer is None:
                    return
                writer.write(answer)
                await writer.drain()
                if (close_after and served >= close_after) or b"connection: close" in answer:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", connections
    finally:
        server.close()


def _echo(request: bytes, n: int) -> bytes:
    body = b'{"ok":true,"n":%d,"len":%d}' % (n, len(request))
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-ratelimit-remaining: 4\r\n"
            b"content-length: %d\r\n\r\n" % len(body)) + body


def _chunked(request: bytes, n: int) -> bytes:
    return (b"HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")


def _until_close(request: bytes, n: int) -> bytes:
    return b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end"


def _limited(request: bytes, n: int) -> bytes:
    body = b'{"retry_after": 0.25}'
    return (b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(body)) + body


async def _both(url: str, send: Callable[[httpx.AsyncClient], object]
                ) -> tuple[httpx.Response, httpx.Response]:
    lean, oracle = platform_client(5.0), httpx.AsyncClient(timeout=5.0)
    try:
        got = await send(lean)  # type: ignore[misc]
        want = await send(oracle)  # type: ignore[misc]
    finally:
        await lean.aclose()
        await oracle.aclose()
    return got, want


def _gzipped(request: bytes, n: int) -> bytes:
    body = gzip.compress(b'{"ok":true}')
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
            b"content-length: %d\r\n\r\n" % len(body)) + body


@pytest.mark.parametrize("script", [_echo, _chunked, _until_close, _limited, _gzipped])
async def test_answers_match_httpx(script: Script) -> None:
    async with scripted_server(script) as (url, _):
        got, want = await _both(url, lambda c: c.post(
            url + "/api/chat.postMessage?x=1", json={"text": "hi ünïcode"},
            headers={"authorization": "Bearer t"}))
    assert got.status_code == want.status_code
    assert got.content == want.content
    assert got.text == want.text
    assert [(k, v) for k, v in got.headers.items() if k != "content-length"] == \
        [(k, v) for k, v in want.headers.items() if k != "content-length"]
    assert got.is_error == want.is_error
    assert got.is_closed and got.is_stream_consumed
    # The request an answer names (an error's message reads it) is the one httpx sent.
    assert (got.request.method, got.request.url, got.request.content) == \
        (want.request.method, want.request.url, want.request.content)
    assert got.request.headers.raw == want.request.headers.raw
    if want.is_error:
        with pytest.raises(httpx.HTTPStatusError) as wanted:
            want.raise_for_status()
        with pytest.raises(httpx.HTTPStatusError) as seen:
            got.raise_for_status()
        assert str(seen.value) == str(wanted.value)
        assert seen.value.request.url == want.request.url


@pytest.mark.parametrize("raw", [
    b'{"ok":true,"result":{"message_id":7,"text":"h\\u00e9 \xc3\xbc"}}',  # msgspec reads these
    b'[1, 2.5, null, "x"]', b'{"a":1,"a":2}', b'{"n":123456789012345678901234567890}',
    b'{"x":NaN}', b'\xef\xbb\xbf{"ok":true}', b'{"s":"\\ud800"}', b'{"f":1e400}',  # only json
    "{\"ok\":true}".encode("utf-16"),
], ids=["object", "array", "duplicate", "bigint", "nan", "bom", "surrogate", "inf", "utf16"])
async def test_an_answers_json_is_httpxs(raw: bytes) -> None:
    def answer(request: bytes, n: int) -> bytes:
        return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n" % len(raw)) + raw

    async with scripted_server(answer) as (url, _):
        got, want = await _both(url, lambda c: c.post(url + "/sendMessage", json={"a": 1}))
    expected = want.json()
    seen = got.json()
    assert repr(seen) == repr(expected)  # repr: NaN is not equal to itself
    assert got.json(parse_float=str) == want.json(parse_float=str)  # options: httpx's own
    assert got.headers.raw == [(b"content-type", b"application/json"),
                               (b"content-length", str(len(raw)).encode())]


@pytest.mark.parametrize("body", [{"content": b"raw body"}, {"json": {"text": "hi ünïcode"}},
                                  {}], ids=["content", "json", "empty"])
async def test_the_request_on_the_wire_is_httpxs(body: dict[str, Any]) -> None:
    seen: list[bytes] = []

    def record(request: bytes, n: int) -> bytes:
        seen.append(request)
        return _echo(request, n)

    async with scripted_server(record) as (url, _):
        got, want = await _both(url, lambda c: c.post(
            url + "/hook/a%20b?q=1&r=%C3%A9", headers={"webhook-id": "msg_1",
                                                       "User-Agent": "palyra"}, **body))
    assert len(seen) == 2
    assert seen[0] == seen[1]  # method, target, headers (Host, length, ...) and body
    assert got.request.url == want.request.url
    assert got.request.content == want.request.content


@pytest.mark.parametrize("path", [
    "/webhooks/1100000000000000/aW50ZXJhY3Rpb246MTAwOmFi_c-d~e.f",  # split: a Discord reply's
    "/channels/1000000000000001/messages", "/", "/a/b/", "/v1.2/x..y",    # split
    "/.well-known/x", "/a/./b", "/a/../b", "/a//b", "/a%2Fb", "/ünï", "/a b", "/a?x=/y",
    "/a#frag", "/a/b;c", "/a:b", "/a+b=", "",                             # parsed whole
])
async def test_a_reply_url_goes_on_the_wire_as_httpx_sends_it(path: str) -> None:
    seen: list[bytes] = []

    def record(request: bytes, n: int) -> bytes:
        seen.append(request)
        return _limited(request, n)  # an error: its message reads the request's URL

    async with scripted_server(record) as (url, _):
        host = url.replace("127.0.0.1", "LocalHost")  # httpx lowercases the host
        got, want = await _both(url, lambda c: c.post(host + path, json={"content": "hi"}))
    assert len(seen) == 2
    assert seen[0] == seen[1]
    assert got.request.url == want.request.url
    with pytest.raises(httpx.HTTPStatusError) as wanted:
        want.raise_for_status()
    with pytest.raises(httpx.HTTPStatusError) as raised:
        got.raise_for_status()
    assert str(raised.value) == str(wanted.value)


def test_only_a_plain_path_is_split_from_its_url() -> None:
    client = platform_client(5.0)
    assert isinstance(client, _http_client.PlatformClient)
    base = "http://discord.test:8080"
    for n in range(3):
        url = f"{base}/webhooks/1/token-{n}"
        origin, netloc, target, kept = client._target(url)
        assert (origin, netloc, target, kept) == ((b"http", "discord.test", 8080),
                                                  b"discord.test:8080",
                                                  f"/webhooks/1/token-{n}".encode(), url)
    assert list(client._urls) == [base]  # the origin parsed once, no reply URL kept
    for url in (f"{base}/a/../b", f"{base}/a?x", "http://u:p@discord.test/a",
                "http://discord.test?x/a", f"{base}/%7E"):
        assert isinstance(client._target(url)[3], httpx.URL)


async def test_a_timeout_given_with_one_request_bounds_that_request() -> None:
    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read()
        finally:
            writer.close()

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/getUpdates"
    client = platform_client(30.0)
    try:
        began = asyncio.get_running_loop().time()
        with pytest.raises(httpx.ReadTimeout):
            await client.post(url, json={}, timeout=0.2)  # Telegram's long poll sets its own
        assert asyncio.get_running_loop().time() - began < 10
    finally:
        await client.aclose()
        server.close()


async def test_an_answered_request_leaves_no_deadline_behind() -> None:
    """The read deadline ends with its answer: a connection kept alive past it is not
    failed by a timer left running, and is used again."""
    async with scripted_server(_echo) as (url, connections):
        client = platform_client(0.1)
        try:
            assert (await client.post(url + "/x", json={})).json()["ok"] is True
            await asyncio.sleep(0.3)  # past the first request's read deadline
            assert (await client.post(url + "/x", json={})).json()["ok"] is True
            assert len(connections) == 1
        finally:
            await client.aclose()


async def test_the_parsed_urls_kept_are_bounded() -> None:
    async with scripted_server(_echo) as (url, _):
        client = platform_client(5.0)
        try:
            for n in range(_http_client.URL_CACHE_SIZE + 20):
                await client.post(f"{url}/channels/{n}/messages", json={})
            assert isinstance(client, _http_client.PlatformClient)
            assert 0 < len(client._urls) <= _http_client.URL_CACHE_SIZE
        finally:
            await client.aclose()


async def test_keep_alive_reuses_one_connection_and_survives_a_server_close() -> None:
    async with scripted_server(_echo, close_after=3) as (url, connections):
        client = platform_client(5.0)
        try:
            for _ in range(3):
                assert (await client.post(url + "/x", json={})).json()["ok"] is True
            assert len(connections) == 1
            await asyncio.sleep(0.05)  # the server closed the idle connection meanwhile
            assert (await client.post(url + "/x", json={})).json()["n"] == 0
            assert len(connections) == 2
        finally:
            await client.aclose()


async def test_errors_are_httpxs() -> None:
    async with scripted_server(lambda request, n: None) as (url, _):
        for client in (platform_client(5.0), httpx.AsyncClient(timeout=5.0)):
            with pytest.raises(httpx.RemoteProtocolError):
                await client.post(url + "/x", json={})
            await client.aclose()

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read()  # until the client gives up and closes
        finally:
            writer.close()

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        for client in (platform_client(0.2), httpx.AsyncClient(timeout=0.2)):
            with pytest.raises(httpx.ReadTimeout):
                await client.post(f"http://127.0.0.1:{port}/x", json={})
            await client.aclose()
    finally:
        server.close()
    for client in (platform_client(1.0), httpx.AsyncClient(timeout=1.0)):
        with pytest.raises(httpx.ConnectError):
            await client.post(f"http://127.0.0.1:{port}/x", json={})  # nobody listens now
        await client.aclose()


async def test_a_huge_answer_is_refused_without_holding_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http_client, "MAX_BODY_BYTES", 1000)

    def huge(request: bytes, n: int) -> bytes:
        return b"HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n" + b"x" * 5000

    async with scripted_server(huge) as (url, _):
        client = httpx.AsyncClient(timeout=5.0, transport=LeanTransport())
        with pytest.raises(httpx.RemoteProtocolError, match="exceeds 1000 bytes"):
            await client.post(url + "/x", json={})
        await client.aclose()
