"""``prepare`` remembers header texts and kinds that passed, never a combination it did not check.

A run's drafts share one header (session, run, actor, principal, device, channel), so
``prepare_draft`` checks each header and each kind once; a draft whose header or kind
breaks a limit must still be refused after its other half was seen, and ids given by
callers must still be compared inside one append.
"""

from __future__ import annotations

import pytest

from palyra.core.errors import AlreadyExists, InvalidArgument
from palyra.core.ids import new_ulid
from palyra.journal import EventDraft, JournalConfig
from palyra.journal.write.prepare import MAX_FIELD_BYTES, MAX_ID_BYTES, prepare, prepare_draft

CONFIG = JournalConfig()
NOW = 1_700_000_000_000


def _draft(**fields: object) -> EventDraft:
    base: dict[str, object] = {"kind": "test.kind", "actor": "user:a", "session_id": "s1",
                               "run_id": "r1", "principal": "user:a", "device_id": "d",
                               "channel": "c"}
    base.update(fields)
    return EventDraft(**base)  # type: ignore[arg-type]


def test_a_long_kind_is_refused_with_a_header_seen_before() -> None:
    run = new_ulid()
    prepare_draft(_draft(run_id=run), CONFIG, NOW)  # the header is remembered
    with pytest.raises(InvalidArgument, match="kind"):
        prepare_draft(_draft(run_id=run, kind="k" * (MAX_FIELD_BYTES + 1)), CONFIG, NOW)
    with pytest.raises(InvalidArgument, match="kind"):
        prepare_draft(_draft(run_id=run, kind="kind\u00e9" + "k" * MAX_FIELD_BYTES), CONFIG, NOW)


def test_a_long_header_text_is_refused_with_a_kind_seen_before() -> None:
    prepare_draft(_draft(kind="test.seen"), CONFIG, NOW)  # the kind is remembered
    with pytest.raises(InvalidArgument, match="session_id"):
        prepare_draft(_draft(kind="test.seen", session_id="s" * (MAX_ID_BYTES + 1)), CONFIG, NOW)
    with pytest.raises(InvalidArgument, match="actor"):
        prepare_draft(_draft(kind="test.seen", actor="a" * (MAX_FIELD_BYTES + 1)), CONFIG, NOW)


def test_non_ascii_header_texts_are_checked_each_time() -> None:
    draft = _draft(channel="canal-\u00e9")
    assert prepare_draft(draft, CONFIG, NOW).channel == "canal-\u00e9"
    with pytest.raises(InvalidArgument, match="channel"):
        prepare_draft(_draft(channel="\udc00"), CONFIG, NOW)


def test_given_ids_are_compared_inside_one_append() -> None:
    given = new_ulid()
    with pytest.raises(AlreadyExists):
        prepare([_draft(event_id=given), _draft(), _draft(event_id=given)], CONFIG)
    fresh = prepare([_draft(), _draft(), _draft(event_id=new_ulid())], CONFIG)
    assert len({e.event_id for e in fresh}) == 3
