"""Redaction: hide secrets, keep content; idempotent; paths reported."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from palyra.core.redaction import REDACTED, contains_secret, is_secret_key, redact, redact_text


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "passwd",
        "api_key",
        "apiKey",
        "X-Api-Key",
        "authorization",
        "Cookie",
        "set-cookie",
        "credentials",
        "private_key",
        "access_token",
        "refresh_token",
        "client_secret",
        "accessToken",
        "id_token",
        "secret",
        "db_password",
        "pin",
        "pin_code",
        "aws_secret_access_key",
        "passphrase",
    ],
)
def test_secret_keys(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "token",
        "tokens",
        "max_tokens",
        "prompt_tokens",
        "model_token",
        "token_count",
        "text",
        "next_page_token_count",
        "signature",
        "proof",
        "reply_text",
        "catalog_hash",
        "spinner",
    ],
)
def test_content_keys_are_kept(key: str) -> None:
    assert not is_secret_key(key)


def test_model_output_is_not_redacted() -> None:
    payload = {
        "model_token": {"is_final": False, "token": "Hello"},
        "usage": {"prompt_tokens": 10, "max_tokens": 100},
        "reply_text": "Use a bearer token in the header.",
    }
    result = redact(payload)
    assert result.value == payload
    assert result.paths == ()


def test_secret_keys_and_values_are_redacted_with_paths() -> None:
    payload: dict[str, Any] = {
        "headers": {"Authorization": "Bearer abcdefghijklmnop", "accept": "json"},
        "api_key": "plain",
        "items": [{"password": 1234}, {"note": "key is sk-abcdefghijklmnopqrstuv, keep"}],
        "weird key": {"client_secret": "x"},
        "url": "https://h/cb?code=1&access_token=abcdef&x=2",
        "args": '{"password": "hunter2", "path": "/tmp"}',
        "pem": "-----BEGIN PRIVATE KEY-----\nMIIEv\n-----END PRIVATE KEY-----",
        "aws": "id AKIAIOSFODNN7EXAMPLE here",
        "raw_header": "Cookie: sid=abc; theme=dark",
        "nothing_hidden": {"password": None, "token": "visible"},
    }
    result = redact(payload)
    value = result.value
    assert value["headers"] == {"Authorization": REDACTED, "accept": "json"}
    assert value["api_key"] == REDACTED
    assert value["items"][0]["password"] == REDACTED
    assert value["items"][1]["note"] == f"key is {REDACTED}, keep"
    assert value["weird key"]["client_secret"] == REDACTED
    assert value["url"] == f"https://h/cb?code=1&access_token={REDACTED}&x=2"
    assert value["args"] == '{"password":"<redacted>","path":"/tmp"}'
    assert value["pem"] == REDACTED
    assert value["aws"] == f"id {REDACTED} here"
    assert value["raw_header"] == f"Cookie: {REDACTED}"
    assert value["nothing_hidden"] == {"password": None, "token": "visible"}
    assert result.paths == (
        "$.headers.Authorization",
        "$.api_key",
        "$.items[0].password",
        "$.items[1].note",
        '$["weird key"].client_secret',
        "$.url",
        "$.args#json.password",
        "$.pem",
        "$.aws",
        "$.raw_header",
    )


def test_header_lines_keep_their_name() -> None:
    text = "GET /\nAuthorization: Bearer abcdefghijkl\nHost: x"
    assert redact_text(text) == f"GET /\nAuthorization: {REDACTED}\nHost: x"


# --- properties --------------------------------------------------------------

_TOKEN_CHARS = "ABCDEFGHJKMNPQRSTVWXYZabcdefghijkmnopqrstuvwxyz0123456789"
_token = st.text(alphabet=_TOKEN_CHARS, min_size=20, max_size=40)
_upper = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", min_size=16, max_size=16)
secrets = st.one_of(
    _token.map(lambda t: f"Bearer {t}"),
    _token.map(lambda t: f"sk-{t}"),
    _token.map(lambda t: f"sk-proj-{t}"),
    _token.map(lambda t: f"token={t}"),
    _token.map(lambda t: f"api_key={t}"),
    _token.map(lambda t: f"password={t}"),
    _upper.map(lambda t: f"AKIA{t}"),
    _token.map(lambda t: f"ghp_{t}{t}"),
    _token.map(lambda t: f"xoxb-{t}"),
    _token.map(lambda t: f"-----BEGIN RSA PRIVATE KEY-----\n{t}\n-----END RSA PRIVATE KEY-----"),
    _token.map(lambda t: f"Authorization: Basic {t}"),
)
filler = st.text(st.characters(codec="utf-8"), max_size=20)
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), filler)
keys = st.one_of(filler, st.sampled_from(["token", "password", "api_key", "text", "Cookie"]))
json_values = st.recursive(
    json_leaf,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=12,
)


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


@given(secret=secrets, before=filler, after=filler, payload=json_values)
def test_no_secret_shaped_value_gets_through(
    secret: str, before: str, after: str, payload: Any
) -> None:
    document = {"data": payload, "leak": f"{before} {secret} {after}", "nested": [{"x": secret}]}
    result = redact(document)
    for text in _strings(result.value["leak"]) + _strings(result.value["nested"]):
        assert not contains_secret(text), text
    body = secret.split("=", 1)[-1].split(" ", 1)[-1]
    if body not in before + after:
        assert body not in str(result.value["leak"]) + str(result.value["nested"])
    assert "$.leak" in result.paths


@given(payload=json_values, secret=secrets)
def test_redaction_is_idempotent(payload: Any, secret: str) -> None:
    document = {
        "p": payload,
        "s": secret,
        "j": f'{{"password": "{len(secret)}", "t": "{secret[:3]}"}}',
    }
    once = redact(document)
    twice = redact(once.value)
    assert twice.value == once.value
    assert twice.paths == ()
    for text in _strings(once.value):
        assert not contains_secret(text)


@pytest.mark.parametrize(
    "text",
    [
        " Authorization: Basic 00000000000000000000 \r",
        "Cookie: a=b\r\nHost: h",
        "x\rBearer abcdefghij\r",
    ],
)
def test_header_values_before_carriage_returns(text: str) -> None:
    # Found by hypothesis: a lone "\r" after a redacted header value.
    once = redact_text(text)
    assert not contains_secret(once)
    assert redact_text(once) == once
