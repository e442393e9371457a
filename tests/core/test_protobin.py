"""The fast binary encoder gives exactly ``bytes(message)`` for every message of the spec."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from palyra_gen.palyra import v1

from palyra.core.protobin import encode_binary

from .test_protojson import MESSAGES, messages


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda cls: cls.__name__)
@settings(max_examples=15)
@given(data=st.data())
def test_encode_binary_equals_bytes(cls: type[Any], data: st.DataObject) -> None:
    message = data.draw(messages(cls))
    encoded = encode_binary(message)
    assert encoded == bytes(message)
    assert cls.parse(encoded) == message


def test_oneof_member_with_default_value_is_kept() -> None:
    event = v1.TapeEvent(run_id="r", status=v1.RunStatus())
    assert encode_binary(event) == bytes(event)
    assert v1.TapeEvent.parse(encode_binary(event)).status is not None


def test_every_spec_message_gets_a_compiled_encoder_or_falls_back() -> None:
    from palyra.core.protobin import _compiled, _plan

    for cls in MESSAGES:
        assert (_compiled(cls) is None) == (_plan(cls) is None), cls.__name__
    assert _compiled(v1.TapeEvent) is not None


def test_edge_values_encode_as_betterproto_does() -> None:
    result = v1.ToolResult(proposal_id="p", success=False, output_json="", timed_out=True)
    assert encode_binary(result) == bytes(result)
    event = v1.TapeEvent(run_id="é" * 200, tape_seq=2**63, position=127, ts_unix_ms=-1,
                         agent_loop=v1.AgentLoop())
    assert encode_binary(event) == bytes(event)
    parsed = v1.TapeEvent.parse(encode_binary(event) + b"\x98\x06\x01")  # an unknown field
    assert encode_binary(parsed) == bytes(parsed)
