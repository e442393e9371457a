"""Channel ingress metrics of a real daemon: duplicates, signature failures, quarantine size.

Deliveries are signed by the ``standardwebhooks`` package and posted over loopback;
the figures are read back from a ``/metrics`` scrape, parsed by the Prometheus client.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from palyra.testing.platforms import webhook_headers
from palyra.testing.spawn import DaemonProcess, clean_env
from tests.channels.conftest import WEBHOOK_SECRET, delivery, write_config

pytestmark = pytest.mark.slow

CHANNEL = "webhook:hooks"


def _scrape(daemon: DaemonProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    answer = httpx.get(f"http://127.0.0.1:{daemon.http_port}/metrics")
    assert answer.status_code == 200, answer.text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(answer.text) for s in family.samples}


def _post(daemon: DaemonProcess, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{daemon.http_port}/v1/ingress/webhooks/hooks",
                      content=body, headers=headers)


def test_duplicates_signature_failures_and_the_quarantine_are_scraped(tmp_path: Path) -> None:
    config = write_config(tmp_path / "palyra.toml")
    with DaemonProcess(tmp_path / "data", env=clean_env(),
                       extra_args=("--config", str(config))) as daemon:
        body = delivery("the build is green", message_id="m-1")
        first = _post(daemon, body, webhook_headers(WEBHOOK_SECRET, "msg_1", body))
        assert first.json()["accepted"] is True and first.json()["duplicate"] is False
        for _ in range(2):  # the platform redelivers, twice
            again = _post(daemon, body, webhook_headers(WEBHOOK_SECRET, "msg_1", body))
            assert again.json()["duplicate"] is True, again.text
        forged = _post(daemon, body, {**webhook_headers(WEBHOOK_SECRET, "msg_2", body),
                                      "webhook-signature": "v1,AAAA"})
        assert forged.json()["code"] == "SIGNATURE_INVALID"
        stale = _post(daemon, body, webhook_headers(WEBHOOK_SECRET, "msg_3", body,
                                                    timestamp=time.time() - 600))
        assert stale.json()["code"] == "TIMESTAMP_STALE"
        empty = delivery("", message_id="m-4")
        refused = _post(daemon, empty, webhook_headers(WEBHOOK_SECRET, "msg_4", empty))
        assert refused.json()["reason"] == "empty_message", refused.text

        samples = _scrape(daemon)
        channel = frozenset({("channel", CHANNEL)})
        assert samples[("palyra_channel_duplicates_total", channel)] == 2
        for reason in ("signature_invalid", "timestamp_stale"):
            assert samples[("palyra_channel_signature_failures_total",
                            channel | {("reason", reason)})] == 1, reason
        assert samples[("palyra_channel_quarantine_size", channel)] == 1
        assert samples[("palyra_channel_messages_total",
                        channel | {("outcome", "quarantined")})] == 1
    # A restart counts afresh, but the quarantine still holds what it held.
    with DaemonProcess(tmp_path / "data", env=clean_env(),
                       extra_args=("--config", str(config))) as daemon:
        samples = _scrape(daemon)
        assert samples[("palyra_channel_quarantine_size", frozenset({("channel", CHANNEL)}))] == 1
        assert ("palyra_channel_duplicates_total", frozenset({("channel", CHANNEL)})) \
            not in samples
