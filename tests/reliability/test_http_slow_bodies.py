"""Slow request bodies are answered 408 and closed (issue 35, item 7), against a real daemon.

With a short body deadline: connections that send their body a byte at a time (to a
route that reads it, to one that refuses the caller before reading, and to a platform
ingress) all get 408 or their early answer and are closed by the server, not held
open by the trickle; a body slower than the minimum rate is cut before the deadline;
and a normal request still works afterwards.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess, clean_env
from palyra.transport.http._limits import RATE_GRACE_S

pytestmark = pytest.mark.slow
TOKEN = "slow-bodies-token"
BODY_TIMEOUT_S = 8.0  # past RATE_GRACE_S, so the two bounds can be told apart
MIN_RATE = 100
AUTH = (f"authorization: Bearer {TOKEN}\r\nx-palyra-principal: user:slow\r\n"
        "x-palyra-device-id: 01J00000000000000000000000\r\n")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    env = clean_env(PALYRA_ADMIN_TOKEN=TOKEN, PALYRA_HTTP_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
                    PALYRA_HTTP_BODY_MIN_BYTES_PER_S=str(MIN_RATE))
    with DaemonProcess(tmp_path_factory.mktemp("slow") / "data", env=env) as proc:
        yield proc


class Trickler:
    """A socket that sends a head, then its body ``chunk`` bytes every ``gap_s``, and
    records what comes back and when the server closed it."""

    def __init__(self, port: int, head: str, length: int, gap_s: float, chunk: int = 1) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.sendall(f"{head}content-length: {length}\r\n\r\n".encode())
        self.answer = b""
        self.closed_after: float | None = None
        self._length, self._gap, self._started = length, gap_s, time.monotonic()
        self._chunk = chunk
        self._threads = [threading.Thread(target=self._send, daemon=True),
                         threading.Thread(target=self._read, daemon=True)]
        for thread in self._threads:
            thread.start()

    def _send(self) -> None:
        for _ in range(self._length // self._chunk):
            if self.closed_after is not None:
                return
            try:
                self.sock.send(b" " * self._chunk)
            except OSError:
                return
            time.sleep(self._gap)

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                self.closed_after = time.monotonic() - self._started
                return
            self.answer += data

    def wait(self, timeout_s: float) -> None:
        self._threads[1].join(timeout_s)
        self.sock.close()


def test_trickled_bodies_get_408_and_are_closed(daemon: DaemonProcess) -> None:
    port = daemon.http_port
    heads = {
        "reads the body": f"POST /v1/runs HTTP/1.1\r\nhost: x\r\n{AUTH}",
        "refuses first": "POST /v1/runs HTTP/1.1\r\nhost: x\r\n",  # no token: 401 at once
        "ingress": "POST /v1/ingress/webhooks/nope HTTP/1.1\r\nhost: x\r\n",
    }
    # 200 bytes/s: above the minimum rate, so only the deadline can stop them.
    slow = [(name, Trickler(port, head, 100_000, 0.1, chunk=20)) for name, head in heads.items()
            for _ in range(10)]
    for _name, trickler in slow:
        trickler.wait(BODY_TIMEOUT_S + 10)
    for name, trickler in slow:
        assert trickler.closed_after is not None, f"{name}: still open"
        assert trickler.closed_after < BODY_TIMEOUT_S + 3, (name, trickler.closed_after)
        status = trickler.answer.split(b" ", 2)[1] if trickler.answer else b""
        assert status in (b"408", b"401", b"404"), (name, trickler.answer[:200])
    read = [t for n, t in slow if n == "reads the body"]
    assert all(t.answer.startswith(b"HTTP/1.1 408") for t in read)
    assert all(t.closed_after is not None and t.closed_after >= BODY_TIMEOUT_S - 1 for t in read)
    assert b'"code":"REQUEST_TIMEOUT"' in slow[0][1].answer


def test_a_body_below_the_minimum_rate_is_cut_early(daemon: DaemonProcess) -> None:
    # 10 bytes/s against a 100 bytes/s floor: cut after the grace, before the deadline.
    with_long_deadline = Trickler(daemon.http_port, f"POST /v1/runs HTTP/1.1\r\nhost: x\r\n{AUTH}",
                                  10_000, 0.1)
    with_long_deadline.wait(RATE_GRACE_S + BODY_TIMEOUT_S + 5)
    assert with_long_deadline.closed_after is not None
    assert RATE_GRACE_S - 0.5 <= with_long_deadline.closed_after < BODY_TIMEOUT_S - 1
    assert with_long_deadline.answer.startswith(b"HTTP/1.1 408")
    ok = httpx.post(f"http://127.0.0.1:{daemon.http_port}/v1/runs", json={
        "input": {"text": "hi"}, "complete": True, "wait": True},
        headers={"authorization": f"Bearer {TOKEN}", "x-palyra-principal": "user:slow",
                 "x-palyra-device-id": "01J00000000000000000000000"})
    assert ok.status_code == 200, ok.text
