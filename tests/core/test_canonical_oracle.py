"""``canonical.normalize`` (with its plain-value fast path) equals the frozen original."""

from __future__ import annotations

import enum
import json
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.core import canonical
from palyra.core.errors import InvalidArgument
from tests.core import _canonical_oracle as oracle


class _Color(str, enum.Enum):  # noqa: UP042 (a str subclass on purpose)
    RED = "red"


class _Level(enum.IntEnum):
    HIGH = 3


_keys = st.one_of(st.text(max_size=6), st.sampled_from(["a", "é", "\ud800", "x.y"]))
_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.floats(),
    st.text(max_size=8),
    st.sampled_from(["\ud800", "ok\udfff", _Color.RED, _Level.HIGH, b"x", 1j, object]),
)
_values = st.recursive(
    _leaves,
    lambda c: st.one_of(
        st.lists(c, max_size=4),
        st.lists(c, max_size=3).map(tuple),
        st.dictionaries(_keys, c, max_size=4),
        st.dictionaries(st.one_of(_keys, st.integers(0, 3)), c, max_size=2),
        st.dictionaries(_keys, c, max_size=3).map(OrderedDict),
    ),
    max_leaves=14,
)


def _outcome(fn: Any, value: Any, *args: Any) -> tuple[str, Any]:
    try:
        result = fn(value, *args)
    except InvalidArgument as exc:
        return "error", (str(exc), exc.details)
    return "ok", json.dumps(result), type(result)  # type: ignore[return-value]


@given(value=_values, depth=st.sampled_from([0, 0, 0, 5, 62, 63, 64, 65]))
@settings(max_examples=400)
def test_normalize_equals_the_oracle(value: Any, depth: int) -> None:
    for wrapped in (value, {"p": value}, [value, {"q": [value]}]):
        assert _outcome(canonical.normalize, wrapped, "$", depth) == _outcome(
            oracle.normalize, wrapped, "$", depth
        )


@pytest.mark.parametrize("levels", [62, 63, 64, 65, 66])
@pytest.mark.parametrize("leaf", [1, {}, [], "x"])
def test_depth_limit_equals_the_oracle(levels: int, leaf: Any) -> None:
    value: Any = leaf
    for i in range(levels):
        value = {"k": value} if i % 2 else [value]
    assert _outcome(canonical.normalize, value) == _outcome(oracle.normalize, value)


def test_normalize_copies() -> None:
    payload = {"a": [1, {"b": "c"}]}
    plain = canonical.normalize(payload)
    assert plain == payload
    assert plain is not payload and plain["a"] is not payload["a"]
    assert plain["a"][1] is not payload["a"][1]
