"""Garbage is refused with a clear 4xx (issue 35, item 9), through ``palyra serve``.

Pairing codes for channels that are not configured, a token for a principal holding
a newline, removing a binding that does not exist, and memory items with a scope that
does not exist or placed in another principal's session.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow
DEVICE = "01J00000000000000000000000"


def _headers(token: str, principal: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", "x-palyra-principal": principal,
            "x-palyra-device-id": DEVICE}


def test_garbage_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "palyra.toml"
    config.write_text('[channels.policy."webhook:ops"]\ndm_policy = "pairing"\n')
    with DaemonProcess(tmp_path / "data", env=clean_env(),
                       extra_args=("--config", str(config))) as daemon:
        base, token = f"http://127.0.0.1:{daemon.http_port}", daemon.token
        admin = _headers(token, "admin:ops")
        def events() -> int:
            head = httpx.get(f"{base}/v1/journal/head", headers=admin).json()
            return int(head.get("eventCount", 0))

        before = events()

        def refused(method: str, path: str, status: int, code: str,
                    headers: dict[str, str] = admin, **body: object) -> None:
            answer = httpx.request(method, base + path, headers=headers,
                                   json=body if method in ("POST", "PATCH") else None, timeout=30)
            assert answer.status_code == status, (path, body, answer.text)
            assert answer.json()["code"] == code, answer.text

        for channel in (":", "webhook:nope", "slack:nobody"):
            refused("POST", f"/v1/channels/{channel}/pairing-codes", 404, "NOT_FOUND")
        for principal in ("user:eve\nadmin:root", "user:a b", "user:\tx", "user:\x00",
                          "user:x\u2028y", "nocolon", ":x"):
            refused("POST", "/v1/tokens", 400, "INVALID_ARGUMENT", principal=principal)
        agent = httpx.post(f"{base}/v1/agents", headers=admin,
                           json={"agent": {"displayName": "a"}}).json()["agent"]["agentId"]
        refused("DELETE", f"/v1/agents/{agent}/bindings/01J00000000000000000000001", 404,
                "NOT_FOUND")
        for item in ({"text": "x", "scope": "galaxy"}, {"text": "x", "scope": "session"},
                     {"text": "x", "scope": "agent"}):
            refused("POST", "/v1/memory", 400, "INVALID_ARGUMENT", item=item)
        refused("POST", "/v1/memory", 404, "NOT_FOUND", item={"text": "x", "agentId": "nope"})
        assert events() == before + 1  # only the agent was created

        # Another principal's session is not a place to put memory.
        alice, mallory = _headers(token, "user:alice"), _headers(token, "user:mallory")
        run = httpx.post(f"{base}/v1/runs", headers=alice, json={
            "input": {"text": "hi"}, "complete": True, "wait": True}).json()["run"]
        refused("POST", "/v1/memory", 404, "NOT_FOUND", headers=mallory,
                item={"text": "planted", "sessionId": run["sessionId"]})
        refused("POST", "/v1/memory", 404, "NOT_FOUND", headers=mallory,
                item={"text": "planted", "sessionId": "01J00000000000000000000009"})

        # What is well-formed still works.
        ok = httpx.post(f"{base}/v1/memory", headers=alice,
                        json={"item": {"text": "mine", "sessionId": run["sessionId"],
                                       "scope": "session"}})
        assert ok.status_code == 200 and ok.json()["item"]["scope"] == "session", ok.text
        assert httpx.post(f"{base}/v1/channels/webhook:ops/pairing-codes", headers=admin,
                          json={}).status_code == 200
        assert httpx.post(f"{base}/v1/tokens", headers=admin,
                          json={"principal": "user:alice"}).status_code == 200
