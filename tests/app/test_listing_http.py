"""The console's listing calls over HTTP against a real daemon: ListRuns, the signed
checkpoint in GetJournalHead, WatchJournalVerify's SSE stream, ListChannels."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from palyra.testing.platforms import webhook_headers
from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow
DEVICE = "01J00000000000000000000000"
HOOK_SECRET = "whsec_aW5ib3VuZC1rZXktb2YtdGhlLWxpc3RpbmctdGVzdA=="
# Replies to the discard port go nowhere: their send tasks stay in the outbox.
CONFIG = f"""
[channels.webhooks.hooks]
secrets = ["{HOOK_SECRET}"]
reply_url = "http://127.0.0.1:9/nowhere"

[channels.webhooks.quiet]
secrets = ["{HOOK_SECRET}"]

[channels.policy."webhook:hooks"]
dm_policy = "allow"

[channels.policy."slack:T0123"]
concurrency = 3
"""


class Client:
    def __init__(self, daemon: DaemonProcess) -> None:
        self.base = f"http://127.0.0.1:{daemon.http_port}"
        self.token = daemon.token

    def call(self, method: str, path: str, principal: str,
             headers_extra: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {self.token}", "x-palyra-principal": principal,
                   "x-palyra-device-id": DEVICE, **(headers_extra or {})}
        return httpx.request(method, self.base + path, headers=headers, timeout=30, **kw)

    def ok(self, method: str, path: str, principal: str = "admin:ops", **kw: Any) -> Any:
        response = self.call(method, path, principal, **kw)
        assert response.status_code == 200, f"{method} {path}: {response.text}"
        return response.json()

    def run(self, principal: str, session_key: str) -> dict[str, Any]:
        made = self.ok("POST", "/v1/runs", principal, json={
            "sessionKey": session_key, "input": {"text": "hi"}, "complete": True, "wait": True})
        return dict(made["run"])


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    root: Path = tmp_path_factory.mktemp("listing")
    config = root / "palyra.toml"
    config.write_text(CONFIG)
    with DaemonProcess(root / "data", env=clean_env(),
                       extra_args=("--config", str(config))) as daemon:
        yield Client(daemon)


def _ids(page: dict[str, Any]) -> list[str]:
    return [r["runId"] for r in page.get("runs", [])]


def test_list_runs_is_caller_scoped_newest_first_filtered_and_paged(client: Client) -> None:
    first = client.run("user:alice", "alice-a")
    second = client.run("user:alice", "alice-a")
    other = client.run("user:alice", "alice-b")
    bobs = client.run("user:bob", "bob-a")
    mine = client.ok("GET", "/v1/runs", "user:alice")
    assert _ids(mine) == [other["runId"], second["runId"], first["runId"]]
    assert mine.get("nextPageToken", "") == ""
    everyone = _ids(client.ok("GET", "/v1/runs", "admin:ops"))
    assert everyone[:4] == [bobs["runId"], other["runId"], second["runId"], first["runId"]]
    # One session, an earlier run included.
    session = client.ok("GET", "/v1/runs", "user:alice", params={"sessionId": first["sessionId"]})
    assert _ids(session) == [second["runId"], first["runId"]]
    assert second["sessionId"] == first["sessionId"] != other["sessionId"]
    # The state filter.
    done = client.ok("GET", "/v1/runs", "user:alice", params={"state": "RUN_STATE_DONE"})
    assert _ids(done) == _ids(mine) and all(r["state"] == "RUN_STATE_DONE" for r in done["runs"])
    assert _ids(client.ok("GET", "/v1/runs", "user:alice",
                          params={"state": "RUN_STATE_FAILED"})) == []
    # Paging one at a time walks the same order and ends with an empty token.
    walked, token = [], ""
    for _ in range(5):
        page = client.ok("GET", "/v1/runs", "user:alice",
                         params={"pageSize": 1, **({"pageToken": token} if token else {})})
        walked += _ids(page)
        token = page.get("nextPageToken", "")
        if not token:
            break
    assert walked == _ids(mine)
    bad = client.call("GET", "/v1/runs", "user:alice", params={"pageToken": "not-a-token"})
    assert bad.status_code == 400 and bad.json()["code"] == "INVALID_ARGUMENT"


def test_the_journal_head_carries_the_newest_signed_checkpoint(client: Client) -> None:
    first = client.ok("POST", "/v1/journal:checkpoint", json={})
    client.run("user:alice", "moves-the-head")
    newest = client.ok("POST", "/v1/journal:checkpoint", json={})
    assert int(newest["position"]) > int(first["position"])
    head = client.ok("GET", "/v1/journal/head", "user:alice")  # any caller may read it
    assert head["lastCheckpoint"] == {
        "position": newest["position"], "headHash": newest["headHash"],
        "tsUnixMs": newest["tsUnixMs"], "publicKey": newest["publicKey"],
        "signature": newest["signature"]}
    assert int(head["headPosition"]) >= int(newest["position"])


def test_the_verify_stream_counts_up_to_the_head_and_ends_with_verify_journals_result(
        client: Client) -> None:
    client.run("user:alice", "verify-me")
    head = client.ok("GET", "/v1/journal/head")
    response = client.call("GET", "/v1/journal:watchVerify", "admin:ops",
                           headers_extra={"accept": "text/event-stream"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    steps = [json.loads(line[len("data:"):]) for line in response.text.splitlines()
             if line.startswith("data:")]
    checked = [int(step.get("checked", 0)) for step in steps]
    assert checked[0] == 0 and checked == sorted(checked), checked
    assert {int(step["total"]) for step in steps} == {int(head["eventCount"])}
    assert [("result" in step) for step in steps] == [False] * (len(steps) - 1) + [True]
    assert checked[-1] == int(head["eventCount"])
    unary = client.ok("POST", "/v1/journal:verify", json={})
    assert steps[-1]["result"] == unary and unary["ok"] is True
    # Operators only, like VerifyJournal.
    denied = client.call("GET", "/v1/journal:watchVerify", "user:alice")
    assert denied.status_code == 403, denied.text
    assert denied.json()["code"] == "PERMISSION_DENIED"


def test_list_channels_shows_each_channel_with_its_outbox_and_quarantine(client: Client) -> None:
    body = json.dumps({"type": "message.created", "data": {
        "text": "hello", "sender": "alice", "conversation_id": "room", "message_id": "m-1",
        "is_direct_message": True}}).encode()
    delivered = httpx.post(f"{client.base}/v1/ingress/webhooks/hooks", content=body,
                           headers=webhook_headers(HOOK_SECRET, "msg-1", body), timeout=30)
    assert delivered.status_code == 200, delivered.text
    for n in range(2):  # refused as too large: kept in the quarantine
        client.ok("POST", "/v1/channels/rpc:elsewhere/messages:route", json={"message": {
            "text": "x" * (33 * 1024), "senderHandle": "u9", "adapterMessageId": f"big-{n}"}})
    deadline = time.monotonic() + 30
    while True:
        listed = client.ok("GET", "/v1/channels")
        by_id = {c["channel"]: c for c in listed["channels"]}
        if int(by_id.get("webhook:hooks", {}).get("outboxPending", 0)) >= 1:
            break
        assert time.monotonic() < deadline, listed
        time.sleep(0.2)
    assert listed["routerEnabled"] is True
    assert sorted(by_id) == ["rpc:elsewhere", "slack:T0123", "webhook:hooks", "webhook:quiet"]
    hooks = by_id["webhook:hooks"]
    assert (hooks["kind"], hooks["mode"], hooks["dmPolicy"]) == ("webhook", "two_way", "allow")
    quiet = by_id["webhook:quiet"]
    assert (quiet["kind"], quiet["mode"], quiet["dmPolicy"]) == ("webhook", "inbound_only",
                                                                "pairing")
    assert "outboxPending" not in quiet and "quarantined" not in quiet
    slack = by_id["slack:T0123"]
    assert (slack["kind"], slack["concurrency"]) == ("rpc", 3)
    assert int(by_id["rpc:elsewhere"]["quarantined"]) == 2
    kept = client.ok("GET", "/v1/channels/rpc:elsewhere/quarantine")["messages"]
    assert len(kept) == 2
    refused = client.call("GET", "/v1/channels", "user:alice")
    assert refused.status_code == 403 and refused.json()["code"] == "PERMISSION_DENIED"
