"""Per-principal tokens: the principal is the token's, not whatever the client claims (issue 12, 4).

Against a real daemon: an operator issues a token bound to ``user:alice`` with the
CLI; requests with it act as alice (the principal header may be left out), a
header naming anyone else is refused, only the secret's hash is stored, and a
revoked or expired token is refused. The admin token still works.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow
DEVICE = {"x-palyra-device-id": "01J00000000000000000000000"}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    env = clean_env()
    with DaemonProcess(tmp_path_factory.mktemp("tokens") / "data", env=env) as proc:
        yield proc


def _cli(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = clean_env()
    return subprocess.run([sys.executable, "-m", "palyra.cli.main", *args, "--data-dir",
                           str(daemon.data_dir)], capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def _headers(token: str, principal: str = "") -> dict[str, str]:
    out = {"authorization": f"Bearer {token}", **DEVICE}
    if principal:
        out["x-palyra-principal"] = principal
    return out


def test_a_bound_token_acts_as_its_principal_only(daemon: DaemonProcess) -> None:
    issued = _cli(daemon, "tokens", "issue", "user:alice", "--expires-in", "1h",
                  "--label", "alice's laptop")
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.splitlines()[0]
    assert token.startswith("plt_") and "acts as user:alice" in issued.stdout
    base = f"http://127.0.0.1:{daemon.http_port}"
    run = httpx.post(f"{base}/v1/runs", headers=_headers(token),
                     json={"input": {"text": "hi"}, "complete": True, "wait": True})
    assert run.status_code == 200, run.text
    assert run.json()["run"]["identity"]["principal"] == "user:alice"
    same = httpx.get(f"{base}/v1/sessions", headers=_headers(token, "user:alice"))
    assert same.status_code == 200
    spoof = httpx.get(f"{base}/v1/sessions", headers=_headers(token, "admin:bob"))
    assert spoof.status_code == 403 and spoof.json()["code"] == "PERMISSION_DENIED"
    assert "bound to 'user:alice'" in spoof.json()["message"]
    # A bound token is no operator: it cannot issue tokens of its own.
    more = httpx.post(f"{base}/v1/tokens", headers=_headers(token), json={"principal": "user:x"})
    assert more.status_code == 403
    # Only the secret's hash is stored: the secret is nowhere in the data dir.
    # plt_<token_id>_<secret>: the id is a ULID; the secret may itself hold "_".
    secret = token.split("_", 2)[2].encode()
    assert len(secret) >= 20
    for path in daemon.data_dir.rglob("*"):
        if path.is_file():
            assert secret not in path.read_bytes(), path
    listed = _cli(daemon, "tokens", "list")
    token_id = token.split("_")[1]
    assert token_id in listed.stdout and "user:alice" in listed.stdout
    revoked = _cli(daemon, "tokens", "revoke", token_id)
    assert revoked.returncode == 0, revoked.stderr
    after = httpx.get(f"{base}/v1/sessions", headers=_headers(token))
    assert after.status_code == 401 and after.json()["code"] == "UNAUTHENTICATED"
    admin = daemon.token
    still = httpx.get(f"{base}/v1/sessions", headers=_headers(admin, "admin:ops"))
    assert still.status_code == 200


def test_expiry_and_what_may_be_bound(daemon: DaemonProcess) -> None:
    base = f"http://127.0.0.1:{daemon.http_port}"
    admin = _headers(daemon.token, "admin:ops")
    operator = httpx.post(f"{base}/v1/tokens", headers=admin, json={"principal": "admin:eve"})
    assert operator.status_code == 400 and operator.json()["code"] == "INVALID_ARGUMENT"
    short = httpx.post(f"{base}/v1/tokens", headers=admin,
                       json={"principal": "user:carol", "ttlSeconds": 1}).json()
    assert httpx.get(f"{base}/v1/sessions", headers=_headers(short["token"])).status_code == 200
    time.sleep(1.2)
    expired = httpx.get(f"{base}/v1/sessions", headers=_headers(short["token"]))
    assert expired.status_code == 401
    forged = short["token"][:-2] + ("AA" if not short["token"].endswith("AA") else "BB")
    assert httpx.get(f"{base}/v1/sessions", headers=_headers(forged)).status_code == 401
