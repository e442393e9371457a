"""Pairing through ``palyra serve``: codes, ``pair CODE`` opening an approval decided through
the normal approvals API, grants and the channel owner surviving restarts, revocation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess, clean_env
from tests.channels.conftest import admin_headers

pytestmark = pytest.mark.slow
CHANNEL = "slack:T0123"


def _route(base: str, token: str, text: str, sender: str, message_id: str) -> dict[str, Any]:
    answer = httpx.post(f"{base}/v1/channels/{CHANNEL}/messages:route", headers=admin_headers(token),
                        json={"message": {"text": text, "senderHandle": sender,
                                          "isDirectMessage": True,
                                          "adapterMessageId": message_id}}, timeout=40)
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def test_pairing_survives_restarts(tmp_path: Path) -> None:
    config = tmp_path / "palyra.toml"  # pairing needs a configured channel
    config.write_text(f'[channels.policy."{CHANNEL}"]\ndm_policy = "pairing"\n')
    daemon = DaemonProcess(tmp_path / "data", env=clean_env(),
                           extra_args=("--config", str(config)))
    with daemon:
        base, token = f"http://127.0.0.1:{daemon.http_port}", daemon.token
        headers = admin_headers(token)
        refused = _route(base, token, "hello", "U1", "m1")
        assert refused["decisionReason"] == "pairing_required" and not refused.get("runId")

        codes = [httpx.post(f"{base}/v1/channels/{CHANNEL}/pairing-codes", headers=headers,
                            json={"ttlSeconds": 600}) for _ in range(4)]
        assert [c.status_code for c in codes] == [200, 200, 200, 429]
        assert codes[3].json()["code"] == "RESOURCE_EXHAUSTED"
        code = codes[0].json()["code"]["code"]
        assert re.fullmatch(r"[0-9A-HJKMNP-TV-Z]{8}", code)
        user = {**headers, "x-palyra-principal": "user:mallory"}
        assert httpx.post(f"{base}/v1/channels/{CHANNEL}/pairing-codes", headers=user,
                          json={}).status_code == 403

        asked = _route(base, token, f"pair {code.lower()}", "U1", "m2")
        approval_id = re.search(r"approval (\w+)", asked["outputs"][0]["text"]).group(1)  # type: ignore[union-attr]
        listed = httpx.get(f"{base}/v1/approvals", headers=headers).json()["approvals"]
        mine = [a for a in listed if a["approvalId"] == approval_id]
        assert mine and mine[0]["prompt"]["subjectId"] == f"dm_pairing:{CHANNEL}:u1"
        assert mine[0]["prompt"]["riskLevel"] == "RISK_LEVEL_MEDIUM"
        assert mine[0]["prompt"]["options"] == ["allow_session", "allow_8h", "deny"]
        reused = _route(base, token, f"pair {code}", "U2", "m3")
        assert "unknown or expired" in reused["outputs"][0]["text"]

    with daemon:  # restart: the pending approval is decided after it
        base, token = f"http://127.0.0.1:{daemon.http_port}", daemon.token
        headers = admin_headers(token)
        decided = httpx.post(f"{base}/v1/approvals/{approval_id}:decide", headers=headers,
                             json={"decision": "APPROVAL_DECISION_APPROVE",
                                   "scope": "APPROVAL_SCOPE_TIMEBOXED", "ttlSeconds": 28800})
        assert decided.status_code == 200, decided.text
        assert decided.json()["approval"]["decidedBy"] == "admin:ops"
        grants = httpx.get(f"{base}/v1/channels/{CHANNEL}/grants", headers=headers).json()
        [grant] = grants["grants"]
        assert grant["sender"] == "u1" and grant["approvalId"] == approval_id
        assert int(grant["expiresAtUnixMs"]) - int(grant["grantedAtUnixMs"]) == 28800 * 1000
        answered = _route(base, token, "hello again", "U1", "m4")
        assert answered["decisionReason"] == "run_done" and answered["outputs"]

    with daemon:  # restart: the grant and the owner are still there
        base, token = f"http://127.0.0.1:{daemon.http_port}", daemon.token
        headers = admin_headers(token)
        assert _route(base, token, "still there?", "U1", "m5")["decisionReason"] == "run_done"
        reset = _route(base, token, "/reset", "U1", "m6")  # the owner may reset
        assert reset["outputs"][0]["text"] == "Started a new conversation."
        revoked = httpx.delete(f"{base}/v1/channels/{CHANNEL}/grants/{grant['grantId']}",
                               headers=headers)
        assert revoked.json() == {"revoked": True}
        after = _route(base, token, "and now?", "U1", "m7")
        assert after["decisionReason"] == "pairing_required"
