"""Every shape that carries an event header agrees with the one declaration in core.

``palyra.core.event_header.EventHeader`` is the source; these tests fail when a
shape grows, loses or reorders a header field on its own.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import get_args, get_type_hints

import msgspec
import pytest

from palyra.core.chain import event_preimage, record_row
from palyra.core.event_header import (
    ASSIGNED_FIELDS,
    DRAFT_FIELDS,
    HEADER_FIELDS,
    HEADER_LAYOUT,
    RECORD_EVENT_FIELDS,
    EventHeader,
    HashAs,
    HeaderValues,
    header_values,
)
from palyra.journal import EntityWrite, EventDraft, StoredEvent
from palyra.journal._types import JournalConfig
from palyra.journal.format.bundle_format import EventLine
from palyra.journal.format.record import EventRecord, RecordEvent, legacy_stored
from palyra.journal.write.prepare import PreparedEvent, prepare_draft

# Pinned here because the order is the hash layout (docs/journal/format.md): a change
# to this list is a journal format change, not a refactor.
DECLARED = (
    "position", "event_id", "session_id", "run_id", "tape_seq", "kind", "actor", "ts_ms",
    "principal", "device_id", "channel",
)  # fmt: skip

HEADER_SHAPES: list[type[EventHeader]] = [EventRecord, EventLine, StoredEvent, PreparedEvent]


def test_declaration_and_hash_layout_are_pinned() -> None:
    assert HEADER_FIELDS == DECLARED
    assert HEADER_LAYOUT == (
        ("position", HashAs.U64), ("event_id", HashAs.TEXT), ("session_id", HashAs.TEXT),
        ("run_id", HashAs.TEXT), ("tape_seq", HashAs.I64), ("kind", HashAs.TEXT),
        ("actor", HashAs.TEXT), ("ts_ms", HashAs.I64), ("principal", HashAs.TEXT),
        ("device_id", HashAs.TEXT), ("channel", HashAs.TEXT),
    )  # fmt: skip
    assert {"position", "tape_seq"} == ASSIGNED_FIELDS
    assert tuple(n for n in DECLARED if n not in ASSIGNED_FIELDS) == DRAFT_FIELDS


@pytest.mark.parametrize("shape", HEADER_SHAPES, ids=lambda s: s.__name__)
def test_header_shapes_start_with_exactly_the_declared_fields(shape: type[EventHeader]) -> None:
    assert issubclass(shape, EventHeader)
    fields = shape.__struct_fields__
    assert fields[: len(DECLARED)] == DECLARED
    # The shape's own fields never shadow or repeat a header field.
    assert not set(fields[len(DECLARED) :]) & set(DECLARED)


def test_draft_names_exactly_the_caller_settable_header_fields() -> None:
    # EventDraft's signature is public and puts the required kind/actor first,
    # so it is compared as a set; its non-header fields are listed explicitly.
    names = [f.name for f in dataclasses.fields(EventDraft)]
    own = {"tape", "payload", "entity_writes", "origin"}
    assert set(names) - own == set(DRAFT_FIELDS)


def _record() -> EventRecord:
    return EventRecord(
        7, "01HZZZZZZZZZZZZZZZZZZZZZZZ", "sess", "run", 3, "k", "a", 1_700_000_000_000, "p",
        "dev", "ch", v=1, payload=b"\x80", redactions=[], prev_hash=bytes(32), hash=b"\x01" * 32,
        global_hash=b"\x02" * 32,
    )  # fmt: skip


def test_copies_between_shapes_keep_every_header_field() -> None:
    record = _record()
    assert header_values(record) == (
        7, "01HZZZZZZZZZZZZZZZZZZZZZZZ", "sess", "run", 3, "k", "a", 1_700_000_000_000, "p",
        "dev", "ch",
    )  # fmt: skip
    stored = legacy_stored(record)
    assert header_values(stored) == header_values(record)
    line = EventLine(*header_values(record), payload={}, redactions=[], prev_hash="",
                     hash="", global_hash="")  # fmt: skip
    assert header_values(line) == header_values(record)


def test_prepared_event_leaves_assigned_fields_to_the_writer() -> None:
    draft = EventDraft(kind="k", actor="a", session_id="s", run_id="r", tape=True,
                       principal="p", device_id="d", channel="c",
                       event_id="01HZZZZZZZZZZZZZZZZZZZZZZZ", ts_ms=5)  # fmt: skip
    prepared = prepare_draft(draft, JournalConfig(), now_ms=9)
    assert (prepared.position, prepared.tape_seq) == (0, -1)
    for name in DRAFT_FIELDS:
        assert getattr(prepared, name) == getattr(draft, name), name
    assigned = msgspec.structs.replace(prepared, position=4, tape_seq=2)
    assert header_values(assigned)[:5] == (4, draft.event_id, "s", "r", 2)


def test_with_writes_appends_and_keeps_every_other_field() -> None:
    first, second = EntityWrite("runs", "r1", b"x"), EntityWrite("sessions", "s1", None)
    draft = EventDraft(kind="k", actor="a", session_id="s", run_id="r", tape=True,
                       payload={"x": 1}, principal="p", device_id="d", channel="c",
                       event_id="01HZZZZZZZZZZZZZZZZZZZZZZZ", ts_ms=5,
                       entity_writes=(first,))  # fmt: skip
    extended = draft.with_writes(second)
    assert extended.entity_writes == (first, second)
    assert dataclasses.replace(extended, entity_writes=(first,)) == draft
    assert draft.entity_writes == (first,)


def test_draft_init_takes_exactly_its_fields_in_order() -> None:
    # EventDraft has a hand-written __init__ (faster than the generated one):
    # it must take every field, in field order, with the field's default, and set it.
    fields = dataclasses.fields(EventDraft)
    params = list(inspect.signature(EventDraft).parameters.values())
    assert [p.name for p in params] == [f.name for f in fields]
    for f, p in zip(fields, params, strict=True):
        if f.default is not dataclasses.MISSING:
            assert p.default == f.default, f.name
        elif f.default_factory is dataclasses.MISSING:
            assert p.default is inspect.Parameter.empty, f.name
    values = {f.name: f"v-{f.name}" for f in fields}
    draft = EventDraft(**values)  # type: ignore[arg-type]
    assert {f.name: getattr(draft, f.name) for f in fields} == values
    assert dataclasses.replace(draft) == draft
    one, two = EventDraft("k", "a"), EventDraft("k", "a")
    assert one.payload == {} and one.payload is not two.payload  # a fresh dict each
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.kind = "x"  # type: ignore[misc]


def test_header_values_type_matches_the_declaration() -> None:
    hints = get_type_hints(EventHeader)
    assert get_args(HeaderValues) == tuple(hints[name] for name in DECLARED)


def _documented_layout(text: str, start: str, end: str) -> list[tuple[str, str]]:
    block = text[text.index(start) : text.index(end)]
    return re.findall(r"\b(u64|i64|text)\((\w+)\)", block)


_DOCS = Path(__file__).parents[2] / "docs" / "journal" / "format.md"


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        (_DOCS.read_text(), "event_hash = SHA-256(", "u32(n_redactions)"),
        (event_preimage.__doc__ or "", "EVENT_TAG ||", "u32(len(redactions))"),
    ],
    ids=["docs/journal/format.md", "event_preimage docstring"],
)
def test_documented_hash_layout_matches_the_declaration(text: str, start: str, end: str) -> None:
    # The prose layouts are what readers implement against; keep them the code's.
    expected = [(wire.value, name) for name, wire in HEADER_LAYOUT]
    assert _documented_layout(text, start, end) == expected


def test_record_events_carry_the_declared_fields_but_position_and_session() -> None:
    assert tuple(n for n in DECLARED if n not in ("position", "session_id")) == RECORD_EVENT_FIELDS
    assert RecordEvent.__struct_fields__ == (*RECORD_EVENT_FIELDS, "redactions", "payload")


@pytest.mark.parametrize(
    "text",
    [_DOCS.read_text(), record_row.__doc__ or ""],
    ids=["docs/journal/format.md", "record_row docstring"],
)
def test_documented_record_event_array_matches_the_declaration(text: str) -> None:
    start = text.index("[event_id,")
    fields = re.findall(r"\w+", text[start : text.index("[redaction", start)])
    assert tuple(fields) == RECORD_EVENT_FIELDS
