"""Who may call RouteMessage, through ``palyra serve``: only the channel's connector
identity or an operator. A plain user naming another sender must not run in that
sender's session and read its conversation back; an operator may route, but its
``senderVerified`` claim is not believed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess, clean_env
from tests.channels.conftest import DEVICE, admin_headers

pytestmark = pytest.mark.slow
CHANNEL = "webhook:ops"
SECRET = "the-victims-secret-4711"


def _message(text: str, sender: str, message_id: str, **more: Any) -> dict[str, Any]:
    return {"message": {"text": text, "senderHandle": sender, "conversationId": "c",
                        "isDirectMessage": True, "adapterMessageId": message_id, **more}}


def test_only_the_connector_or_an_operator_routes(tmp_path: Path) -> None:
    config = tmp_path / "palyra.toml"
    config.write_text(f'[channels.policy."{CHANNEL}"]\ndm_policy = "allow"\n'
                      f'[channels.policy."webhook:strict"]\ndm_policy = "allow"\n'
                      f'allow_from = ["vip"]\nstrict_allow = true\n')
    with DaemonProcess(tmp_path / "data", env=clean_env(),
                       extra_args=("--config", str(config))) as daemon:
        base, token = f"http://127.0.0.1:{daemon.http_port}", daemon.token
        route = f"{base}/v1/channels/{CHANNEL}/messages:route"
        connector = {**admin_headers(token), "x-palyra-principal": f"channel:{CHANNEL}"}
        said = httpx.post(route, headers=connector, timeout=40,
                          json=_message(f"remember {SECRET}", "victim", "m1",
                                        senderVerified=True))
        assert said.status_code == 200, said.text

        issued = httpx.post(f"{base}/v1/tokens", headers=admin_headers(token),
                            json={"principal": "user:mallory"})
        assert issued.status_code == 200, issued.text
        mallory = {"authorization": f"Bearer {issued.json()['token']}",
                   "x-palyra-device-id": DEVICE}
        for headers in (mallory, {**mallory, "x-palyra-channel": CHANNEL},
                        # another channel's connector identity speaks only for its own
                        {**admin_headers(token), "x-palyra-principal": "channel:webhook:x"},
                        {**admin_headers(token), "x-palyra-principal": "user:mallory"}):
            stolen = httpx.post(route, headers=headers, timeout=40,
                                json=_message("what did I say?", "victim", "m2",
                                              senderVerified=True))
            assert stolen.status_code == 403, stolen.text
            assert stolen.json()["code"] == "PERMISSION_DENIED"
            assert SECRET not in stolen.text

        # An operator may route, but not vouch for a sender: on a strict channel an
        # allow-listed sender whose verification only the operator claims is refused,
        # while the channel's connector is believed.
        strict = f"{base}/v1/channels/webhook:strict/messages:route"
        by_operator = httpx.post(strict, headers=admin_headers(token), timeout=40,
                                 json=_message("hi", "vip", "s1", senderVerified=True))
        assert by_operator.status_code == 200, by_operator.text
        assert by_operator.json()["decisionReason"] == "sender_unverified"
        own = {**admin_headers(token), "x-palyra-principal": "channel:webhook:strict"}
        by_connector = httpx.post(strict, headers=own, timeout=40,
                                  json=_message("hi", "vip", "s2", senderVerified=True))
        assert by_connector.status_code == 200, by_connector.text
        assert by_connector.json()["decisionReason"] != "sender_unverified"
