"""HTTP request heads are bounded in size, count and time (issue 12, item 8).

Against a real daemon with short timeouts: one 8 MiB header, 20,000 headers and a
100 KB principal header are refused with 431 and an ``ErrorDetail`` body; twenty
connections each sending a never-finished 16 MiB head do not grow the daemon's
memory; slowloris sockets that never finish a head are closed; and the daemon
keeps serving.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow
TOKEN = "heads-token"
HEAD_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    env = clean_env(PALYRA_ADMIN_TOKEN=TOKEN,
                    PALYRA_HTTP_HEADER_TIMEOUT_S=str(HEAD_TIMEOUT_S))
    with DaemonProcess(tmp_path_factory.mktemp("heads") / "data", env=env) as proc:
        yield proc


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _raw(port: int, head: bytes) -> bytes:
    """Send ``head`` while reading the answer (the server may answer and close early)."""
    chunks: list[bytes] = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:

        def read() -> None:
            while True:
                try:
                    data = sock.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                chunks.append(data)

        reader = threading.Thread(target=read)
        reader.start()
        with contextlib.suppress(OSError):  # closed by the server before reading it all
            sock.sendall(head)
        reader.join(10)
    return b"".join(chunks)


def _status_and_code(answer: bytes) -> tuple[int, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)["code"] if body else ""


def test_big_and_many_headers_get_431(daemon: DaemonProcess) -> None:
    port = daemon.http_port
    request = b"GET /healthz HTTP/1.1\r\nhost: x\r\n"
    cases = {
        "one 8 MiB header": request + b"x-big: " + b"a" * (8 << 20) + b"\r\n\r\n",
        "20,000 headers": request + b"".join(b"x-%d: 1\r\n" % i for i in range(20_000))
        + b"\r\n",
        "a 100 KB principal": request + b"x-palyra-principal: user:" + b"p" * 100_000
        + b"\r\n\r\n",
        "150 small headers": request + b"".join(b"x-%d: 1\r\n" % i for i in range(150))
        + b"\r\n",
    }
    for name, head in cases.items():
        status, code = _status_and_code(_raw(port, head))
        assert (status, code) == (431, "HEADERS_TOO_LARGE"), name
    assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200


def test_unfinished_heads_neither_grow_memory_nor_hold_sockets(daemon: DaemonProcess) -> None:
    port = daemon.http_port
    before = _rss_mb(daemon.pid)
    hogs = []
    for _ in range(20):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):  # as much of a 16 MiB head as it takes
            sock.send(b"GET / HTTP/1.1\r\nx-huge: " + b"a" * (16 << 20))
        hogs.append(sock)
    slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
    for sock in slow:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ")  # and nothing more
    time.sleep(HEAD_TIMEOUT_S + 1.5)
    assert _rss_mb(daemon.pid) - before < 50
    closed = 0
    for sock in slow + hogs:
        sock.setblocking(True)
        sock.settimeout(2)
        try:
            data = sock.recv(65536)
            closed += 1 if data == b"" or data.startswith(b"HTTP/1.1 431") else 0
        except (ConnectionResetError, TimeoutError, OSError):
            closed += 1
        finally:
            sock.close()
    assert closed == len(slow) + len(hogs)
    assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200


def test_an_unfinished_head_past_the_limit_is_refused_not_buffered(daemon: DaemonProcess) -> None:
    # One header value that never ends: the parser would keep all of it until it did;
    # past the limit the daemon answers 431 at once instead of waiting for the head
    # timeout to close a socket it had been buffering all along.
    with socket.create_connection(("127.0.0.1", daemon.http_port), timeout=10) as sock:
        with contextlib.suppress(OSError):  # the server may close before taking it all
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-endless: " + b"a" * (1 << 20))
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                answer += chunk
    assert _status_and_code(answer) == (431, "HEADERS_TOO_LARGE")


def test_a_head_not_finished_in_time_is_closed_by_the_server(daemon: DaemonProcess) -> None:
    # The server closes it (the read sees the end), not the client's own read timeout.
    with socket.create_connection(("127.0.0.1", daemon.http_port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ")  # and nothing more
        sock.settimeout(HEAD_TIMEOUT_S + 3)
        assert sock.recv(65536) == b""


def test_pipelined_requests_are_each_answered(daemon: DaemonProcess) -> None:
    one = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", daemon.http_port), timeout=10) as sock:
        sock.sendall(one * 3)
        answer = b""
        while answer.count(b"HTTP/1.1 200") < 3:
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk


def test_an_http11_request_without_host_is_refused(daemon: DaemonProcess) -> None:
    answer = _raw(daemon.http_port, b"GET /healthz HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400")
    assert _raw(daemon.http_port, b"GET /healthz HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200")
