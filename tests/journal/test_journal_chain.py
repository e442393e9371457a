"""The pure core: canonical encoding and the documented hash layouts."""

from __future__ import annotations

import hashlib
import struct
from typing import Any

import pytest

from palyra.core.canonical import canonical_bytes, decode_canonical, normalize
from palyra.core.chain import (
    GENESIS,
    checkpoint_message,
    event_hash,
    event_preimage,
    link_hash,
    record_body,
    record_hash,
    record_head,
    record_row,
)
from palyra.core.errors import InvalidArgument
from palyra.core.event_header import EventHeader

HEADER = EventHeader(
    position=7,
    event_id="01HZZZZZZZZZZZZZZZZZZZZZZZ",
    session_id="sess",
    run_id="run",
    tape_seq=3,
    kind="tape.status",
    actor="run_engine",
    ts_ms=1_700_000_000_000,
    principal="admin:me",
    device_id="dev",
    channel="",
)


def _text(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">I", len(raw)) + raw


def test_event_preimage_matches_documented_layout() -> None:
    # Built independently from docs/journal/format.md, so a layout change is caught.
    payload = canonical_bytes({"b": 1, "a": "x"})
    prev = bytes(range(32))
    expected = (
        b"palyra.journal.event.v1\x00"
        + prev
        + struct.pack(">Q", 7)
        + _text(HEADER.event_id)
        + _text("sess")
        + _text("run")
        + struct.pack(">q", 3)
        + _text("tape.status")
        + _text("run_engine")
        + struct.pack(">q", 1_700_000_000_000)
        + _text("admin:me")
        + _text("dev")
        + _text("")
        + struct.pack(">I", 1)
        + _text("$.password")
        + struct.pack(">I", len(payload))
        + payload
    )
    assert event_preimage(prev, HEADER, ["$.password"], payload) == expected
    assert event_hash(prev, HEADER, ["$.password"], payload) == hashlib.sha256(expected).digest()


def test_canonical_payload_bytes_are_pinned() -> None:
    # Sorted keys, smallest int forms, float64 always.
    assert canonical_bytes(normalize({"b": 1.0, "a": [1, -1, 2**40]})).hex() == (
        "82a1619301ffcf0000010000000000a162cb3ff0000000000000"
    )


def test_link_and_checkpoint_layouts() -> None:
    digest = hashlib.sha256(b"e").digest()
    assert (
        link_hash(GENESIS, 1, digest)
        == hashlib.sha256(
            b"palyra.journal.link.v1\x00" + GENESIS + struct.pack(">Q", 1) + digest
        ).digest()
    )
    assert checkpoint_message(5, digest, -1) == (
        b"palyra.journal.checkpoint.v1\x00" + struct.pack(">Q", 5) + digest + struct.pack(">q", -1)
    )
    with pytest.raises(ValueError):
        link_hash(b"short", 1, digest)


def test_every_field_changes_the_hash() -> None:
    payload = canonical_bytes({"x": 1})
    base = event_hash(GENESIS, HEADER, [], payload)
    for field, value in [
        ("position", 8),
        ("event_id", "01HZZZZZZZZZZZZZZZZZZZZZZY"),
        ("session_id", "s2"),
        ("run_id", "r2"),
        ("tape_seq", 4),
        ("kind", "k"),
        ("actor", "a"),
        ("ts_ms", 1),
        ("principal", "p"),
        ("device_id", "d"),
        ("channel", "c"),
    ]:
        changed = EventHeader(**{**_fields(HEADER), field: value})
        assert event_hash(GENESIS, changed, [], payload) != base, field
    assert event_hash(GENESIS, HEADER, ["$.x"], payload) != base
    assert event_hash(GENESIS, HEADER, [], canonical_bytes({"x": 2})) != base
    assert event_hash(b"\x01" * 32, HEADER, [], payload) != base


def test_length_prefixes_prevent_field_shifting() -> None:
    a = EventHeader(**{**_fields(HEADER), "session_id": "ab", "run_id": "c"})
    b = EventHeader(**{**_fields(HEADER), "session_id": "a", "run_id": "bc"})
    assert event_hash(GENESIS, a, [], b"") != event_hash(GENESIS, b, [], b"")


def _fields(header: EventHeader) -> dict[str, Any]:
    return {name: getattr(header, name) for name in header.__slots__}


@pytest.mark.parametrize(
    "value",
    [
        2**63,
        -(2**63) - 1,
        float("nan"),
        float("inf"),
        {1: "x"},
        b"bytes",
        object(),
        {"s": "\ud800"},
    ],
)
def test_normalize_rejects_values_outside_the_model(value: object) -> None:
    with pytest.raises(InvalidArgument):
        normalize({"v": value})


def test_normalize_bounds_and_round_trip() -> None:
    value = {"max": 2**63 - 1, "min": -(2**63), "t": (1, 2), "nested": {"f": -0.0, "n": None}}
    plain = normalize(value)
    assert plain["t"] == [1, 2]
    assert decode_canonical(canonical_bytes(plain)) == plain


def test_normalize_rejects_deep_nesting() -> None:
    deep: object = 1
    for _ in range(100):
        deep = [deep]
    with pytest.raises(InvalidArgument):
        normalize({"d": deep})


def _mp(value: Any) -> bytes:
    """A tiny canonical MessagePack writer for the test: str, int, list, pre-encoded bytes."""
    if isinstance(value, bytes):
        return value  # already canonical (the payload map)
    if isinstance(value, str):
        raw = value.encode()
        if len(raw) < 32:
            return bytes([0xA0 | len(raw)]) + raw
        assert len(raw) < 256
        return b"\xd9" + bytes([len(raw)]) + raw
    if isinstance(value, int):
        if 0 <= value < 128:
            return bytes([value])
        if -32 <= value < 0:
            return struct.pack(">b", value)
        assert value >= 0
        return b"\xcf" + struct.pack(">Q", value)
    assert isinstance(value, list) and len(value) < 16
    return bytes([0x90 | len(value)]) + b"".join(_mp(v) for v in value)


def test_record_layout_matches_documented_layout() -> None:
    # Built from the text of docs/journal/format.md ("Record format 2", "Hash chain: exact byte layout").
    payload = canonical_bytes({"b": 1, "a": "x"})
    prev = bytes(range(32))
    first = EventHeader(**{**_fields(HEADER), "tape_seq": 3})
    second = EventHeader(**{**_fields(HEADER), "event_id": "01HZZZZZZZZZZZZZZZZZZZZZZY",
                            "tape_seq": -1, "kind": "note"})  # fmt: skip
    rows = [
        record_row(first, 3, ["$.password"], payload),
        record_row(second, -1, [], canonical_bytes({})),
    ]
    body = record_body(rows)

    def event(h: EventHeader, redactions: list[str], raw: bytes) -> list[Any]:
        return [h.event_id, h.run_id, h.tape_seq, h.kind, h.actor, h.ts_ms, h.principal,
                h.device_id, h.channel, redactions, raw]  # fmt: skip

    assert body == _mp([event(first, ["$.password"], payload), event(second, [], b"\x80")])
    head = record_head(prev, 7, 2, "sess")
    assert head == (
        b"palyra.journal.record.v2\x00" + prev + struct.pack(">Q", 7) + struct.pack(">I", 2)
        + _text("sess")
    )  # fmt: skip
    assert record_hash(head, body) == hashlib.sha256(head + body).digest()
    with pytest.raises(ValueError):
        record_head(prev, 7, 0, "sess")


def test_stored_record_front_matches_documented_offsets() -> None:
    from palyra.journal.format.record import build_record, decode_record

    head = record_head(GENESIS, 5, 1, "s")
    body = record_body([record_row(HEADER, 3, [], canonical_bytes({"x": 1}))])
    value, digest, link = build_record(head, body, b"\x07" * 32, 5)
    assert value[0] == 0x02 and value[1:33] == digest and value[33:65] == link
    assert value[65:] == head + body and digest == hashlib.sha256(value[65:]).digest()
    assert link == link_hash(b"\x07" * 32, 5, digest)
    assert struct.unpack(">QII", value[122:138]) == (5, 1, 1) and value[138:139] == b"s"
    record = decode_record(value)
    assert (record.first, record.last, record.session_id, record.prev_hash) == (5, 5, "s", GENESIS)
    [event] = record.events()
    assert (event.position, event.session_id, event.tape_seq, event.payload) == (
        5,
        "s",
        3,
        {"x": 1},
    )
