"""Bodies and cursors that used to answer 500 (or be misread) get a clear 400 (issue 12, item 10).

Over a real daemon on loopback: invalid UTF-8, JSON nested past the parser's
limit (in an unknown field, and inside ``payloadJson``), duplicate keys, and a
``Last-Event-ID`` outside the tape_seq range. Each answer carries a stable
code; nothing is journaled and the daemon stays up.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess, clean_env

TOKEN = "bad-bodies-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "x-palyra-principal": "user:fuzz",
           "x-palyra-device-id": "01J00000000000000000000000"}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = clean_env(PALYRA_ADMIN_TOKEN=TOKEN)
    with DaemonProcess(tmp_path_factory.mktemp("bad") / "data", env=env) as daemon:
        yield f"http://127.0.0.1:{daemon.http_port}"


def _post(base: str, path: str, body: bytes) -> httpx.Response:
    return httpx.post(base + path, content=body, headers=HEADERS)


@pytest.mark.slow
def test_bad_bodies_are_400_with_a_code(base: str) -> None:
    head = httpx.get(base + "/v1/journal/head", headers=HEADERS).json()
    cases = {
        "invalid UTF-8": ("/v1/runs", b'{"input":{"text":"\xff\xfe"}}', "MALFORMED_REQUEST"),
        "deep unknown field": ("/v1/runs", b'{"zzz":' + b"[" * 1000 + b"]" * 1000 + b"}",
                               "MALFORMED_REQUEST"),
        "duplicate keys": ("/v1/runs", b'{"complete":true,"complete":false,"input":{"text":"x"}}',
                           "MALFORMED_REQUEST"),
        "NaN literal": ("/v1/runs", b'{"v":NaN}', "MALFORMED_REQUEST"),
    }
    for name, (path, body, code) in cases.items():
        response = _post(base, path, body)
        assert response.status_code == 400, (name, response.text)
        assert response.json()["code"] == code, (name, response.text)
    # Refused requests journal nothing.
    assert httpx.get(base + "/v1/journal/head", headers=HEADERS).json() == head
    run = httpx.post(base + "/v1/runs", headers=HEADERS, json={
        "input": {"text": "hi"}, "complete": True, "wait": True}).json()["run"]
    deep_payload = {"v": 1, "sessionId": run["sessionId"], "runId": run["runId"],
                    "kind": "client.note", "actor": "user:fuzz", "timestampUnixMs": 1,
                    "payloadJson": "[" * 2000 + "]" * 2000}
    before = httpx.get(base + "/v1/journal/head", headers=HEADERS).json()
    response = _post(base, "/v1/events", json.dumps(deep_payload).encode())
    assert response.status_code == 400 and response.json()["code"] == "INVALID_ARGUMENT"
    assert httpx.get(base + "/v1/journal/head", headers=HEADERS).json() == before
    assert httpx.get(base + "/healthz").status_code == 200


@pytest.mark.slow
def test_last_event_id_out_of_range_is_refused_like_after_seq(base: str) -> None:
    run = httpx.post(base + "/v1/runs", headers=HEADERS, json={
        "input": {"text": "hi"}, "complete": True, "wait": True}).json()["run"]
    url = f"{base}/v1/runs/{run['runId']}/events"
    for bad in ("9223372036854775808", "99999999999999999999", "-1", "x1"):
        response = httpx.get(url, headers={**HEADERS, "Last-Event-ID": bad})
        assert response.status_code == 400, (bad, response.text)
        assert response.json()["code"] == "MALFORMED_REQUEST"
    by_query = httpx.get(url, params={"after_seq": "9223372036854775808"}, headers=HEADERS)
    assert by_query.status_code == 400
    ok = httpx.get(url, headers={**HEADERS, "Last-Event-ID": "0"})
    assert ok.status_code == 200 and "id: 1" in ok.text
