"""The fast binary encoder gives exactly ``bytes(message)`` for every message of the spec."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from palyra_gen import proto_binary
from palyra_gen.codec_runtime import decode_table
from palyra_gen.palyra import v1

from palyra.core.protobin import decode_binary, encode_binary

from .test_protojson import MESSAGES, messages


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda cls: cls.__name__)
@settings(max_examples=15)
@given(data=st.data())
def test_encode_and_decode_agree_with_betterproto(cls: type[Any], data: st.DataObject) -> None:
    """encode_binary gives ``bytes(message)``; decode_binary gives ``cls.parse``."""
    message = data.draw(messages(cls))
    encoded = encode_binary(message)
    assert encoded == bytes(message)
    assert cls.parse(encoded) == message
    decoded = decode_binary(cls, encoded)
    assert type(decoded) is cls
    assert decoded == cls.parse(encoded) == message
    assert bytes(decoded) == encoded


def test_oneof_member_with_default_value_is_kept() -> None:
    event = v1.TapeEvent(run_id="r", status=v1.RunStatus())
    assert encode_binary(event) == bytes(event)
    assert v1.TapeEvent.parse(encode_binary(event)).status is not None


def test_every_spec_message_gets_a_generated_codec() -> None:
    assert set(MESSAGES) <= set(proto_binary.BODIES)
    assert set(MESSAGES) == set(proto_binary.BINARY_TABLES)  # map fields included


def test_map_entries_decode_as_parse_reads_them() -> None:
    """Map fields (a tool attestation's facts, on every step's tape) decode by table, with
    the entry rules of ``parse``: a missing key or value is the entry's default, a later
    entry for a key replaces the earlier one, and unknown entry fields are skipped."""
    with_maps = [cls for cls in MESSAGES
                 if any(fm.map_meta for fm in cls._betterproto.meta_by_field_name.values())]
    assert with_maps  # the spec has some: the map readers are exercised
    facts = v1.ToolAttestation(proposal_id="p", facts={"mcp.server": "add", "": "empty key"})
    raw = bytes(facts)
    assert decode_binary(v1.ToolAttestation, raw) == facts
    entries = [
        b"\x2a\x05\x0a\x01k\x12\x00",  # k -> ""
        b"\x2a\x03\x12\x01v",  # no key: "" -> v
        b"\x2a\x06\x0a\x01k\x12\x01w",  # k again: replaces
        b"\x2a\x08\x0a\x01x\x18\x07\x12\x01y",  # an unknown field 3 inside the entry
    ]
    raw = b"\x0a\x01p" + b"".join(entries)
    expected = v1.ToolAttestation.parse(raw)
    assert expected.facts == {"k": "w", "": "v", "x": "y"}
    table = proto_binary.BINARY_TABLES[v1.ToolAttestation]
    decoded = decode_table(v1.ToolAttestation, table, raw)  # no fallback to parse
    assert decoded == expected == decode_binary(v1.ToolAttestation, raw)
    assert type(decoded.facts) is dict


def test_edge_values_encode_as_betterproto_does() -> None:
    result = v1.ToolResult(proposal_id="p", success=False, output_json="", timed_out=True)
    assert encode_binary(result) == bytes(result)
    event = v1.TapeEvent(run_id="é" * 200, tape_seq=2**63, position=127, ts_unix_ms=-1,
                         agent_loop=v1.AgentLoop())
    assert encode_binary(event) == bytes(event)
    parsed = v1.TapeEvent.parse(encode_binary(event) + b"\x98\x06\x01")  # an unknown field
    assert encode_binary(parsed) == bytes(parsed)


@settings(max_examples=300)
@given(raw=st.binary(max_size=200), cls=st.sampled_from(MESSAGES))
def test_decode_binary_agrees_with_parse_on_arbitrary_bytes(raw: bytes, cls: type[Any]) -> None:
    """Garbage, truncations and odd wire types: the same message, or betterproto2's error."""
    try:
        expected = cls.parse(raw)
    except Exception as exc:  # whatever betterproto2 raises, decode_binary raises too
        with pytest.raises(type(exc)):
            decode_binary(cls, raw)
        return
    decoded = decode_binary(cls, raw)
    assert decoded == expected
    try:  # betterproto2 itself reads some odd wire types into values it cannot re-encode
        again = bytes(expected)
    except Exception as exc:
        with pytest.raises(type(exc)):
            bytes(decoded)
        return
    assert bytes(decoded) == again


def test_decode_keeps_unknown_fields_packed_and_unpacked_runs() -> None:
    event = v1.TapeEvent(run_id="r", tape_seq=3, status=v1.RunStatus(state=v1.RunState.DONE))
    raw = bytes(event) + b"\x98\x06\x01"  # an unknown varint field (99)
    decoded = decode_binary(v1.TapeEvent, raw)
    assert decoded == event and bytes(decoded) == raw
    # A repeated varint field sent unpacked (one key per value) reads as the packed form does.
    varints = ("enum", "bool", "int32", "int64", "uint32", "uint64")
    found = [(c, n, fm) for c in MESSAGES for n, fm in c._betterproto.meta_by_field_name.items()
             if fm.repeated and fm.proto_type in varints]
    if not found:  # the spec has no such field today; build one that has
        return
    cls, name, fm = found[0]
    unpacked = bytes([(fm.number << 3) | 0, 1, (fm.number << 3) | 0, 1])
    packed = bytes([(fm.number << 3) | 2, 2, 1, 1])
    assert decode_binary(cls, unpacked) == cls.parse(unpacked) == cls.parse(packed)
    assert decode_binary(cls, packed) == cls.parse(packed)
    assert len(getattr(decode_binary(cls, unpacked), name)) == 2
