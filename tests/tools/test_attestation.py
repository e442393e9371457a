"""Attestation and argument digests are pure, stable and unambiguous."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from palyra.tools import ToolResult, args_digest, attest, canonical_args_json


def _manual(fields: list[str]) -> str:
    h = hashlib.sha256(b"palyra.tool.attestation.v1")
    for field in fields:
        raw = field.encode()
        h.update(len(raw).to_bytes(8, "big") + raw)
    return h.hexdigest()


def test_attestation_layout() -> None:
    result = ToolResult(True, '{"result":2}')
    expected = _manual(["add", '{"a":1,"b":1}', "ok", '{"result":2}', "", "0", "0"])
    assert attest("add", '{"a":1,"b":1}', result) == expected


def test_attestation_changes_with_every_field() -> None:
    base = attest("add", "{}", ToolResult(True, "1"))
    assert attest("add", "{}", ToolResult(True, "1")) == base
    variants = [
        attest("echo", "{}", ToolResult(True, "1")),
        attest("add", "{ }", ToolResult(True, "1")),
        attest("add", "{}", ToolResult(False, "1")),
        attest("add", "{}", ToolResult(True, "2")),
        attest("add", "{}", ToolResult(True, "1", error="e")),
        attest("add", "{}", ToolResult(True, "1", timed_out=True)),
        attest("add", "{}", ToolResult(True, "1", truncated=True)),
    ]
    assert len({base, *variants}) == 8


@given(st.text(), st.text())
def test_length_prefix_prevents_field_shifting(a: str, b: str) -> None:
    # Moving a character from one field to the next must change the hash.
    result = ToolResult(True, "")
    if a:
        assert attest(a, b, result) != attest(a[:-1], a[-1] + b, result)


def test_args_digest_ignores_key_order() -> None:
    assert args_digest("add", {"a": 1, "b": 2}) == args_digest("add", {"b": 2, "a": 1})
    assert args_digest("add", {"a": 1, "b": 2}) != args_digest("add", {"a": 1, "b": 3})
    assert args_digest("add", {"a": 1}) != args_digest("echo", {"a": 1})
    payload = b'{"args":{"a":1,"b":2},"tool":"add"}'
    assert args_digest("add", {"b": 2, "a": 1}) == hashlib.sha256(payload).hexdigest()
    assert canonical_args_json({"b": {"y": 1, "x": 2}, "a": 0}) == '{"a":0,"b":{"x":2,"y":1}}'
