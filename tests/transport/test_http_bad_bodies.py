"""Bodies and cursors that used to answer 500 (or be misread) get a clear 4xx (issues 12 and 35).

Over a real daemon on loopback: invalid UTF-8, JSON nested past the parser's
limit (in an unknown field, and inside ``payloadJson``), duplicate keys, a
``Last-Event-ID`` outside the tape_seq range, a lone UTF-16 surrogate in any string
field or key of any route, an absurd prune age, and signed channel deliveries
(Standard Webhooks and Slack) whose bodies are bad in each of those ways. Each
answer carries a stable code; nothing is journaled and the daemon stays up.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from palyra_gen.http_routes import ROUTES

from palyra.testing.platforms import slack_headers, webhook_headers
from palyra.testing.spawn import DaemonProcess, clean_env
from palyra.transport.http._json import camel, proto_meta
from palyra.transport.http._routes import CompiledRoute, compile_route
from tests.channels.conftest import SLACK_SECRET, WEBHOOK_SECRET, write_config

TOKEN = "bad-bodies-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "x-palyra-principal": "user:fuzz",
           "x-palyra-device-id": "01J00000000000000000000000"}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # Post-run reflection off: the tests read the journal's head around a refused request
    # right after a run ends, and a run's reflection task appends its events then.
    env = clean_env(PALYRA_ADMIN_TOKEN=TOKEN, PALYRA_LEARNING_ENABLED="false")
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


ADMIN = {**HEADERS, "x-palyra-principal": "admin:fuzz"}
SURROGATE = "\ud800"


def _string_paths(cls: Any, depth: int = 0) -> Iterator[list[str]]:
    """JSON key paths to every string field of ``cls`` (and of its messages, 2 deep)."""
    meta = proto_meta(cls)
    for name, fm in meta.meta_by_field_name.items():
        if fm.proto_type == "string" and not fm.repeated:
            yield [camel(name)]
        elif fm.proto_type == "message" and not fm.repeated and depth < 2:
            for rest in _string_paths(meta.cls_by_field[name], depth + 1):
                yield [camel(name), *rest]


def _nest(path: list[str], value: Any) -> dict[str, Any]:
    body: Any = value
    for key in reversed(path):
        body = {key: body}
    return dict(body)


def _url(route: CompiledRoute) -> str:
    path = route.template
    for name in route.path_params:
        path = path.replace("{" + name + "}", "x")
    return path


def _surrogate_cases() -> Iterator[tuple[str, str, str, bytes]]:
    for route in map(compile_route, ROUTES):
        if not route.has_body:
            continue
        url, verb = _url(route), route.http_method
        yield route.rpc, verb, url, json.dumps({SURROGATE: 1}).encode()
        for path in _string_paths(route.request_cls):
            yield (f"{route.rpc}.{'.'.join(path)}", verb, url,
                   json.dumps(_nest(path, SURROGATE)).encode())


@pytest.mark.slow
def test_a_lone_surrogate_anywhere_is_400(base: str) -> None:
    """Every body route, every string field and a key: ``"\\ud800"`` is not text."""
    head = httpx.get(base + "/v1/journal/head", headers=ADMIN).json()
    cases = list(_surrogate_cases())
    assert len(cases) > 40
    bad = []
    for name, verb, url, body in cases:
        assert b"\\ud800" in body
        response = httpx.request(verb, base + url, content=body, headers=ADMIN, timeout=30)
        if response.status_code != 400 or response.json().get("code") != "MALFORMED_REQUEST":
            bad.append(f"{name}: {response.status_code} {response.text[:120]}")
    assert not bad, "\n".join(bad)
    assert httpx.get(base + "/v1/journal/head", headers=ADMIN).json() == head


@pytest.mark.slow
def test_an_absurd_prune_age_is_400(base: str) -> None:
    for age in (1e308, 1.7976931348623157e308, 1e7, -1):
        response = httpx.post(base + "/v1/journal:prune", headers=ADMIN,
                              json={"olderThanDays": age})
        assert response.status_code == 400, (age, response.text)
        assert response.json()["code"] == "INVALID_ARGUMENT"


# -- signed channel deliveries -------------------------------------------------------

@pytest.fixture(scope="module")
def channels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("signed")
    config = write_config(root / "palyra.toml", slack_api="http://127.0.0.1:9")
    with DaemonProcess(root / "data", env=clean_env(PALYRA_ADMIN_TOKEN=TOKEN),
                       extra_args=("--config", str(config))) as daemon:
        yield f"http://127.0.0.1:{daemon.http_port}"


def _webhook_signed(msg_id: str, body: bytes) -> dict[str, str]:
    """Standard Webhooks ``v1`` over raw bytes (the library only signs text, so bodies
    that are not UTF-8 are signed here by the spec's formula, checked against it below)."""
    ts = str(int(time.time()))
    key = base64.b64decode(WEBHOOK_SECRET.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    return {"webhook-id": msg_id, "webhook-timestamp": ts, "content-type": "application/json",
            "webhook-signature": "v1," + base64.b64encode(mac).decode()}


def _slack_signed(body: bytes) -> dict[str, str]:
    ts = str(int(time.time()))
    mac = hmac.new(SLACK_SECRET.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256)
    return {"x-slack-request-timestamp": ts, "x-slack-signature": "v0=" + mac.hexdigest(),
            "content-type": "application/json"}


def test_the_raw_signers_agree_with_the_libraries() -> None:
    body = b'{"type":"message.created","data":{"text":"hi"}}'
    ours, theirs = _webhook_signed("msg_1", body), webhook_headers(WEBHOOK_SECRET, "msg_1", body)
    if ours["webhook-timestamp"] == theirs["webhook-timestamp"]:
        assert ours["webhook-signature"] == theirs["webhook-signature"]
    ours, theirs = _slack_signed(body), slack_headers(SLACK_SECRET, body)
    if ours["x-slack-request-timestamp"] == theirs["x-slack-request-timestamp"]:
        assert ours["x-slack-signature"] == theirs["x-slack-signature"]


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


# Shapes of bad bodies: each either breaks UTF-8, spells a lone surrogate, or nests
# past any parser's recursion, placed where the delivery's own fields are or beside them.
_BAD_TEXT = st.one_of(
    st.binary(min_size=1, max_size=8).filter(lambda b: not _utf8(b)),
    st.sampled_from([b"\\ud800", b"\\udfff", b"\\ud83d", b"a\\udc00b"]))
_WEBHOOK_BODIES = st.one_of(
    _BAD_TEXT.map(lambda t: b'{"type":"message.created","data":{"text":"' + t + b'"}}'),
    _BAD_TEXT.map(lambda t: b'{"type":"' + t + b'","data":{}}'),
    st.integers(1_000, 100_000).map(
        lambda d: b'{"z":' + _deep(d) + b',"type":"message.created","data":{"text":"x"}}'),
    st.integers(1_000, 100_000).map(_deep))
_SLACK_BODIES = st.one_of(
    _BAD_TEXT.map(lambda t: b'{"type":"event_callback","event_id":"Ev1","event":'
                            b'{"type":"app_mention","user":"U1","text":"' + t + b'"}}'),
    _BAD_TEXT.map(lambda t: b'{"type":"url_verification","challenge":"' + t + b'"}'),
    st.integers(1_000, 100_000).map(lambda d: b'{"x":' + _deep(d) + b',"type":"event_callback"}'),
    st.integers(1_000, 100_000).map(_deep))


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(webhook=_WEBHOOK_BODIES, slack=_SLACK_BODIES, n=st.integers(0, 2**32))
def test_signed_bad_bodies_are_4xx(channels: str, webhook: bytes, slack: bytes, n: int) -> None:
    """A valid signature over a bad body is still bad input: 4xx with a code, nothing kept."""
    head = httpx.get(channels + "/v1/journal/head", headers=ADMIN).json()
    for url, body, headers in (
            ("/v1/ingress/webhooks/hooks", webhook, _webhook_signed(f"msg_{n}", webhook)),
            ("/v1/ingress/slack/acme", slack, _slack_signed(slack))):
        response = httpx.post(channels + url, content=body, headers=headers, timeout=30)
        assert 400 <= response.status_code < 500, (url, body[:80], response.text[:300])
        assert response.json()["code"] in ("INVALID_ARGUMENT", "MALFORMED_REQUEST"), response.text
    assert httpx.get(channels + "/v1/journal/head", headers=ADMIN).json() == head


@pytest.mark.slow
def test_a_signed_body_nested_100000_deep_is_4xx(channels: str) -> None:
    # Deep before the fields (a parser that fails on a field first never goes deep).
    body = (b'{"z":' + _deep(100_000) + b',"type":"message.created",'
            b'"data":{"text":"x","sender":"a","conversation_id":"c"}}')
    response = httpx.post(channels + "/v1/ingress/webhooks/hooks", content=body,
                          headers=_webhook_signed("msg_deep", body), timeout=30)
    assert response.status_code == 400, response.text
