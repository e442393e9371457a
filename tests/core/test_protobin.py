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
