"""The one declaration of an event's header fields.

:class:`EventHeader` is the source of truth for which fields an event carries
beside its payload, in which order, and how each is laid out in the hash
preimage. Every other shape derives from it:

* the hash layout (``palyra.core.chain.event_preimage``) walks
  :data:`HEADER_LAYOUT`;
* the journal's stored record, its export line and the public ``StoredEvent``
  subclass :class:`EventHeader`, so they gain its fields, in its order;
* copies between those shapes go through :func:`header_values`.

Only a draft (what a caller hands the journal) declares its header fields on
its own, because it lacks the :data:`ASSIGNED_FIELDS` and its public
signature is pinned; ``tests/journal/test_event_header_shapes.py`` checks it
still names exactly :data:`DRAFT_FIELDS`.

Adding, removing or reordering a field here changes the hash of every event,
so it is a journal format change (new ``EVENT_TAG`` version), never a refactor.
"""

from __future__ import annotations

import enum
import operator
from typing import Annotated, Final, get_type_hints

import msgspec


class HashAs(enum.Enum):
    """How ``event_preimage`` encodes a header field (primitives in ``palyra.core.chain``)."""

    U64 = "u64"
    """Unsigned, 8 bytes big-endian."""
    I64 = "i64"
    """Two's complement signed, 8 bytes big-endian."""
    TEXT = "text"
    """``u32(len(utf8)) || utf8``."""


class EventHeader(msgspec.Struct, frozen=True):
    """Every hashed field of an event other than its redaction list and payload bytes."""

    position: Annotated[int, HashAs.U64]
    event_id: Annotated[str, HashAs.TEXT]
    session_id: Annotated[str, HashAs.TEXT]
    run_id: Annotated[str, HashAs.TEXT]
    tape_seq: Annotated[int, HashAs.I64]
    kind: Annotated[str, HashAs.TEXT]
    actor: Annotated[str, HashAs.TEXT]
    ts_ms: Annotated[int, HashAs.I64]
    principal: Annotated[str, HashAs.TEXT]
    device_id: Annotated[str, HashAs.TEXT]
    channel: Annotated[str, HashAs.TEXT]


HEADER_FIELDS: Final[tuple[str, ...]] = EventHeader.__struct_fields__
"""The header's field names in declared (and hashed) order."""


def _layout() -> tuple[tuple[str, HashAs], ...]:
    hints = get_type_hints(EventHeader, include_extras=True)
    layout = []
    for name in HEADER_FIELDS:
        # Exactly one encoding per field, or the import fails: no field is hashed by guess.
        [wire] = [m for m in hints[name].__metadata__ if isinstance(m, HashAs)]
        layout.append((name, wire))
    return tuple(layout)


HEADER_LAYOUT: Final[tuple[tuple[str, HashAs], ...]] = _layout()
"""``(field, encoding)`` pairs in hashed order, read off the annotations above."""

ASSIGNED_FIELDS: Final[frozenset[str]] = frozenset({"position", "tape_seq"})
"""Header fields the journal assigns at commit; a draft never carries them."""

DRAFT_FIELDS: Final[tuple[str, ...]] = tuple(n for n in HEADER_FIELDS if n not in ASSIGNED_FIELDS)
"""Header fields a caller may set on a draft, in header order."""

RECORD_SHARED_FIELDS: Final[frozenset[str]] = frozenset({"position", "session_id"})
"""Header fields a journal record (format 2) states once for all its events.

A record holds consecutive positions of one session: an event's position is
the record's first position plus its index, its session the record's.
"""

RECORD_EVENT_FIELDS: Final[tuple[str, ...]] = tuple(
    n for n in HEADER_FIELDS if n not in RECORD_SHARED_FIELDS
)
"""Header fields each event of a record carries itself, in header (and hashed) order."""

HeaderValues = tuple[int, str, str, str, int, str, str, int, str, str, str]
"""The types of :data:`HEADER_FIELDS`, in order.

It spells the types a second time only so mypy can check a splatted copy
(``Shape(*header_values(x), ...)``) argument by argument against the
shape's constructor; ``test_event_header_shapes.py`` holds it to :class:`EventHeader`.
"""

_VALUES = operator.attrgetter(*HEADER_FIELDS)


def header_values(source: EventHeader) -> HeaderValues:
    """``source``'s header fields in declared order.

    Every header-bearing shape subclasses :class:`EventHeader` with its own
    fields after the header's, so ``Shape(*header_values(other), **rest)``
    copies a header between shapes without naming its fields.
    """
    values: HeaderValues = _VALUES(source)
    return values
