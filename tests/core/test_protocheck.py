"""Strict wire-format checks: every valid encoding passes, malformed bytes are named."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from palyra_gen.palyra import v1

from palyra.core.protocheck import WireFormatError, check_wire_format

from .test_protojson import MESSAGES, messages


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda cls: cls.__name__)
@settings(max_examples=25)
@given(data=st.data())
def test_every_valid_encoding_passes(cls: type[Any], data: st.DataObject) -> None:
    message = data.draw(messages(cls))
    check_wire_format(bytes(message), cls)


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (bytes.fromhex("ffffffff0f01"), "wire type 7"),  # huge field number, bad wire type
        (b"\x12\x10abc", "runs past the end"),  # session_id length 16, 3 bytes follow
        (b"\x0a\x05ab", "wire type 2, expected 0"),  # v (uint32) sent length-delimited
        (b"\x12\x02\xff\xfe", "not valid UTF-8"),  # session_id with invalid UTF-8
        (b"\x08", "truncated varint"),  # v with no value
        (b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "longer than 10 bytes"),
        (b"\x00\x01", "field number 0"),
        (b"\x0b", "wire type 3"),  # start-group
        (b"\x2a\x03\x0a\x01\xff", "input.text: string is not valid UTF-8"),  # nested message
        (b"\xfa\x01\x00", "unknown field 31"),
    ],
)
def test_malformed_requests_are_named(raw: bytes, problem: str) -> None:
    with pytest.raises(WireFormatError, match=problem):
        check_wire_format(raw, v1.CreateRunRequest)


def test_map_entries_and_packed_fields_are_checked() -> None:
    session = v1.Session(session_id="s", tool_postures={"add": v1.ToolPosture.ASK_EACH_TIME})
    check_wire_format(bytes(session), v1.Session)
    # map entry whose value (enum, varint) arrives length-delimited
    bad_entry = b"\x0a\x03add\x12\x01\x02"
    with pytest.raises(WireFormatError, match="map entry field 2"):
        check_wire_format(b"\x6a" + bytes([len(bad_entry)]) + bad_entry, v1.Session)
    attachments = v1.MessageInput(text="t", attachments=[v1.Attachment(name="a", data=b"\x00")])
    check_wire_format(bytes(attachments), v1.MessageInput)


@settings(max_examples=200)
@given(st.binary(max_size=40))
def test_random_bytes_either_pass_or_raise_the_named_error(raw: bytes) -> None:
    # Never another exception type: the gateway maps exactly this one.
    try:
        check_wire_format(raw, v1.RunStreamRequest)
    except WireFormatError:
        return
    v1.RunStreamRequest.parse(raw)  # what passed must parse
