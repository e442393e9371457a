"""The fast codec gives exactly ``Message.to_dict()`` / ``Message.from_dict()`` for every
message of the spec."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import betterproto2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from palyra_gen import proto_json
from palyra_gen.palyra import v1

from palyra.core.protojson import decode_message, encode_message

MESSAGES = sorted(
    (cls for _, cls in inspect.getmembers(v1, inspect.isclass)
     if issubclass(cls, betterproto2.Message) and cls is not betterproto2.Message),
    key=lambda cls: cls.__name__,
)
_INTS = {"int32": (-(2**31), 2**31 - 1), "sint32": (-(2**31), 2**31 - 1),
         "sfixed32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1), "fixed32": (0, 2**32 - 1),
         "int64": (-(2**63), 2**63 - 1), "sint64": (-(2**63), 2**63 - 1),
         "sfixed64": (-(2**63), 2**63 - 1), "uint64": (0, 2**64 - 1), "fixed64": (0, 2**64 - 1)}


def _scalar(proto_type: str, cls: Any, depth: int) -> st.SearchStrategy[Any]:
    if proto_type == "message":
        return messages(cls, depth + 1)
    if proto_type == "enum":
        return st.sampled_from(list(cls))
    if proto_type == "string":
        return st.text(max_size=6)
    if proto_type == "bool":
        return st.booleans()
    if proto_type == "bytes":
        return st.binary(max_size=6)
    if proto_type in ("float", "double"):
        return st.floats(allow_nan=False, width=32 if proto_type == "float" else 64)
    low, high = _INTS[proto_type]
    return st.integers(low, high)


def messages(cls: type[Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Random instances of ``cls`` (nested messages up to depth 2, one oneof member)."""
    meta = typing.cast(Any, cls)._betterproto
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for name, fm in meta.meta_by_field_name.items():
        if fm.proto_type == "message" and depth >= 2:
            continue
        if fm.proto_type == "map":
            value = _scalar(fm.map_meta[1].proto_type, meta.cls_by_field.get(f"{name}.value"), depth)
            fields[name] = st.dictionaries(st.text(max_size=4), value, max_size=2)
            continue
        single = _scalar(fm.proto_type, meta.cls_by_field.get(name), depth)
        if fm.repeated:
            fields[name] = st.lists(single, max_size=2)
        elif fm.optional:
            fields[name] = st.none() | single
        else:
            fields[name] = single
    groups: dict[str, list[str]] = {}
    for name, fm in meta.meta_by_field_name.items():
        if fm.group and name in fields:
            groups.setdefault(fm.group, []).append(name)

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        values = {name: draw(strategy) for name, strategy in fields.items()}
        for members in groups.values():  # at most one member of each oneof
            keep = draw(st.sampled_from([None, *members]))
            for member in members:
                if member != keep:
                    values[member] = None
        return cls(**values)

    return build()


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda cls: cls.__name__)
@settings(max_examples=15)
@given(data=st.data())
def test_encode_message_equals_to_dict(cls: type[Any], data: st.DataObject) -> None:
    message = data.draw(messages(cls))
    assert encode_message(message) == message.to_dict()


def test_every_spec_message_has_generated_codecs() -> None:
    # No message of the spec wraps a type today, so none is left to betterproto2's
    # slow paths; one that did would show up here first.
    assert set(MESSAGES) <= set(proto_json.JSON_ENCODERS)
    assert set(MESSAGES) <= set(proto_json.JSON_TABLES)


def test_special_values() -> None:
    response = v1.ListRunTapeResponse(next_after_seq=0)  # explicit presence: 0 is kept
    assert encode_message(response) == response.to_dict() == {"nextAfterSeq": "0"}
    empty = v1.WatchRunResponse(event=v1.TapeEvent())  # a set but empty message is kept
    assert encode_message(empty) == empty.to_dict() == {"event": {}}
    # A float field is kept when non-zero; betterproto2's to_dict drops -0.0 like 0.0.
    for value, expected in ((-0.0, {}), (0.0, {}), (1.5, {"olderThanDays": 1.5}),
                            (float("inf"), {"olderThanDays": "Infinity"})):
        request = v1.PruneJournalRequest(older_than_days=value)
        encoded = encode_message(request)
        assert encoded == request.to_dict() == expected
        assert str(encoded) == str(expected)  # -0.0 == 0.0, but not as text


def _same(a: Any, b: Any) -> None:
    # Message equality treats an enum member and its int alike; repr does not.
    assert a == b
    assert repr(a) == repr(b)


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda cls: cls.__name__)
@settings(max_examples=15)
@given(data=st.data())
def test_decode_message_equals_from_dict(cls: type[Any], data: st.DataObject) -> None:
    message = data.draw(messages(cls))
    for casing in (betterproto2.Casing.CAMEL, betterproto2.Casing.SNAKE):
        for include_defaults in (False, True):
            mapping = message.to_dict(casing=casing, include_default_values=include_defaults)
            decoded = decode_message(cls, mapping)
            _same(decoded, cls.from_dict(mapping))
            _same(decoded, message)
    # Unknown keys are skipped when asked to, refused otherwise, like from_dict.
    mapping = {**message.to_dict(), "noSuchField": 1}
    _same(decode_message(cls, mapping, ignore_unknown_fields=True),
          cls.from_dict(mapping, ignore_unknown_fields=True))
    with pytest.raises(KeyError) as fast:
        decode_message(cls, mapping)
    with pytest.raises(KeyError) as slow:
        cls.from_dict(mapping)
    assert str(fast.value) == str(slow.value)


def test_decode_lenient_forms() -> None:
    # Enums by number or member, explicit nulls, int64 from numbers: as from_dict.
    for mapping in ({"state": 3, "message": None}, {"state": v1.RunState.DONE},
                    {"state": "RUN_STATE_FAILED", "reason": "x"}, {"state": 99}):
        _same(decode_message(v1.RunStatus, mapping), v1.RunStatus.from_dict(mapping))
    page = {"nextAfterSeq": 7, "events": [{"runId": "r", "tapeSeq": "3",
                                           "status": {"state": "RUN_STATE_DONE"}}]}
    _same(decode_message(v1.ListRunTapeResponse, page), v1.ListRunTapeResponse.from_dict(page))
    with pytest.raises(ValueError):
        decode_message(v1.RunStatus, {"state": "NOT_A_STATE"})
    with pytest.raises(ValueError):
        v1.RunStatus.from_dict({"state": "NOT_A_STATE"})
