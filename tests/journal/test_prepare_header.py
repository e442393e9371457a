"""``prepare``'s header check: one test for the usual draft, the field-by-field rules otherwise.

The fast test (plain ASCII ``str`` within the limit) must accept exactly what the
per-field rules accept: a ``str``, valid UTF-8, at most the field's limit in UTF-8
bytes, and ``kind`` not empty. The property below checks every header text
against that reference rule, ASCII or not.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.core.errors import InvalidArgument
from palyra.journal import EventDraft, JournalConfig
from palyra.journal.write.prepare import MAX_FIELD_BYTES, MAX_ID_BYTES, prepare

LIMITS = {
    "session_id": MAX_ID_BYTES,
    "run_id": MAX_ID_BYTES,
    "kind": MAX_FIELD_BYTES,
    "actor": MAX_FIELD_BYTES,
    "principal": MAX_FIELD_BYTES,
    "device_id": MAX_FIELD_BYTES,
    "channel": MAX_FIELD_BYTES,
}
CONFIG = JournalConfig()


def _valid(field: str, value: object) -> bool:
    """The per-field rule, written out plainly."""
    if not isinstance(value, str):
        return False
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return size <= LIMITS[field] and (field != "kind" or bool(value))


def _draft(field: str, value: object) -> EventDraft:
    fields: dict[str, Any] = {"kind": "k", "actor": "a", field: value}
    return EventDraft(**fields)


def _accepted(field: str, value: object) -> bool:
    try:
        [event] = prepare([_draft(field, value)], CONFIG)
    except InvalidArgument as exc:
        assert exc.details.get("field") == field, exc.details
        return False
    assert getattr(event, field) == value
    assert type(getattr(event, field)) is str
    return True


def _around(limit: int) -> st.SearchStrategy[object]:
    # Texts near the limit in characters: ASCII (one byte each), two- and
    # three-byte characters (under the limit in characters, over it in bytes),
    # lone surrogates (not UTF-8), and values that are not texts at all.
    sizes = st.integers(0, limit + 2) | st.sampled_from([limit - 1, limit, limit + 1])
    return st.one_of(
        sizes.map(lambda n: "x" * n),
        st.tuples(sizes, st.sampled_from(["é", "€", "\ud800", " "])).map(
            lambda p: "a" * max(0, p[0] - 1) + p[1]
        ),
        st.tuples(st.integers(0, limit // 2 + 2), st.sampled_from(["é", "€"])).map(
            lambda p: p[1] * p[0]
        ),
        st.text(max_size=20),
        st.sampled_from([None, 1, b"bytes", 1.5]),
    )


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_header_fields_are_accepted_exactly_by_the_per_field_rule(data: st.DataObject) -> None:
    field = data.draw(st.sampled_from(sorted(LIMITS)))
    value = data.draw(_around(LIMITS[field]))
    assert _accepted(field, value) == _valid(field, value), (field, value)


@pytest.mark.parametrize("field", sorted(LIMITS))
def test_each_field_at_and_over_its_limit(field: str) -> None:
    limit = LIMITS[field]
    assert _accepted(field, "x" * limit)
    assert not _accepted(field, "x" * (limit + 1))
    # Under the limit in characters, over it in UTF-8 bytes.
    assert not _accepted(field, "é" * (limit // 2 + 1))
    assert _accepted(field, "é" * (limit // 2))
    assert not _accepted(field, 7)
    assert not _accepted(field, "\ud800")


def test_a_str_subclass_is_stored_as_a_plain_str() -> None:
    class Name(str):
        pass

    [event] = prepare([EventDraft("k", Name("actor"))], CONFIG)
    assert event.actor == "actor" and type(event.actor) is str
