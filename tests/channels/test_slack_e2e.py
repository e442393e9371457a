"""Slack Events API end to end through ``palyra serve``: requests signed by ``slack_sdk``,
replies through a local fake of the Web API, Slack's retries deduplicated, an unknown send
outcome reconciled instead of posted twice."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from palyra.testing.platforms import FakeSlack, slack_headers
from palyra.testing.spawn import DaemonProcess, clean_env
from tests.channels.conftest import (
    SLACK_SECRET,
    SLACK_TOKEN,
    admin_headers,
    journal_head,
    write_config,
)

pytestmark = pytest.mark.slow


def _event(event_id: str, text: str, *, kind: str = "app_mention", channel: str = "C1",
           user: str = "U1", ts: str = "1.0", **extra: Any) -> bytes:
    return json.dumps({"type": "event_callback", "team_id": "T0123", "api_app_id": "A1",
                       "event_id": event_id, "event_time": int(time.time()),
                       "event": {"type": kind, "channel": channel, "user": user, "text": text,
                                 "ts": ts, **extra}}).encode()


def _wait(predicate: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


_ENDED = ("BACKGROUND_TASK_STATE_SUCCEEDED", "BACKGROUND_TASK_STATE_FAILED",
          "BACKGROUND_TASK_STATE_CANCELLED", "BACKGROUND_TASK_STATE_EXPIRED")


def _settled_head(base: str, token: str) -> int:
    """The journal's head once no background task is left to commit (a swallowed send
    retries after a backoff, longer than any quiet window) and it stopped moving."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = httpx.get(f"{base}/v1/tasks", headers=admin_headers(token),
                           params={"limit": 1000})
        assert listed.status_code == 200, listed.text
        if all(t.get("state") in _ENDED for t in listed.json().get("tasks", [])):
            break
        time.sleep(0.2)
    head = -1
    while (now := journal_head(base, token)) != head:
        head = now
        time.sleep(0.5)
    return head


def test_slack_app_end_to_end(tmp_path: Path) -> None:
    with FakeSlack(SLACK_TOKEN, swallow=1) as slack:
        config = write_config(tmp_path / "palyra.toml", slack_api=slack.api_url)
        with DaemonProcess(tmp_path / "data", env=clean_env(),
                           extra_args=("--config", str(config))) as daemon:
            base = f"http://127.0.0.1:{daemon.http_port}"
            url = f"{base}/v1/ingress/slack/acme"

            handshake = json.dumps({"type": "url_verification", "challenge": "c-42",
                                    "token": "legacy"}).encode()
            answer = httpx.post(url, content=handshake, headers=slack_headers(SLACK_SECRET,
                                                                              handshake))
            assert answer.status_code == 200 and answer.json() == {"challenge": "c-42"}

            # The first post's answer is swallowed (the outcome is unknown to palyra):
            # the retry must find the message in the channel, not post it again.
            mention = _event("Ev1", "<@UBOT> summarise the thread please", ts="100.1")
            started = time.monotonic()
            first = httpx.post(url, content=mention, headers=slack_headers(SLACK_SECRET, mention))
            assert time.monotonic() - started < 3.0, "Slack needs its ack within 3 s"
            assert first.status_code == 200 and first.json()["accepted"] is True, first.text
            _wait(lambda: len(slack.replies()) == 1)
            reply = slack.replies()[0]
            assert "summarise the thread please" in reply["text"]

            # Slack's retries (it saw no ack in time): immediate, then later.
            for retry in (1, 2):
                again = httpx.post(url, content=mention, headers=slack_headers(
                    SLACK_SECRET, mention, retry_num=retry))
                assert again.status_code == 200 and again.json()["duplicate"] is True

            # A DM (message.im) in a thread is answered in that thread.
            dm = _event("Ev2", "hello from a DM", kind="message", channel="D9", user="U7",
                        ts="200.1", channel_type="im", thread_ts="199.0")
            httpx.post(url, content=dm, headers=slack_headers(SLACK_SECRET, dm))
            _wait(lambda: len(slack.replies()) == 2)
            assert slack.messages["D9"][0]["thread_ts"] == "199.0"
            # Slack sends a DM that mentions the bot twice, as message.im and as
            # app_mention (two event ids, one message ts): it is answered once.
            twice = _event("Ev2b", "<@UBOT> hello from a DM", kind="app_mention", channel="D9",
                           user="U7", ts="200.1", thread_ts="199.0")
            dup = httpx.post(url, content=twice, headers=slack_headers(SLACK_SECRET, twice))
            assert dup.status_code == 200 and dup.json()["duplicate"] is True, dup.text

            # A mention inside a channel thread is answered in that thread.
            threaded = _event("Ev5", "<@UBOT> and in the thread?", channel="C2", ts="300.2",
                              thread_ts="300.0")
            httpx.post(url, content=threaded, headers=slack_headers(SLACK_SECRET, threaded))
            _wait(lambda: len(slack.replies()) == 3)
            assert slack.messages["C2"][0]["thread_ts"] == "300.0"

            # The bot's own message and edits are acknowledged and ignored. The replies'
            # send tasks may still be committing their success: wait for a quiet journal.
            before = _settled_head(base, daemon.token)
            own = _event("Ev3", "my own words", kind="message", user="UBOT",
                         channel_type="im", channel="D9")
            edit = _event("Ev4", "edited", kind="message", channel_type="im", channel="D9",
                          subtype="message_changed")
            for body in (own, edit):
                ignored = httpx.post(url, content=body, headers=slack_headers(SLACK_SECRET, body))
                assert ignored.status_code == 200 and ignored.json()["accepted"] is False
            stale = httpx.post(url, content=mention, headers=slack_headers(
                SLACK_SECRET, mention, timestamp=time.time() - 301))
            assert stale.status_code == 401 and stale.json()["code"] == "TIMESTAMP_STALE"
            forged = httpx.post(url, content=mention, headers=slack_headers("not-the-secret",
                                                                            mention))
            assert forged.status_code == 401 and forged.json()["code"] == "SIGNATURE_INVALID"
            assert journal_head(base, daemon.token) == before

            time.sleep(1.0)  # any late duplicate post would have landed by now
            assert slack.duplicate_replies() == 0
            assert slack.posts == 3, "the swallowed post was reconciled, not repeated"
