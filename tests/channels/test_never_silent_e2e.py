"""A channel user is never left in silence, through ``palyra serve`` and a real receiver.

An unpaired sender's DM is answered with how to pair (once per sender per interval,
not once per message); a sender whose pairing an operator approves is told; a run
that parks on a tool approval tells its conversation who can decide it, and again
when it is decided. Every notice is a signed reply at the Standard Webhooks
receiver, delivered once.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from palyra.channels.notices import PAIRING_HINT
from palyra.testing.platforms import WebhookReceiver, webhook_headers
from palyra.testing.spawn import DaemonProcess, clean_env
from tests.channels.conftest import REPLY_SECRET, WEBHOOK_SECRET, admin_headers, delivery

pytestmark = pytest.mark.slow
CHANNEL = "webhook:hooks"
LOOP = ("@palyra Start from 0 and add 1 to the running total 1 times, one `add` tool call "
        "per step, then reply with the final result.")


def _config(path: Path, reply_url: str) -> Path:
    path.write_text("\n".join([
        "[channels.webhooks.hooks]",
        f'secrets = ["{WEBHOOK_SECRET}"]',
        f'reply_url = "{reply_url}"',
        f'reply_secret = "{REPLY_SECRET}"',
        f'[channels.policy."{CHANNEL}"]',
        'dm_policy = "pairing"',
        'mentions = ["@palyra"]',
        "[policy]",
        'tool_postures = {"add" = "ask_each_time"}',
    ]) + "\n")
    return path


def _wait(predicate: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def _texts(receiver: WebhookReceiver, conversation: str) -> list[str]:
    return [r["text"] for r in receiver.replies() if r["conversation_id"] == conversation]


def test_unpaired_paired_and_parked_users_are_told(tmp_path: Path) -> None:
    with WebhookReceiver(REPLY_SECRET) as receiver:
        config = _config(tmp_path / "palyra.toml", receiver.url + "/replies")
        with DaemonProcess(tmp_path / "data", env=clean_env(),
                           extra_args=("--config", str(config))) as daemon:
            base = f"http://127.0.0.1:{daemon.http_port}"
            headers = admin_headers(daemon.token)
            n = iter(range(1000))

            def post(text: str, *, sender: str, conversation: str, dm: bool) -> dict[str, object]:
                i = next(n)
                body = delivery(text, sender=sender, conversation=conversation, dm=dm,
                                message_id=f"m-{i}")
                answer = httpx.post(f"{base}/v1/ingress/webhooks/hooks", content=body,
                                    headers=webhook_headers(WEBHOOK_SECRET, f"msg_{i}", body))
                assert answer.status_code == 200, answer.text
                return answer.json()  # type: ignore[no-any-return]

            # Unpaired DMs: refused, and each sender told how to pair, once.
            for _ in range(3):
                refused = post("hello?", sender="eve", conversation="dm-eve", dm=True)
                assert refused["reason"] == "pairing_required"
            post("anyone?", sender="frank", conversation="dm-frank", dm=True)
            _wait(lambda: _texts(receiver, "dm-frank") == [PAIRING_HINT])
            time.sleep(0.5)
            assert _texts(receiver, "dm-eve") == [PAIRING_HINT]

            # Pairing: the operator's approval is told to the sender.
            code = httpx.post(f"{base}/v1/channels/{CHANNEL}/pairing-codes", headers=headers,
                              json={"ttlSeconds": 600}).json()["code"]["code"]
            post(f"pair {code}", sender="eve", conversation="dm-eve", dm=True)
            _wait(lambda: len(_texts(receiver, "dm-eve")) == 2)
            found = re.search(r"approval (\w+)", _texts(receiver, "dm-eve")[1])
            assert found, _texts(receiver, "dm-eve")
            decided = httpx.post(f"{base}/v1/approvals/{found.group(1)}:decide",
                                 headers=headers,
                                 json={"decision": "APPROVAL_DECISION_APPROVE",
                                       "scope": "APPROVAL_SCOPE_SESSION"})
            assert decided.status_code == 200, decided.text
            _wait(lambda: len(_texts(receiver, "dm-eve")) == 3)
            assert _texts(receiver, "dm-eve")[2].startswith("Your pairing request was approved")
            post("hello again", sender="eve", conversation="dm-eve", dm=True)
            _wait(lambda: len(_texts(receiver, "dm-eve")) == 4)
            assert "hello again" in _texts(receiver, "dm-eve")[3]

            # A run parked on a tool approval: the room is told, and told the outcome.
            post(LOOP, sender="gina", conversation="room", dm=False)
            _wait(lambda: len(_texts(receiver, "room")) == 1)
            pending = _texts(receiver, "room")[0]
            approval = re.search(r"approval (\w+)", pending)
            assert approval and "add" in pending and "palyra approvals approve" in pending
            decided = httpx.post(f"{base}/v1/approvals/{approval.group(1)}:decide",
                                 headers=headers, json={"decision": "APPROVAL_DECISION_APPROVE"})
            assert decided.status_code == 200, decided.text
            _wait(lambda: len(_texts(receiver, "room")) >= 3)
            told = _texts(receiver, "room")
            assert told[1] == f"The approval of add (approval {approval.group(1)}) was approved; continuing."
            assert "1" in told[2]
            time.sleep(0.5)
            assert receiver.duplicate_replies() == 0
