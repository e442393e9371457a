"""The reply sinks' HTTP client: httpx's API over a lean keep-alive HTTP/1.1 transport.

Every reply a channel sends is one small request to the platform (``chat.postMessage``,
``sendMessage``, a signed webhook). Through httpx's default transport (httpcore over
anyio) each of those cost more of the daemon's event loop than admitting the message
that caused it: a pool walk, a ``select()`` per reuse to see whether the idle socket
was closed, and several layers of stream wrappers (``bench ingress``, py-spy). This
transport keeps httpx's request and response objects and its exceptions, which the
sinks and the outbox reason about, and does the exchange itself:

- one ``asyncio.Protocol`` per connection, the response parsed by ``httptools`` (the C
  parser uvicorn uses) as bytes arrive; the loop tells the protocol when a peer closes
  an idle connection, so picking one from the pool needs no syscall;
- idle connections kept per origin (scheme, host, port), at most :data:`MAX_IDLE` each;
- the errors httpcore raises for the same events: ``ConnectError``/``ConnectTimeout``
  before anything is sent, ``ReadTimeout`` and ``RemoteProtocolError`` once the request
  may have arrived (the outbox treats those as an unknown outcome);
- memory bounded whatever the peer sends: a response head over :data:`MAX_HEAD_BYTES`
  or a body over :data:`MAX_BODY_BYTES` is a protocol error and closes the connection.

HTTPS uses httpx's own default TLS context (its CA bundle), as the default transport did.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from collections.abc import Coroutine
from typing import Any

import httptools
import httpx
import msgspec

MAX_IDLE = 16
"""Idle keep-alive connections kept per origin."""
MAX_HEAD_BYTES = 64 * 1024
"""Most bytes of a response's status line and headers."""
MAX_BODY_BYTES = 8 * 1024 * 1024
"""Most bytes of a response body (platforms answer a send with a small JSON object)."""
_DEFAULT_PORTS = {b"http": 80, b"https": 443}

Origin = tuple[bytes, str, int]
"""Where a connection goes: scheme, host, port."""


def origin_of(url: httpx.URL) -> Origin:
    """``url``'s origin (``UnsupportedProtocol`` for a scheme other than HTTP(S))."""
    scheme = url.raw_scheme
    if scheme not in _DEFAULT_PORTS:
        raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
    return (scheme, url.host, url.port or _DEFAULT_PORTS[scheme])


class _Exchange(asyncio.Protocol):
    """One HTTP/1.1 connection: writes requests, parses one response at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[None] | None = None
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self._head_bytes = 0
        self._body_bytes = 0
        self.started = False  # a byte of the response arrived
        self.complete = False
        self.keep_alive = False
        self.error: Exception | None = None
        self._refusal = ""

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.started = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            # A callback's own refusal (too large) reaches us wrapped by the parser.
            self._fail(httpx.RemoteProtocolError(self._refusal or f"malformed response: {exc}"))

    def eof_received(self) -> bool | None:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete and self.status and self._until_close():
            self.on_message_complete()  # a body delimited by the close itself
        if not self.complete:
            self._fail(httpx.RemoteProtocolError(
                "Server disconnected without sending a response." if not self.started
                else "Server disconnected before the response was complete."))

    def _until_close(self) -> bool:
        names = {name.lower() for name, _ in self.headers}
        return b"content-length" not in names and b"transfer-encoding" not in names

    # -- httptools callbacks ----------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4
        if self._head_bytes > MAX_HEAD_BYTES:
            self._refusal = f"response head exceeds {MAX_HEAD_BYTES} bytes"
            raise _TooLarge(self._refusal)
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > MAX_BODY_BYTES:
            self._refusal = f"response body exceeds {MAX_BODY_BYTES} bytes"
            raise _TooLarge(self._refusal)
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self._parser.should_keep_alive()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # -- the exchange -----------------------------------------------------------------------
    def _fail(self, error: Exception) -> None:
        if self.error is None:
            self.error = error
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        if self.transport is not None:
            self.transport.close()
        self.closed = True

    def _time_out(self, waiter: asyncio.Future[None]) -> None:
        if self._waiter is waiter and not waiter.done():
            self._fail(httpx.ReadTimeout("timed out waiting for the response"))

    def reusable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    async def exchange(self, data: bytes, read_timeout: float | None
                       ) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
        """Send one request; its response's status, headers, body and whether the
        connection may be used again."""
        assert self.transport is not None
        self._reset()
        self._parser = httptools.HttpResponseParser(self)
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        self.transport.write(data)
        # The read deadline is one timer that fails this exchange, not an asyncio.timeout
        # around the wait: that cancels the task to end it, at a dozen Python calls a reply
        # (the context manager, the task look-ups, its rescheduling) where this takes two.
        timer = (loop.call_later(read_timeout, self._time_out, waiter)
                 if read_timeout is not None else None)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            self._waiter = None
        if self.error is not None:
            raise self.error
        keep = self.keep_alive and self.reusable()
        return self.status, self.headers, b"".join(self.body), keep


class _TooLarge(Exception):
    pass


class LeanTransport(httpx.AsyncBaseTransport):
    """An httpx transport speaking HTTP/1.1 itself (see the module docstring)."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl = ssl_context
        self._idle: dict[Origin, list[_Exchange]] = {}
        self._open: set[_Exchange] = set()

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context()
        return self._ssl

    async def _connect(self, origin: Origin, limit_s: float | None
                       ) -> _Exchange:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        tls: dict[str, Any] = ({"ssl": self._tls(), "server_hostname": host}
                               if scheme == b"https" else {})
        try:
            async with asyncio.timeout(limit_s):
                _, conn = await loop.create_connection(_Exchange, host, port, **tls)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(f"connecting to {host}:{port}: {exc}") from exc
        return conn

    def _pooled(self, origin: Origin) -> _Exchange | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if conn.reusable():
                return conn
        return None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        body = await request.aread()
        head = [request.method.encode(), b" ", url.raw_path, b" HTTP/1.1\r\n"]
        for name, value in request.headers.raw:
            head += (name, b": ", value, b"\r\n")
        chunked = request.headers.get("transfer-encoding", "").lower() == "chunked"
        if chunked:  # a body httpx could not size: one chunk and the terminator
            body = (f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n") if body \
                else b"0\r\n\r\n"
        data = b"".join(head) + b"\r\n" + body
        status, headers, content = await self.send_bytes(origin_of(url), data, timeouts)
        return httpx.Response(status, headers=headers, content=content,
                              extensions={"http_version": b"HTTP/1.1"}, request=request)

    async def send_bytes(self, origin: Origin, data: bytes,
                         timeouts: dict[str, float | None]
                         ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Write one request already framed as ``data`` to ``origin``; the response's
        status, headers and body."""
        conn = self._pooled(origin) or await self._connect(origin, timeouts.get("connect"))
        self._open.add(conn)
        try:
            status, headers, content, keep = await conn.exchange(data, timeouts.get("read"))
        except BaseException:
            conn._fail(httpx.RemoteProtocolError("request abandoned"))
            raise
        finally:
            self._open.discard(conn)
        idle = self._idle.setdefault(origin, [])
        if keep and len(idle) < MAX_IDLE:
            idle.append(conn)
        elif conn.transport is not None:
            conn.transport.close()
        return status, headers, content

    async def aclose(self) -> None:
        for conn in [*self._open, *(c for idle in self._idle.values() for c in idle)]:
            if conn.transport is not None:
                conn.transport.close()
        self._idle.clear()
        self._open.clear()


URL_CACHE_SIZE = 256
"""Parsed URLs a :class:`PlatformClient` keeps (a reply URL may name a channel: bounded)."""
_FAST_OPTIONS = frozenset({"content", "json", "headers", "timeout"})
_AUTHORITY = re.compile(r"[A-Za-z0-9.:\[\]-]+")
"""A host (a name, IPv4, or IPv6 in brackets) and port: no userinfo, query or fragment."""
_SEGMENT = r"[A-Za-z0-9_~-][A-Za-z0-9._~-]*"
_PLAIN_PATH = re.compile(rf"(?:{_SEGMENT}(?:/{_SEGMENT})*/?)?")
"""A path (after its first ``/``) httpx sends as written: unreserved characters only,
no segment that starts with a dot (so none is ``.`` or ``..``), nothing after it."""
_Target = tuple[Origin, bytes, bytes, "httpx.URL | str"]
"""A request's origin, ``Host`` value, request target, and its URL (parsed or not)."""


class PlatformClient(httpx.AsyncClient):
    """``httpx.AsyncClient`` whose plain sends skip the client's per-request machinery.

    A reply is ``post(url, json=… | content=…, headers=…[, timeout=…])``. Through
    ``AsyncClient.request`` that one call built and merged URL, headers, cookies and
    timeouts, walked the auth and redirect generators, and ran ``http.cookiejar`` over
    every response: more of the daemon's CPU per reply than the exchange itself
    (``bench ingress`` under a profiler). Such a request here is framed straight to
    bytes from the client's default headers and a cached parsed URL (or origin), in the order and
    spelling httpx would put on the wire, and handed to the transport; its answer is a
    :class:`_Answer`, an ``httpx.Response`` whose ``request`` is only built if read.
    Building httpx's request and response objects took 50-60 us a reply, more than
    framing and parsing the exchange. Platforms' cookies are not kept (no sink needs
    them); any other option (params, auth, cookies, redirects, streams, a ``str`` body)
    takes httpx's own path unchanged.
    """

    def __init__(self, timeout_s: float, transport: httpx.AsyncBaseTransport) -> None:
        super().__init__(timeout=timeout_s, transport=transport)
        self._lean = transport
        self._default_timeout = self.timeout.as_dict()
        self._urls: dict[str, httpx.URL] = {}

    def _url(self, url: httpx.URL | str) -> httpx.URL:
        if isinstance(url, httpx.URL):
            return url
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= URL_CACHE_SIZE:
                self._urls.clear()
            parsed = self._urls[url] = httpx.URL(url)
        return parsed

    def _target(self, url: httpx.URL | str) -> _Target:
        """Where a request goes: its origin, ``Host`` and request target (and its URL).

        A URL the cache does not hold whose path httpx would leave as it is (unreserved
        characters, no dot segments, no query) is split at its path, only its origin
        parsed (and cached): a Discord reply's URL names the interaction's token, one
        per message, so each missed the cache and was parsed whole, 25 us of the loop's
        CPU a reply (``httpx.URL`` looks at every character in Python).
        """
        if isinstance(url, str) and url not in self._urls:
            scheme, sep, rest = url.partition("://")
            authority, slash, path = rest.partition("/")
            if sep and slash and _AUTHORITY.fullmatch(authority) and _PLAIN_PATH.fullmatch(path):
                base = self._url(f"{scheme}://{authority}")
                return origin_of(base), base.netloc, b"/" + path.encode("ascii"), url
        parsed = self._url(url)
        return origin_of(parsed), parsed.netloc, parsed.raw_path, parsed

    # request and post hand back the coroutine that does the exchange (the framed one, or
    # httpx's), not an ``async def`` around it: a frame less resumed at each reply's wait.
    def request(
            self, method: str, url: httpx.URL | str, **kwargs: Any
    ) -> Coroutine[Any, Any, httpx.Response]:
        if not _FAST_OPTIONS.issuperset(kwargs) or self.is_closed:
            return super().request(method, url, **kwargs)
        timeout = (httpx.Timeout(kwargs["timeout"]).as_dict() if "timeout" in kwargs
                   else self._default_timeout)
        content, payload = kwargs.get("content"), kwargs.get("json")
        if isinstance(self._lean, LeanTransport) and (
                content is None or (isinstance(content, bytes) and payload is None)):
            return self._framed(method, self._target(url), kwargs.get("headers"),
                                content, payload, timeout)
        return self._built(method, url, kwargs, content, payload, timeout)

    async def _built(self, method: str, url: httpx.URL | str, kwargs: dict[str, Any],
                     content: Any, payload: Any, timeouts: dict[str, float | None]
                     ) -> httpx.Response:
        """A fast-option request the lean framing does not take (a ``str`` body, another
        transport): httpx's request object, handed to the transport directly."""
        headers = self.headers.copy()
        if kwargs.get("headers"):
            headers.update(kwargs["headers"])
        request = httpx.Request(
            method, self._url(url), headers=headers, content=content, json=payload,
            extensions={"timeout": timeouts})
        response = await self._lean.handle_async_request(request)
        response.request = request
        return response

    async def _framed(self, method: str, target: _Target, extra: Any, content: bytes | None,
                      payload: Any, timeouts: dict[str, float | None]) -> httpx.Response:
        assert isinstance(self._lean, LeanTransport)
        origin, netloc, raw_path, url = target
        # The header list httpx's client and Request build: the client's defaults less
        # those the call names, the call's own, then the body's length and type unless
        # named, with Host (and an empty POST's length) put first.
        given: list[tuple[bytes, bytes]] = []
        if isinstance(extra, dict):
            try:
                given = [(k.encode("ascii"), v.encode("ascii")) for k, v in extra.items()]
            except AttributeError:  # not str: httpx's own encoding (or its error)
                given = httpx.Headers(extra).raw
        elif extra:
            given = httpx.Headers(extra).raw
        named = {name.lower() for name, _ in given}
        headers = [(name, value) for name, value in self.headers.raw
                   if name.lower() not in named] + given
        if payload is not None or content is not None:
            body = content if content is not None else json.dumps(
                payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False
            ).encode("utf-8")
            if b"content-length" not in named and b"transfer-encoding" not in named:
                headers.append((b"Content-Length", str(len(body)).encode()))
                named.add(b"content-length")
            if payload is not None and b"content-type" not in named:
                headers.append((b"Content-Type", b"application/json"))
        else:
            body = b""
        auto = []
        if b"host" not in named:
            auto.append((b"Host", netloc))
        if (b"content-length" not in named and b"transfer-encoding" not in named
                and method in ("POST", "PUT", "PATCH")):
            auto.append((b"Content-Length", b"0"))
        head = [method.encode(), b" ", raw_path, b" HTTP/1.1\r\n"]
        for name, value in (auto + headers) if auto else headers:
            head += (name, b": ", value, b"\r\n")
        data = b"".join(head) + b"\r\n" + body
        status, answer_headers, answer = await self._lean.send_bytes(origin, data, timeouts)
        answer_names = {name.lower() for name, _ in answer_headers}
        if b"content-encoding" in answer_names:
            # A compressed answer: httpx's own response decodes it.
            request = httpx.Request(method, url, headers=auto + headers, content=body,
                                    extensions={"timeout": timeouts})
            return httpx.Response(status, headers=answer_headers, content=answer,
                                  extensions={"http_version": b"HTTP/1.1"}, request=request)
        if b"content-length" not in answer_names:  # as httpx.Response(content=...) adds it
            answer_headers.append((b"Content-Length", str(len(answer)).encode()))
        return _Answer(status, answer_headers, answer,
                       (method, url, auto + headers, body, timeouts))

    def post(
            self, url: httpx.URL | str, **kwargs: Any) -> Coroutine[Any, Any, httpx.Response]:
        return self.request("POST", url, **kwargs)


_RequestParts = tuple[str, httpx.URL | str, list[tuple[bytes, bytes]], bytes,
                      dict[str, float | None]]


class _Answer(httpx.Response):
    """A read, uncompressed response as ``httpx.Response(status, headers=…, content=…)``
    leaves it, set up without its stream and decoder machinery; its request is built from
    the bytes sent only when something reads it (an error's message, a test)."""

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], content: bytes,
                 sent: _RequestParts) -> None:
        self.status_code = status
        self._raw_headers = headers
        self._headers: httpx.Headers | None = None
        self._sent: _RequestParts | None = sent
        self._built: httpx.Request | None = None
        self.next_request = None
        self.extensions = {"http_version": b"HTTP/1.1"}
        self.history = []
        self.default_encoding = "utf-8"
        self.stream = httpx.ByteStream(content)
        self._content = content
        self.is_closed = True
        self.is_stream_consumed = True
        self._num_bytes_downloaded = len(content)

    # The headers become an ``httpx.Headers`` only when read (Discord's rate-limit buckets
    # do; Telegram's, Slack's and a webhook's sends never do): building one normalized
    # each name and value in Python, eight calls a reply.
    @property
    def headers(self) -> httpx.Headers:
        if self._headers is None:
            self._headers = httpx.Headers(self._raw_headers)
        return self._headers

    @headers.setter
    def headers(self, value: httpx.Headers) -> None:
        self._headers = value

    def json(self, **kwargs: Any) -> Any:
        # msgspec's decoder in one C call where ``json.loads`` takes five Python calls; what
        # it refuses and the standard library reads (NaN, a BOM, a lone surrogate, a float
        # out of range) and any option given go to httpx's own ``json``.
        if not kwargs:
            try:
                return msgspec.json.decode(self._content)
            except msgspec.MsgspecError:
                pass
        return super().json(**kwargs)

    @property
    def _request(self) -> httpx.Request | None:
        if self._built is None and self._sent is not None:
            method, url, headers, body, timeout = self._sent
            self._built = httpx.Request(method, url, headers=headers, content=body,
                                        extensions={"timeout": timeout})
            self._sent = None
        return self._built

    @_request.setter
    def _request(self, value: httpx.Request | None) -> None:
        self._built, self._sent = value, None

    def raise_for_status(self) -> httpx.Response:
        # httpx's reads the request before it looks at the status: only an error needs it.
        return self if self.is_success else super().raise_for_status()


def platform_client(timeout_s: float) -> httpx.AsyncClient:
    """The client a reply sink talks to its platform with (same API as ``httpx.AsyncClient``)."""
    return PlatformClient(timeout_s, LeanTransport())
