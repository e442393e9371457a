"""A secret in any string field of any tape event kind is redacted before it is stored.

The engine's drafts carry their member message (``origin``), and the journal takes
their proto3 JSON as plain by construction: only the secret screen decides whether
``redact`` runs. This walks the generated tape members (``engine.model.tape``), puts
a secret into each string field (top level, repeated and map values, and the string
fields of nested messages) and prepares the draft as the engine makes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import betterproto2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.core.ids import new_ulid
from palyra.engine.model.tape import ENGINE_ACTOR, MEMBER_TYPES, kind_of, payload_of
from palyra.journal import EventDraft, JournalConfig
from palyra.journal.write.prepare import prepare_draft

# Each is caught by a different rule of ``core.redaction`` (a span inside free text).
SECRETS = (
    "Bearer abcdefghijklmnopqrstuvwxyz0123",
    "sk-ABCDEFGHIJKLMNOPQRSTUV",
    "AKIAABCDEFGHIJKLMNOP",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "token=hunter2hunter2",
)


def _string_fields(cls: type[betterproto2.Message], depth: int = 0
                   ) -> Iterator[tuple[str, ...]]:
    """Paths to every string slot of ``cls``: ``(field,)``, ``(field, "[]")`` for a
    repeated string, ``(field, "{}")`` for a map value, nested messages' own paths."""
    meta = cast(Any, cls)._betterproto
    for name, fm in meta.meta_by_field_name.items():
        if fm.map_meta is not None:
            if fm.map_meta[1].proto_type == "string":  # (key meta, value meta)
                yield (name, "{}")
        elif fm.proto_type == "string":
            yield (name, "[]") if fm.repeated else (name,)
        elif fm.proto_type == "message" and depth < 2:
            inner = meta.cls_by_field[name]
            if isinstance(inner, type) and issubclass(inner, betterproto2.Message):
                for path in _string_fields(inner, depth + 1):
                    yield (name, "[]", *path) if fm.repeated else (name, *path)


def _with(cls: type[betterproto2.Message], path: tuple[str, ...], text: str) -> Any:
    name, rest = path[0], path[1:]
    if not rest:
        return cls(**{name: text})
    if rest[0] == "{}":
        return cls(**{name: {"k": f"note {text} end"}})
    if rest[0] == "[]":
        if len(rest) == 1:
            return cls(**{name: ["first", text]})
        inner = cast(Any, cls)._betterproto.cls_by_field[name]
        return cls(**{name: [_with(inner, rest[1:], text)]})
    inner = cast(Any, cls)._betterproto.cls_by_field[name]
    return cls(**{name: _with(inner, rest, text)})


CASES = [(kind, path) for kind, cls in sorted(MEMBER_TYPES.items())
         for path in _string_fields(cls)]


def test_every_kind_has_string_fields_to_try() -> None:
    kinds = {kind for kind, _ in CASES}
    assert len(kinds) >= len(MEMBER_TYPES) - 2 and len(CASES) > 40


@pytest.mark.parametrize(("kind", "path"), CASES, ids=[f"{k}.{'.'.join(p)}" for k, p in CASES])
def test_a_secret_in_this_field_is_redacted(kind: str, path: tuple[str, ...]) -> None:
    for secret in SECRETS:
        _check(kind, path, f"see {secret} here")


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(CASES), secret=st.sampled_from(SECRETS),
       before=st.text(alphabet="abc xyz.,:", max_size=12))
def test_a_secret_anywhere_in_free_text_is_redacted(case: tuple[str, tuple[str, ...]],
                                                     secret: str, before: str) -> None:
    kind, path = case
    _check(kind, path, f"{before} {secret}")


def _check(kind: str, path: tuple[str, ...], text: str) -> None:
    member = _with(MEMBER_TYPES[kind], path, text)
    assert kind_of(member) == f"tape.{kind}"
    draft = EventDraft(kind=kind_of(member), actor=ENGINE_ACTOR, session_id=new_ulid(),
                       run_id=new_ulid(), tape=True, payload=payload_of(member),
                       origin=member)
    prepared = prepare_draft(draft, JournalConfig(), 1_700_000_000_000)
    for secret in SECRETS:
        assert secret.encode() not in prepared.payload, (kind, path)
        assert secret not in repr(prepared.value), (kind, path)
    assert prepared.redactions, (kind, path)
    assert prepared.origin is None  # followers get the redacted payload, not the member
