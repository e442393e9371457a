"""The optimised redaction returns exactly what the frozen original does.

``_redaction_oracle`` is ``palyra.core.redaction`` as it was before the fast
paths (lazy paths, per-pattern literal gates, copy-on-write walk); every
input must give the same value, the same paths and the same text.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from palyra.core import redaction
from tests.core import _redaction_oracle as oracle

_TOKEN_CHARS = "ABCDEFGHJKMNPQRSTVWXYZabcdefghijkmnopqrstuvwxyz0123456789_-."
_token = st.text(alphabet=_TOKEN_CHARS, min_size=0, max_size=40)
_upper = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=14, max_size=18)
# Characters that case-fold onto ASCII letters in regexes, and other oddities.
_odd = st.sampled_from(
    [
        "\u0130",
        "\u0131",
        "\u017f",
        "\u212a",
        "\u00e9",
        "\u2028",
        "\r",
        "\n",
        "\t",
        " ",
        "<",
        ">",
        "=",
        ":",
        "&",
        '"',
        "'",
        "\\",
        "{",
        "[",
        "}",
        "]",
    ]
)
_secret_shapes = st.one_of(
    _token.map(lambda t: f"Bearer {t}"),
    _token.map(lambda t: f"bEaReR  {t}=="),
    _token.map(lambda t: f"sk-{t}"),
    _token.map(lambda t: f"sk-proj-{t}"),
    _token.map(lambda t: f"token={t}"),
    _token.map(lambda t: f"Api-Key={t}"),
    _token.map(lambda t: f"client_secret={t}"),
    _token.map(lambda t: f"pwd={t}"),
    _token.map(lambda t: f"password={t}"),
    _upper.map(lambda t: f"AKIA{t}"),
    _upper.map(lambda t: f"ASIA{t}"),
    _token.map(lambda t: f"ghp_{t}{t}"),
    _token.map(lambda t: f"github_pat_{t}"),
    _token.map(lambda t: f"xoxb-{t}"),
    _token.map(lambda t: f"eyJ{t}.eyJ{t}.{t}"),
    _token.map(lambda t: f"-----BEGIN RSA PRIVATE KEY-----\n{t}\n-----END RSA PRIVATE KEY-----"),
    _token.map(lambda t: f"-----BEGIN PRIVATE KEY-----{t}"),
    _token.map(lambda t: f"Authorization: Basic {t}"),
    _token.map(lambda t: f"proxy-authorization:{t}\r\n"),
    _token.map(lambda t: f"Set-Cookie: {t}"),
    _token.map(lambda t: f"cookie:<redacted>{t}"),
    st.sampled_from(
        [
            "<redacted>",
            "",
            "=",
            "gh",
            "eyj",
            "xox",
            "akia",
            "private key",
            "Cookie",
            "authoriza\u0130tion: x",
            "\u017fk-abcdefghijklmnop",
            "a\u017fia",
            "\u017fecret=abc",
            "Bearer\u00a0abcdefghijk",
            "AKİA1234567890ABCDEF",
        ]
    ),
)
_piece = st.one_of(_secret_shapes, st.text(max_size=12), _odd, _token)
_texts = st.lists(_piece, max_size=5).map("".join)
_key_words = st.sampled_from(
    [
        "password",
        "Password",
        "API_KEY",
        "apiKey",
        "x-api-key",
        "token",
        "Token",
        "max_tokens",
        "accessToken",
        "ACCESS_TOKEN",
        "id_token",
        "PIN",
        "pin_code",
        "spinner",
        "Cookie",
        "set-cookie",
        "secret",
        "clientSecret",
        "privateKey",
        "inputJson",
        "text",
        "a b",
        "1x",
        "x\n",
        "",
        "é",
        "\u0130d_token",
        "_",
        "#json",
        "[0]",
    ]
)
_keys = st.one_of(_key_words, st.text(max_size=8), st.lists(_key_words, max_size=3).map("_".join))
_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    _texts,
)


def _json_in_string(children: st.SearchStrategy[Any]) -> st.SearchStrategy[str]:
    def dump(value: Any, ascii_only: bool, pad: str) -> str:
        return pad + json.dumps(value, ensure_ascii=ascii_only)

    return st.builds(dump, children, st.booleans(), st.sampled_from(["", " ", "\n\t", "x"]))


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    containers = st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4)
    return containers | _json_in_string(containers)


payloads = st.recursive(_leaves, _extend, max_leaves=16)


def _same(value: Any) -> None:
    new, old = redaction.redact(value), oracle.redact(value)
    assert new.paths == old.paths
    assert new.value == old.value
    assert json.dumps(new.value) == json.dumps(old.value)  # same types, same key order


@given(payload=payloads)
@settings(max_examples=400)
def test_redact_equals_the_oracle(payload: Any) -> None:
    _same(payload)
    _same({"p": payload, "l": [payload, payload]})


@given(text=_texts)
@settings(max_examples=400)
@example("accepted session=01M80FBSS16C81E6KKFD3P8P3J principal=user:bench")
@example("AUTHORİZATION: secret")
@example("\u017fecret=hunter2")
@example("x=1 ghost eyJ")
def test_redact_text_equals_the_oracle(text: str) -> None:
    assert redaction.redact_text(text) == oracle.redact_text(text)
    assert redaction.contains_secret(text) == oracle.contains_secret(text)


@given(key=_keys)
def test_key_classification_equals_the_oracle(key: str) -> None:
    assert redaction.is_secret_key(key) == oracle.is_secret_key(key)
    assert redaction._secret(key) == oracle.is_secret_key(key)


@pytest.mark.parametrize(
    "value",
    [
        {"inputJson": '{"a":0,"b":1}', "toolName": "add"},
        {"outputJson": '{"password": "x", "k": "token=abc"}', "n": [1, "sk-abcdefghijklmnop"]},
        {"detailsJson": ' [{"api_key": "v"}, "Bearer abcdefghij"]'},
        {"s": "{not json Bearer abcdefghijkl"},
        {"deep": '{"a": "{\\"b\\": \\"{\\\\\\"password\\\\\\": 1}\\"}"}'},
        {"password": "<redacted>", "api_key": "", "secret": None, "pin": False, "x": {"y": 0}},
        {"weird key": {"Authorization": ["a"]}, "x\n": {"password": 1}, "": {"token": "t"}},
    ],
)
def test_examples_equal_the_oracle(value: Any) -> None:
    _same(value)


def test_unchanged_input_is_not_copied_and_never_mutated() -> None:
    payload = {"a": {"b": ["x", 1]}, "c": '{"d": 1}'}
    assert redaction.redact(payload).value is payload
    secret = {"a": {"password": "p"}, "b": ["x"]}
    result = redaction.redact(secret)
    assert secret == {"a": {"password": "p"}, "b": ["x"]}
    assert result.value == {"a": {"password": "<redacted>"}, "b": ["x"]}
    assert result.value["b"] is secret["b"]
