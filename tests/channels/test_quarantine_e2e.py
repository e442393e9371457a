"""Per-channel slots, the retry queue and the quarantine, through ``palyra serve``.

A channel with one slot holds it for a run parked on an approval. A message to another
conversation of that channel finds the slot busy, goes back to the retry queue (a durable
task, so a restart in between changes nothing), and after its retries is quarantined:
an operator sees it with ``ListQuarantine``; nothing answers it, nothing answers twice.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from palyra.testing.platforms import WebhookReceiver, webhook_headers
from palyra.testing.spawn import DaemonProcess, clean_env
from tests.channels.conftest import (
    REPLY_SECRET,
    WEBHOOK_SECRET,
    admin_headers,
    delivery,
    write_config,
)

pytestmark = pytest.mark.slow

ONE_SLOT = """concurrency = 1
slot_wait_s = 0.3
max_retries = 2
[policy]
tool_postures = {"add" = "ask_each_time"}
"""
LOOP = ("@palyra Start from 0 and add 1 to the running total 2 times, one `add` tool call "
        "per step, then reply with the final result.")


def _wait(predicate: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def _post(base: str, body: bytes, msg_id: str) -> httpx.Response:
    answer = httpx.post(f"{base}/v1/ingress/webhooks/hooks", content=body,
                        headers=webhook_headers(WEBHOOK_SECRET, msg_id, body))
    assert answer.status_code == 200, answer.text
    return answer


def _quarantine(base: str, token: str) -> list[dict[str, object]]:
    got = httpx.get(f"{base}/v1/channels/webhook:hooks/quarantine",
                    headers=admin_headers(token))
    assert got.status_code == 200, got.text
    return list(got.json().get("messages", []))


def _pending_approvals(base: str, token: str) -> list[dict[str, object]]:
    got = httpx.get(f"{base}/v1/approvals", headers=admin_headers(token))
    assert got.status_code == 200, got.text
    return [a for a in got.json().get("approvals", []) if a.get("state") == "APPROVAL_STATE_PENDING"]


def _tasks(base: str, token: str, kind: str) -> list[dict[str, object]]:
    got = httpx.get(f"{base}/v1/tasks", headers=admin_headers(token))
    assert got.status_code == 200, got.text
    return [t for t in got.json().get("tasks", []) if t.get("kind") == kind]


def _reply_count(receiver: WebhookReceiver, conversation: str) -> int:
    return sum(1 for r in receiver.replies() if r["conversation_id"] == conversation)


def test_a_busy_channel_retries_then_quarantines_across_a_restart(tmp_path: Path) -> None:
    with WebhookReceiver(REPLY_SECRET) as receiver:
        config = write_config(tmp_path / "palyra.toml", reply_url=receiver.url + "/replies",
                              extra=ONE_SLOT)
        daemon = DaemonProcess(tmp_path / "data", env=clean_env(),
                               extra_args=("--config", str(config)))
        with daemon:
            base = f"http://127.0.0.1:{daemon.http_port}"
            # Conversation A takes the channel's only slot and parks on an approval.
            _post(base, delivery(LOOP, conversation="room-a", message_id="a-1"), "msg_a")
            _wait(lambda: bool(_pending_approvals(base, daemon.token)))
            [dispatch_a] = _tasks(base, daemon.token, "channel.dispatch")
            # A crash: A's dispatch is claimed again, finds its own run still waiting
            # (it is not given the message a second time) and holds the slot again.
            daemon.kill()
            daemon.start()
            base = f"http://127.0.0.1:{daemon.http_port}"
            _wait(lambda: any(t["taskId"] == dispatch_a["taskId"] and t["attempts"] == 2
                              and t["state"] == "BACKGROUND_TASK_STATE_RUNNING"
                              for t in _tasks(base, daemon.token, "channel.dispatch")))
            # Conversation B finds the slot busy, goes back to the (durable) retry queue
            # and, after its retries, to the quarantine.
            ask = delivery("@palyra are you there?", conversation="room-b", message_id="b-1")
            admitted = _post(base, ask, "msg_b").json()
            assert admitted["accepted"] is True
            _wait(lambda: bool(_quarantine(base, daemon.token)))
            [kept] = _quarantine(base, daemon.token)
            assert kept["reason"] == "channel_busy" and kept["conversationId"] == "room-b"
            assert kept["envelopeId"] == admitted["envelope_id"]
            assert "are you there" in str(kept["text"])
            [dispatch_b] = [t for t in _tasks(base, daemon.token, "channel.dispatch")
                            if t["taskId"] != dispatch_a["taskId"]]
            assert dispatch_b["attempts"] == 3  # max_retries = 2, then quarantined
            assert _reply_count(receiver, "room-b") == 0
            # A is answered once its calls are approved; its input was taped once.
            while not _reply_count(receiver, "room-a"):
                pending = _pending_approvals(base, daemon.token)
                for approval in pending:
                    decided = httpx.post(
                        f"{base}/v1/approvals/{approval['approvalId']}:decide",
                        headers=admin_headers(daemon.token),
                        json={"decision": "APPROVAL_DECISION_APPROVE"})
                    assert decided.status_code == 200, decided.text
                time.sleep(0.1)
            tape = httpx.get(f"{base}/v1/runs/{dispatch_a['taskId']}/tape",
                             headers=admin_headers(daemon.token), params={"limit": 1000})
            assert tape.status_code == 200, tape.text
            inputs = [e for e in tape.json()["events"] if "userInput" in e]
            assert len(inputs) == 1, inputs
            time.sleep(0.3)
            assert _reply_count(receiver, "room-a") == 1 and receiver.duplicate_replies() == 0
            # Operators only.
            other = httpx.get(f"{base}/v1/channels/webhook:hooks/quarantine", headers={
                **admin_headers(daemon.token), "x-palyra-principal": "user:alice"})
            assert other.status_code in (401, 403)
