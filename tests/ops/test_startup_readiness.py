"""Readiness while the daemon starts: the HTTP port answers 503 with the phase, never hangs.

Start-up is held for real: an MCP server configured with a command that never
answers keeps ``palyra serve`` waiting its ``connect_timeout_s`` before runs are
recovered. Meanwhile probes must get answers (``/healthz`` 200, ``/readyz`` 503
naming the phase, an API call 503 ``UNAVAILABLE``), and once start-up ends the
real gateway takes the same port over.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from palyra.daemon.listen import bind_listener, bound_port
from palyra.daemon.starting import HEAD_TIMEOUT_S, StartupResponder, starting_answer
from palyra.testing.spawn import clean_env

pytestmark = pytest.mark.slow

HOLD_S = 8.0
BIND_WITHIN_S = 60.0  # the interpreter's start and imports, on a loaded machine
USER = {"x-palyra-principal": "user:ops", "x-palyra-device-id": "01J00000000000000000000000"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_answer(base: str, path: str, deadline_s: float) -> httpx.Response:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return httpx.get(base + path, timeout=1.0)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def test_readyz_names_the_start_up_phase_until_the_gateway_serves(tmp_path: Path) -> None:
    config = tmp_path / "palyra.toml"
    # Reads its stdin and never answers: start-up waits for it, and it exits at EOF.
    config.write_text(f'[[tools.mcp]]\nname = "mute"\ncommand = "sh"\n'
                      f'args = ["-c", "cat > /dev/null"]\nconnect_timeout_s = {HOLD_S}\n')
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = clean_env(PALYRA_ADMIN_TOKEN="admin-token-of-the-startup-test")
    log = (tmp_path / "daemon.log").open("wb")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "palyra.cli.main", "serve", "--data-dir", str(tmp_path / "data"),
         "--grpc-port", "0", "--http-port", str(port), "--config", str(config)],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        ready = _wait_for_answer(base, "/readyz", deadline_s=BIND_WITHIN_S)
        phases = []
        while "connecting MCP servers" not in ready.json()["reason"]:
            assert ready.status_code == 503, ready.text
            assert ready.json()["ready"] is False
            phases.append(ready.json()["reason"])
            ready = httpx.get(base + "/readyz", timeout=1.0)
        assert ready.status_code == 503, ready.text
        assert all("the daemon is starting" in reason for reason in phases)
        health = httpx.get(base + "/healthz", timeout=1.0)
        assert health.status_code == 200  # alive, just not ready
        assert health.json()["ready"] is False
        refused = httpx.post(base + "/v1/runs", timeout=1.0, json={"input": {"text": "hi"}},
                             headers={**USER, "authorization": f"Bearer {env['PALYRA_ADMIN_TOKEN']}"})
        assert refused.status_code == 503, refused.text
        assert refused.json()["code"] == "UNAVAILABLE" and refused.json()["retryable"] is True
        assert refused.headers["retry-after"] == "1"
        held_from = time.monotonic()
        deadline = held_from + HOLD_S + 30
        while (answer := httpx.get(base + "/readyz", timeout=5.0)).status_code != 200:
            assert answer.status_code == 503, answer.text
            assert time.monotonic() < deadline, answer.text
            time.sleep(0.05)
        assert time.monotonic() - held_from > 0.5  # start-up really was held beyond the probes
        assert answer.json()["ready"] is True
        served = httpx.get(base + "/healthz", timeout=5.0).json()
        assert served["ready"] is True and "journalHead" in served  # the real gateway's answer
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
            log.close()
    assert daemon.returncode == 0, (tmp_path / "daemon.log").read_text()[-2000:]


def test_slow_and_garbled_clients_are_dropped_and_the_socket_is_handed_over() -> None:
    listener = bind_listener("127.0.0.1", 0)
    port = bound_port(listener)
    responder = StartupResponder(listener, "palyra", "1.2.3")
    responder.set_phase("recovering runs")
    responder.start()
    try:
        silent = socket.create_connection(("127.0.0.1", port))  # never sends its head
        garbled = socket.create_connection(("127.0.0.1", port))
        garbled.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
        began = time.monotonic()
        answer = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5.0)
        assert time.monotonic() - began < 2 * HEAD_TIMEOUT_S + 1.0
        assert answer.status_code == 503 and "recovering runs" in answer.json()["reason"]
        for dropped in (silent, garbled):
            dropped.settimeout(5.0)
            assert dropped.recv(4096) == b""  # closed by the responder, not left hanging
            dropped.close()
    finally:
        responder.stop()
    # Stopped: the listener is still open; a new connection waits for its next owner.
    waiting = socket.create_connection(("127.0.0.1", port), timeout=1.0)
    waiting.sendall(b"GET /readyz HTTP/1.1\r\nhost: x\r\n\r\n")
    waiting.settimeout(0.3)
    with pytest.raises(TimeoutError):
        waiting.recv(1)
    waiting.close()
    listener.close()


def test_only_healthz_is_200_while_starting_and_each_answer_names_the_phase() -> None:
    for path, status in (("/healthz", 200), ("/readyz", 503), ("/v1/runs", 503),
                         ("/metrics", 503)):
        code, headers, body = starting_answer(path, "recovering runs", "palyra", "1.2.3")
        assert code == status, path
        assert b"recovering runs" in body
        assert ("content-type", "application/json") in headers
