"""The ingress bench's lean sender against a real HTTP server on loopback.

The requests are read back by the standard library's HTTP server (its own parser), so a
malformed head or a wrong Content-Length shows up as a refused or garbled request; the
answers come from it too, so the sender's parsing of statuses, bodies and closes is
checked against a server that is not ours.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from bench.ingress_client import RawClient, encode_post


class _Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.connections = 0
        self.dropped = 0
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless asked otherwise
    server: _Recorder

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.server.seen.append({"path": self.path, "headers": dict(self.headers.items()),
                                 "lengths": self.headers.get_all("content-length"),
                                 "body": body})
        if self.path == "/drop" and self.server.dropped < 1:
            # Closed with no answer: the first /drop only (a retry is answered).
            self.server.dropped += 1
            self.close_connection = True
            return
        if self.path in ("/json", "/drop"):
            out, status = json.dumps({"accepted": True, "n": len(body)}).encode(), 200
        else:
            out, status = b"not json here", 503
        self.send_response(status)
        self.send_header("content-length", str(len(out)))
        if self.path == "/close":
            self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture
def server() -> Iterator[_Recorder]:
    httpd = _Recorder()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


async def test_posts_arrive_whole_and_answers_are_read(server: _Recorder) -> None:
    port = server.server_address[1]
    body = json.dumps({"text": "héllo " * 300}).encode()
    client = RawClient("127.0.0.1", port)
    try:
        status, answer = await client.post(encode_post(
            "127.0.0.1", "/json", {"webhook-id": "msg_1", "Content-Length": "1"}, body))
        assert (status, answer) == (200, {"accepted": True, "n": len(body)})
        [seen] = server.seen
        assert seen["body"] == body and seen["path"] == "/json"
        assert seen["headers"]["webhook-id"] == "msg_1"
        # The caller's own Content-Length is replaced by the body's.
        assert seen["lengths"] == [str(len(body))]
        status, text = await client.post(encode_post("127.0.0.1", "/text", {}, b"x"))
        assert (status, text) == (503, "not json here")
    finally:
        client.close()


async def test_connections_are_kept_alive_and_replaced_when_closed(server: _Recorder) -> None:
    port = server.server_address[1]
    client = RawClient("127.0.0.1", port)
    try:
        for i in range(5):
            assert (await client.post(encode_post("127.0.0.1", "/json", {}, b"%d" % i)))[0] == 200
        assert server.connections == 1
        assert (await client.post(encode_post("127.0.0.1", "/close", {}, b"")))[0] == 503
        assert (await client.post(encode_post("127.0.0.1", "/json", {}, b"again")))[0] == 200
        assert server.connections == 2
        assert [s["body"] for s in server.seen][-1] == b"again"
    finally:
        client.close()


async def test_a_kept_alive_connection_closed_as_it_is_reused_is_replaced(
    server: _Recorder,
) -> None:
    # The server takes the second request on a kept-alive connection and closes it
    # without a byte of an answer, as a server closing an idle connection at that
    # instant does: the request is sent again on a new connection, once.
    port = server.server_address[1]
    client = RawClient("127.0.0.1", port)
    try:
        assert (await client.post(encode_post("127.0.0.1", "/json", {}, b"first")))[0] == 200
        status, answer = await client.post(encode_post("127.0.0.1", "/drop", {}, b"again"))
        assert (status, answer) == (200, {"accepted": True, "n": 5})
        assert server.connections == 2
        assert [s["path"] for s in server.seen] == ["/json", "/drop", "/drop"]
    finally:
        client.close()


async def test_a_new_connection_closed_without_an_answer_fails_the_post(
    server: _Recorder,
) -> None:
    # Not kept alive from an earlier request: nothing says the server did not take it
    # up, so it is not sent again.
    port = server.server_address[1]
    client = RawClient("127.0.0.1", port)
    try:
        with pytest.raises(ConnectionError):
            await client.post(encode_post("127.0.0.1", "/drop", {}, b"once"))
        assert [s["path"] for s in server.seen] == ["/drop"]
    finally:
        client.close()
