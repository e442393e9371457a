"""Standard Webhooks end to end through ``palyra serve``: deliveries signed by the
``standardwebhooks`` package, replies verified by it at a local receiver, redeliveries
answered from the dedupe record, bad input refused with a stable code and nothing journaled."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from palyra.testing.platforms import WebhookReceiver, webhook_headers
from palyra.testing.spawn import DaemonProcess, clean_env
from tests.channels.conftest import (
    REPLY_SECRET,
    WEBHOOK_SECRET,
    delivery,
    journal_head,
    write_config,
)

pytestmark = pytest.mark.slow


def _wait(predicate: object, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def test_delivery_reply_redelivery_and_bad_input(tmp_path: Path) -> None:
    with WebhookReceiver(REPLY_SECRET) as receiver:
        config = write_config(tmp_path / "palyra.toml", reply_url=receiver.url + "/replies")
        with DaemonProcess(tmp_path / "data", env=clean_env(),
                           extra_args=("--config", str(config))) as daemon:
            url = f"http://127.0.0.1:{daemon.http_port}/v1/ingress/webhooks/hooks"
            body = delivery("@palyra please echo this", message_id="m-1")
            first = httpx.post(url, content=body, headers=webhook_headers(
                WEBHOOK_SECRET, "msg_one", body))
            assert first.status_code == 200, first.text
            assert first.json()["accepted"] is True and first.json()["duplicate"] is False
            _wait(lambda: len(receiver.replies()) == 1)
            reply = receiver.replies()[0]
            assert reply["conversation_id"] == "room-1" and "please echo this" in reply["text"]

            # The platform redelivers (same webhook-id, fresh signature and timestamp).
            again = httpx.post(url, content=body, headers=webhook_headers(
                WEBHOOK_SECRET, "msg_one", body))
            assert again.status_code == 200 and again.json()["duplicate"] is True
            assert again.json()["envelope_id"] == first.json()["envelope_id"]
            # The sender re-sends the same message (message_id m-1) as a new delivery
            # (new webhook-id): the message's own key finds it.
            resent = httpx.post(url, content=body, headers=webhook_headers(
                WEBHOOK_SECRET, "msg_one_again", body))
            assert resent.status_code == 200 and resent.json()["duplicate"] is True
            assert resent.json()["envelope_id"] == first.json()["envelope_id"]
            time.sleep(0.5)
            assert len(receiver.replies()) == 1 and receiver.duplicate_replies() == 0

            # Not addressed to the agent: kept for context, not answered...
            chatter = delivery("the build is green again", sender="bob", message_id="m-2")
            kept = httpx.post(url, content=chatter, headers=webhook_headers(
                WEBHOOK_SECRET, "msg_two", chatter))
            assert kept.json() == {**kept.json(), "accepted": True, "reason": "not_mentioned"}
            # ...and the next run sees it.
            ask = delivery("@palyra what did bob say?", message_id="m-3")
            httpx.post(url, content=ask, headers=webhook_headers(WEBHOOK_SECRET, "msg_3", ask))
            _wait(lambda: len(receiver.replies()) == 2)
            assert "the build is green again" in receiver.replies()[1]["text"]

            before = journal_head(f"http://127.0.0.1:{daemon.http_port}", daemon.token)
            bad = [
                ("forged", body, {**webhook_headers(WEBHOOK_SECRET, "msg_x", body),
                                  "webhook-signature": "v1,AAAA"}, 401, "SIGNATURE_INVALID"),
                ("other key", body, webhook_headers(REPLY_SECRET, "msg_y", body), 401,
                 "SIGNATURE_INVALID"),
                ("stale", body, webhook_headers(WEBHOOK_SECRET, "msg_z", body,
                                                timestamp=time.time() - 600), 401,
                 "TIMESTAMP_STALE"),
                ("future", body, webhook_headers(WEBHOOK_SECRET, "msg_f", body,
                                                 timestamp=time.time() + 600), 401,
                 "TIMESTAMP_STALE"),
                ("unsigned", body, {"content-type": "application/json"}, 401,
                 "SIGNATURE_INVALID"),
                ("malformed", b'{"type": "message.created", "data": {"text": 5}}',
                 None, 400, "INVALID_ARGUMENT"),
                ("not json", b"{not json", None, 400, "INVALID_ARGUMENT"),
                ("oversized", delivery("x" * 300_000), None, 413, "PAYLOAD_TOO_LARGE"),
            ]
            for name, payload, headers, status, code in bad:
                signed = headers or webhook_headers(WEBHOOK_SECRET, f"msg_{name}", payload)
                answer = httpx.post(url, content=payload, headers=signed)
                assert (answer.status_code, answer.json()["code"]) == (status, code), name
            unknown = httpx.post(url.replace("/hooks", "/nope"), content=body,
                                 headers=webhook_headers(WEBHOOK_SECRET, "msg_n", body))
            assert unknown.status_code == 404 and unknown.json()["code"] == "NOT_FOUND"
            after = journal_head(f"http://127.0.0.1:{daemon.http_port}", daemon.token)
            assert after == before, "a refused delivery must journal nothing"


def test_ed25519_and_key_rotation(tmp_path: Path) -> None:
    """``v1a`` (ed25519) deliveries verify against a ``whpk_`` key; a delivery carrying
    several signatures verifies when any one matches a configured key (rotation)."""
    key = Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    old_secret = "whsec_" + base64.b64encode(b"the-old-key-that-is-rotating-out").decode()
    config = tmp_path / "palyra.toml"
    config.write_text(
        "[channels.webhooks.hooks]\n"
        f'secrets = ["{WEBHOOK_SECRET}", "whpk_{base64.b64encode(public).decode()}"]\n'
        '[channels.policy."webhook:hooks"]\nmentions = ["*"]\n')
    with DaemonProcess(tmp_path / "data", env=clean_env(),
                       extra_args=("--config", str(config))) as daemon:
        url = f"http://127.0.0.1:{daemon.http_port}/v1/ingress/webhooks/hooks"
        body = delivery("hello", message_id="e-1")
        ts = str(int(time.time()))
        signed = f"msg_ed.{ts}.".encode() + body
        v1a = "v1a," + base64.b64encode(key.sign(signed)).decode()
        ok = httpx.post(url, content=body, headers={
            "webhook-id": "msg_ed", "webhook-timestamp": ts, "webhook-signature": v1a})
        assert ok.status_code == 200 and ok.json()["accepted"] is True, ok.text
        tampered = httpx.post(url, content=body.replace(b"hello", b"hellO"), headers={
            "webhook-id": "msg_ed2", "webhook-timestamp": ts, "webhook-signature": v1a})
        assert tampered.status_code == 401
        # Rotation: the sender signs with the old key and the new one; palyra knows the new.
        old = webhook_headers(old_secret, "msg_rot", body)
        new = webhook_headers(WEBHOOK_SECRET, "msg_rot", body, timestamp=int(old["webhook-timestamp"]))
        both = {**new, "webhook-signature": f"{old['webhook-signature']} {new['webhook-signature']}"}
        rotated = httpx.post(url, content=body, headers=both)
        assert rotated.status_code == 200, rotated.text
        only_old = httpx.post(url, content=body, headers=webhook_headers(old_secret, "msg_o", body))
        assert only_old.status_code == 401
