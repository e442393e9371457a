"""Start-up and client mistakes a new user makes get one actionable line each."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess

pytestmark = pytest.mark.slow
DEVICE = "01J00000000000000000000000"


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}


def _palyra(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "palyra.cli.main", *args], cwd=cwd,
                          capture_output=True, text=True, env=_env(), timeout=60, check=False)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with DaemonProcess(tmp_path_factory.mktemp("clear") / "data", env=_env()) as proc:
        yield proc


@pytest.mark.parametrize("flag", ["--grpc-port", "--http-port"])
def test_a_port_in_use_is_one_line_and_touches_no_data_dir(tmp_path: Path, flag: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        other = "--http-port" if flag == "--grpc-port" else "--grpc-port"
        done = _palyra("serve", "--data-dir", str(tmp_path / "data"), flag, str(port),
                       other, "0")
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"127.0.0.1:{port} is already in use" in lines[0] and flag in lines[0]
    assert not (tmp_path / "data").exists()  # no admin token generated first


def test_the_cli_outside_a_data_dir_says_where_it_looked(tmp_path: Path) -> None:
    done = _palyra("sessions", "list", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: no palyra-data here; pass --data-dir (the daemon's "
                                   "data dir, holding admin.token) or --token / "
                                   "$PALYRA_ADMIN_TOKEN")
    assert "UNAUTHENTICATED" not in done.stderr


def test_the_cli_pointed_at_another_daemon_says_so(daemon: DaemonProcess,
                                                   tmp_path: Path) -> None:
    other = tmp_path / "other-data"
    other.mkdir()
    (other / "admin.token").write_text("a-token-of-some-other-daemon\n")
    done = _palyra("sessions", "list", "--data-dir", str(other), "--address",
                   f"127.0.0.1:{daemon.grpc_port}")
    assert done.returncode == 2, done.stderr
    assert f"the daemon at 127.0.0.1:{daemon.grpc_port} does not know the token" in done.stderr
    assert f"it is not the daemon of {other}" in done.stderr


def test_a_revoked_token_is_told_it_was_revoked(daemon: DaemonProcess) -> None:
    issued = _palyra("tokens", "issue", "user:alice", "--data-dir", str(daemon.data_dir))
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.splitlines()[0]
    token_id = issued.stdout.splitlines()[1].split()[1]
    url = f"http://127.0.0.1:{daemon.http_port}/v1/sessions"
    headers = {"authorization": f"Bearer {token}", "x-palyra-device-id": DEVICE}
    assert httpx.get(url, headers=headers).status_code == 200
    revoked = _palyra("tokens", "revoke", token_id, "--data-dir", str(daemon.data_dir))
    assert revoked.returncode == 0, revoked.stderr
    answer = httpx.get(url, headers=headers)
    assert answer.status_code == 401 and answer.json()["code"] == "UNAUTHENTICATED"
    message = answer.json()["message"]
    assert f"token {token_id} was revoked" in message and "per-principal token" in message
    # A wrong secret for the same id learns nothing about the token's state.
    forged = token[: -4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    wrong = httpx.get(url, headers={**headers, "authorization": f"Bearer {forged}"})
    assert wrong.status_code == 401 and "revoked" not in wrong.json()["message"]
